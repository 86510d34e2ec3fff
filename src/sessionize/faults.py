"""Named pause points, so crash tests can kill -9 a real process at an exact step.

The points: `before-state-commit` and `after-state-commit` (partition 0's state of the
batch, in the store engine's task),
`before-publish`, `after-publish` and `after-record` (the batch runner's steps 3 and 4);
`kafka-before-produce`, `kafka-produced` (exactly once: in the open transaction; at least
once: the rows sent, the marker not yet) and `published-kafka` (the Kafka sink's publish);
`rewind-outputs`, `rewind-state` and `rewind-logs` (a rewind to batch N, after those steps);
`state-copy-partition` (a state copy committed target partition N) and `before-switch`
(the copy is verified and recorded, the checkpoint not yet switched); for a local Parquet
output NAME, `compacted-files-NAME` and `compacted-manifest-NAME` (compaction generation
G), and `view-linking-NAME`, `view-built-NAME`, `view-converting-NAME`,
`view-switched-NAME` and `view-dropping-NAME` (view V, sinks/views.py); a local output's
move (`maintain --move-output`, sinks/tree_move.py): `move-copying` (after file N),
`move-copied` and `move-recorded` (0), `move-removing` (after file N).

`SESSIONIZE_PAUSE_AT=after-publish:3` makes the process print `PAUSED after-publish 3`
and sleep when it reaches that point in batch 3; the test then kills it. With
`SESSIONIZE_RESUME_FILE=PATH` it instead goes on once PATH exists (a driver that stalls, as
in a long GC pause, and then wakes up). Unset (always, in production) it costs one
dictionary lookup per batch.
"""

from __future__ import annotations

import os
import sys
import time

# The marker goes to the driver's stdout, also from a Spark task: the CLI sends file
# descriptor 2 (where the JVM puts what its Python workers print) to a log file. The
# driver names its stdout here before Spark starts; tasks inherit it (one machine).
if os.environ.get("SESSIONIZE_PAUSE_AT") and "SESSIONIZE_PAUSE_OUT" not in os.environ:
    os.environ["SESSIONIZE_PAUSE_OUT"] = f"/proc/{os.getpid()}/fd/1"


def pause_point(name: str, version: int) -> None:
    wanted = os.environ.get("SESSIONIZE_PAUSE_AT")
    if wanted and wanted == f"{name}:{version}":
        sys.stdout.flush()
        with open(os.environ.get("SESSIONIZE_PAUSE_OUT", "/dev/stdout"), "a") as out:
            out.write(f"PAUSED {name} {version}\n")
        resume = os.environ.get("SESSIONIZE_RESUME_FILE")
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not (resume and os.path.exists(resume)):
            time.sleep(0.2)
