"""Run a processor over micro-batches in memory, without Spark: the keyed core's semantics
with the whole state in one partition, for trying a processor and testing it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from sessionize.core.declared import declared
from sessionize.core.processor import Processor
from sessionize.core.step import PartitionStep, step
from sessionize.durations import Duration, duration_us
from sessionize.errors import ConfigError


@dataclass
class LocalRun:
    """The outcome of `run_local`: every output's rows over all batches, in batch order, the
    processor's counters added up, the watermark reached and the state left (and the
    follow-on's: its outputs among `outputs`, its counters and state apart)."""

    outputs: dict[str, list[pa.Table]] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    watermark: int | None = None
    state: pa.Table | None = None
    follow_on_counters: dict[str, int] = field(default_factory=dict)
    follow_on_state: pa.Table | None = None

    def output(self, name: str) -> pa.Table:
        """All rows of output `name`."""
        return pa.concat_tables(self.outputs[name])


def run_local(
    processor: Processor,
    batches: Iterable[pa.Table],
    *,
    lateness: Duration = 0,
    lateness_us: int | None = None,
) -> LocalRun:
    """Run `processor` over `batches`, one micro-batch each, state carried between them.

    The watermark after a batch is the latest event time seen so far minus `lateness`
    (it never goes back); without `event_time` there is none. A processor's `follow_on`
    runs in each batch on the rows of the output it takes, with the same watermarks, and
    that output is replaced by the follow-on's outputs, as the engine publishes them.

    Args:
        processor: the processor.
        batches: the input rows of each micro-batch.
        lateness: how far behind the latest event time the watermark stays, as `stream`
            takes it: "10m", a timedelta, or microseconds.
        lateness_us: the same in microseconds (the older spelling; not with `lateness`).

    Returns:
        A LocalRun.

    Raises:
        ProcessorError: as the core raises it for a wrong processor or update.
        ConfigError: `lateness` is not a duration, or both spellings are given.

    Example:
        >>> run = run_local(MyProcessor(), [batch0, batch1], lateness="1h")  # doctest: +SKIP
        >>> run.output("totals").to_pylist()  # doctest: +SKIP
    """
    if lateness_us is not None and lateness != 0:
        raise ConfigError("run_local: give lateness or lateness_us, not both")
    lateness_us = duration_us(lateness, "lateness") if lateness_us is None else lateness_us
    d = declared(processor)
    then = d.follow_on
    run = LocalRun(state=d.rows.empty())
    if then is not None:
        run.follow_on_state = then.declared.rows.empty()
    latest: int | None = None
    for batch_id, rows in enumerate(batches):
        before = run.watermark
        if d.event_time is not None and rows.num_rows:
            times = rows.column(d.event_time)
            us = pc.cast(times, pa.timestamp("us", tz=times.type.tz), safe=False)
            top = pc.max(us.cast(pa.int64())).as_py()
            latest = top if latest is None else max(latest, top)
        after = None if latest is None else latest - lateness_us
        if before is not None:
            after = before if after is None else max(before, after)
        result = step(
            processor,
            run.state,
            rows,
            batch_id=batch_id,
            partition=0,
            watermark_before=before,
            watermark_after=after,
        )
        run.state = _applied(run.state, result, d.store_key)
        if then is not None:
            handed = result.outputs.pop(then.output)
            assert run.follow_on_state is not None
            second = step(
                then.processor,
                run.follow_on_state,
                handed,
                batch_id=batch_id,
                partition=0,
                watermark_before=before,
                watermark_after=after,
            )
            run.follow_on_state = _applied(run.follow_on_state, second, then.declared.store_key)
            _add(run.outputs, run.follow_on_counters, second)
        _add(run.outputs, run.counters, result)
        run.watermark = after
    return run


def _applied(state: pa.Table | None, result: PartitionStep, store_key: str) -> pa.Table:
    assert state is not None
    replaced = pa.concat_arrays([result.removes, result.puts.column(store_key).combine_chunks()])
    kept = state.filter(pc.invert(pc.is_in(state.column(store_key), value_set=replaced)))
    return pa.concat_tables([kept, result.puts])


def _add(
    outputs: dict[str, list[pa.Table]], counters: dict[str, int], result: PartitionStep
) -> None:
    for name, table in result.outputs.items():
        outputs.setdefault(name, []).append(table)
    for name, value in result.counters.items():
        counters[name] = counters.get(name, 0) + value
