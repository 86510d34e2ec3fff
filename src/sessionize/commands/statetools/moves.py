"""`sessionize state migrate` and `repartition`: copy the state of a stopped job at its
last committed version into another store (rehashed into another partition count for
repartition), verify the copy, then switch the checkpoint to it in one atomic step.

Rerunnable after a crash at any point: before the switch the job still runs on its old
state, which is only read; a rerun redoes the copy over what an interrupted one left and
switches; after the switch a rerun finds nothing to do.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from pyspark.sql import SparkSession

from sessionize.commands.options import recorded_state
from sessionize.commands.statetools.copy import CopyResult, copy_state
from sessionize.commands.statetools.job import StateJob, locate
from sessionize.commands.statetools.switch import already_switched, switch_checkpoint
from sessionize.engines.placement import user_partitions
from sessionize.errors import ConfigError
from sessionize.faults import pause_point
from sessionize.redaction import redact_uri
from sessionize.spark_session import get_spark


def move_state(
    to: str,
    *,
    checkpoint: str | None = None,
    output: str | None = None,
    state: str | None = None,
    job: str | None = None,
    partitions: int | None = None,
    spark: SparkSession | None = None,
    on_line: Callable[[str], None] = print,
) -> CopyResult | None:
    """Copy the job's state into `to` (a `--state` value) with `partitions` partitions
    (default: as now), verify it and switch the checkpoint; None if it already was."""
    if checkpoint and already_switched(checkpoint, to, partitions):
        on_line(
            f"checkpoint {checkpoint} already runs on state {redact_uri(to)} with these "
            "partitions: nothing to do"
        )
        return None
    sj = locate(checkpoint, output, state, job)
    sj.check_readable()
    if sj.follow_on is not None:
        raise ConfigError(
            f"job '{sj.job}' is one of the two steps of its job (the other: job "
            f"'{sj.follow_on}', a session job's users step with --anonymous-field or a "
            "processor's follow-on): moving them together is not supported yet; keep the "
            "job on its state and partitions"
        )
    count = partitions or sj.partitions
    with sj.lease():
        source = sj.backend()
        target = sj.open(sj.resolve(to))
        if target.uri == source.uri:
            raise ConfigError(
                f"--to {redact_uri(to)} is the job's current state: name another place"
            )
        version = sj.last_version(source)
        assign = None
        if count != sj.partitions:
            session = spark or get_spark("sessionize-state", shuffle_partitions=count)
            assign = functools.partial(user_partitions, session)
        result = copy_state(
            source,
            target,
            sj.job,
            version,
            partitions_in=sj.partitions,
            partitions_out=count,
            rules=sj.rules,
            shape=sj.shape,
            assign=assign,
            on_line=on_line,
        )
        pause_point("before-switch", version)
        on_line(_finish(sj, to, count))
    return result


def _finish(sj: StateJob, to: str, count: int) -> str:
    flags = f"--state {redact_uri(to)}" + (f" --partitions {count}")
    if sj.processor is not None:  # a stateful job: its own script starts it
        flags = f"state={redact_uri(to)!r}, partitions={count}"
        run = "stateful.run" if sj.checkpoint is None else "stateful.stream"
        how = f"`{run}(..., {flags})`"
    else:
        how = f"`sessionize {'batch' if sj.checkpoint is None else 'stream'} {flags}`"
    if sj.checkpoint is None:
        return f"the copy is complete; run the next batches with {how}"
    switch_checkpoint(sj.checkpoint, recorded_state(to), count)
    return (
        f"checkpoint {sj.checkpoint} switched to state {recorded_state(to)}: continue "
        f"with {how} (the old state is untouched; delete it when done)"
    )
