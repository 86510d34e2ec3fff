"""Where outputs and state must live when tasks run on other machines than the driver.

Partition tasks write the staged outputs and commit `files` state themselves, on the
executors. A plain local path then names a directory on each worker's own disk: right only
when every worker sees the same directory (one machine, or a shared mount).
"""

from __future__ import annotations

import sys

from sessionize.sinks.kafka import KafkaOutput
from sessionize.spark_session import is_connect

_LOCAL_MASTERS = ("local", "local[")
_ALTERNATIVES = (
    "use an object store or a distributed file system for --output (s3://, gs://, abfss://, "
    "hdfs://) and a server state (postgresql://, redis://, dynamodb://) or files:URI there"
)


def _is_local_path(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def local_path_warning(master: str, output: str, state_uri: str) -> str | None:
    """The one-line warning for local paths on a master whose executors may run elsewhere
    (None when there is nothing to say)."""
    if master.startswith(_LOCAL_MASTERS):
        return None
    local = []
    if output.startswith("kafka://"):  # its tasks stage rows (default: under the checkpoint)
        staged = KafkaOutput.parse(output).staging
        if staged and _is_local_path(staged):
            local.append(f"the Kafka output's staging={staged}")
    elif _is_local_path(output):
        local.append(f"--output {output}")
    if state_uri.startswith("files:") and _is_local_path(state_uri.removeprefix("files:")):
        local.append(f"the files state at {state_uri.removeprefix('files:')}")
    if not local:
        return None
    return (
        f"sessionize: warning: on {master}, {' and '.join(local)} "
        f"{'is a local path' if len(local) == 1 else 'are local paths'}: this works only if "
        f"every worker sees the same path (one machine, or a shared mount); {_ALTERNATIVES}"
    )


def warn_local_paths(spark, output: str, state_uri: str) -> None:
    """Print `local_path_warning` for `spark`'s master to stderr."""
    master = "a Spark Connect server" if is_connect(spark) else spark.sparkContext.master
    line = local_path_warning(master, output, state_uri)
    if line:
        print(line, file=sys.stderr)
