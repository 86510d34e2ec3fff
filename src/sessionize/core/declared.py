"""A processor's declarations, checked once and put in the form the core uses: the key's
type, the output declarations, and the store's rows (`RowSpec`) that hold its state.

The stored rows are the processor's `state_schema` followed by the core's columns: the
key's timer (`timer_column`, timestamp[us, UTC], "never" for a key without a timer) and,
with string keys, the key's 64-bit store key (`store_key_column`, keys.py). An int64 key is
its own store key. So a session state stored before the core existed (events, `expires_at`,
and `user_key` with string ids) is the stored form of a processor with those names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import pyarrow as pa

from sessionize.core.processor import FollowOn, Output, Processor
from sessionize.errors import ConfigError, ProcessorError
from sessionize.state.rows import RowSpec, check_job

TIMER_TYPE = pa.timestamp("us", tz="UTC")
NEVER_US = 253_402_300_799_999_999
"""The timer of a key without one: 9999-12-31T23:59:59.999999Z, the last instant every
reader of a stored row can still show. Later timers are refused."""
WATERMARK = "watermark"
_OUTPUT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,99}$")


@dataclass(frozen=True)
class Declared:
    """What a processor declared, checked."""

    name: str
    key: str
    key_type: pa.DataType
    event_time: str | None
    state_schema: pa.Schema
    outputs: dict[str, Output]
    late_output: str | None  # None without event time: no rows are ever late
    timer: str
    store_key: str  # the key column itself with int64 keys
    rows: RowSpec
    late_names: dict[str, str]  # the late output's names for input columns, where they differ
    follow_on: DeclaredFollowOn | None = None
    allowed_lateness_us: int = 0  # rows this far behind the watermark still reach `process`

    @property
    def string_keys(self) -> bool:
        return bool(pa.types.is_string(self.key_type))

    def late_schema(self, rows: pa.Schema) -> pa.Schema:
        """The late output's columns: as declared, else the input's plus `watermark`."""
        assert self.late_output is not None
        declared = self.outputs.get(self.late_output)
        if declared is not None:
            return declared.schema
        renamed = pa.schema([f.with_name(self.late_names.get(f.name, f.name)) for f in rows])
        return renamed.append(pa.field(WATERMARK, TIMER_TYPE, nullable=False))


@dataclass(frozen=True)
class DeclaredFollowOn:
    """A checked `FollowOn`: the output it takes, its job's suffix and its declaration."""

    output: str
    job: str
    processor: Processor
    declared: Declared

    def job_name(self, job: str) -> str:
        """The follow-on's job in the store, after the first step's `job`."""
        return f"{job}.{self.job}"


def late_names_of(d: Declared) -> tuple[str, ...]:
    """The late output of `d` when it is not one of its declared outputs (its columns are
    then the input's plus `watermark`)."""
    return (d.late_output,) if d.late_output and d.late_output not in d.outputs else ()


def published(d: Declared) -> tuple[str, ...]:
    """Every output a batch of `d` publishes besides the invalid rows, in order: its
    declared ones but the one it hands to a follow-on, its late output, then the
    follow-on's."""
    f = d.follow_on
    mine = [n for n in (*d.outputs, *late_names_of(d)) if f is None or n != f.output]
    if f is not None:
        mine += [*f.declared.outputs, *late_names_of(f.declared)]
    return tuple(mine)


def declared(processor: Processor) -> Declared:
    """Check `processor`'s class attributes; raise ProcessorError naming the first wrong one."""
    d = _declared(processor)
    follow_on = processor.follow_on
    if follow_on is None:
        return d
    return replace(d, follow_on=_follow_on(d, follow_on))


def _follow_on(d: Declared, follow_on: object) -> DeclaredFollowOn:
    """Check a processor's follow-on against what the processor declared."""

    def fail(text: str) -> ProcessorError:
        return ProcessorError(f"processor {d.name}: follow_on {text}")

    if not isinstance(follow_on, FollowOn):
        raise fail("must be a stateful.FollowOn")
    out = d.outputs.get(follow_on.output)
    if out is None or out.mode != "append":
        raise fail(f"names output {follow_on.output!r}, which is not an appended output of it")
    try:
        check_job(follow_on.job)
    except ConfigError as e:
        raise fail(f"job: {e}") from e
    if getattr(follow_on.processor, "follow_on", None) is not None:
        raise fail("has a follow_on of its own: chain one step after another at most")
    then = _declared(follow_on.processor)
    schema = out.schema
    if then.key not in schema.names or schema.field(then.key).type != then.key_type:
        raise fail(
            f"{then.name}'s key '{then.key}' ({then.key_type}) is not a column of output "
            f"'{follow_on.output}'"
        )
    if then.event_time is not None and then.event_time not in schema.names:
        raise fail(
            f"{then.name}'s event time '{then.event_time}' is not a column of output "
            f"'{follow_on.output}'"
        )
    mine = {n for n in (*d.outputs, *late_names_of(d)) if n != follow_on.output}
    clash = sorted(mine & {*then.outputs, *late_names_of(then)})
    if clash:
        raise fail(f"{then.name} writes output(s) {clash}, which {d.name} writes too")
    return DeclaredFollowOn(follow_on.output, follow_on.job, follow_on.processor, then)


def _declared(processor: Processor) -> Declared:
    if not isinstance(processor, Processor):
        raise ProcessorError(
            f"a stateful processor must be an instance of stateful.Processor, "
            f"not {type(processor).__name__}"
        )
    who = processor.name

    def fail(text: str) -> ProcessorError:
        return ProcessorError(f"processor {who}: {text}")

    key = getattr(processor, "key", None)
    schema = getattr(processor, "state_schema", None)
    if not isinstance(key, str) or not key:
        raise fail("`key` must name the input column that keys the state")
    if not isinstance(schema, pa.Schema):
        raise fail("`state_schema` must be a pyarrow Schema")
    if key not in schema.names:
        raise fail(f"`state_schema` lacks the key column '{key}'")
    key_type = schema.field(key).type
    if key_type not in (pa.int64(), pa.string()):
        raise fail(f"key column '{key}' is {key_type}; keys are int64 or string")
    event_time = processor.event_time
    if event_time is not None and (not isinstance(event_time, str) or not event_time):
        raise fail("`event_time` must name a timestamp column of the input, or be None")
    gauges = processor.gauges
    if not isinstance(gauges, tuple) or not all(isinstance(g, str) and g for g in gauges):
        raise fail("`gauges` must be a tuple of counter names")
    timer, store_key = processor.timer_column, processor.store_key_column
    core = [timer] + ([store_key] if key_type == pa.string() else [])
    clash = [n for n in core if n in schema.names]
    if clash:
        raise fail(f"`state_schema` may not use the core's column name(s) {clash}")
    outputs = {name: _output(name, value, fail) for name, value in dict(processor.outputs).items()}
    late = processor.late_output if event_time is not None else None
    if late is not None:
        if not isinstance(late, str) or not _OUTPUT_NAME.match(late):
            raise fail(f"`late_output` {late!r} is not an output name")
        if late in outputs and outputs[late].mode != "append":
            raise fail(f"late output '{late}' must be appended, not replaced by key")
    late_names = processor.late_names
    if not isinstance(late_names, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) and v for k, v in late_names.items()
    ):
        raise fail("`late_names` must map input column names to output column names")
    allowed = processor.allowed_lateness_us
    if not isinstance(allowed, int) or isinstance(allowed, bool) or allowed < 0:
        raise fail("`allowed_lateness_us` must be a non-negative int (microseconds)")
    stored = schema.append(pa.field(timer, TIMER_TYPE, nullable=False))
    if key_type == pa.string():
        stored = stored.append(pa.field(store_key, pa.int64(), nullable=False))
    else:
        store_key = key
    try:
        rows = RowSpec(stored, key=store_key, expiry=timer)
    except ConfigError as e:
        raise fail(str(e)) from e
    return Declared(
        who,
        key,
        key_type,
        event_time,
        schema,
        outputs,
        late,
        timer,
        store_key,
        rows,
        dict(late_names),
        allowed_lateness_us=allowed,
    )


def _output(name: object, value: object, fail: Callable[[str], Exception]) -> Output:
    if not isinstance(name, str) or not _OUTPUT_NAME.match(name):
        raise fail(f"output name {name!r} must be letters, digits and _, starting with a letter")
    if isinstance(value, pa.Schema):
        value = Output(value)
    if not isinstance(value, Output):
        raise fail(f"output '{name}' must be declared as a pyarrow Schema or stateful.Output")
    if not isinstance(value.schema, pa.Schema):
        raise fail(f"output '{name}': its schema must be a pyarrow Schema")
    names = value.schema.names
    if len(set(names)) != len(names):
        raise fail(f"output '{name}' has duplicate column names")
    if value.mode not in ("append", "replace"):
        raise fail(f"output '{name}': mode must be 'append' or 'replace', not {value.mode!r}")
    if value.mode == "replace" and not value.key:
        raise fail(f"output '{name}' is replaced by key: name its key column(s)")
    if value.mode == "append" and value.key:
        raise fail(f"output '{name}' is appended: a key is only for mode='replace'")
    for what, columns in (("key", value.key), ("partition_by", value.partition_by)):
        missing = [c for c in columns if c not in names]
        if missing:
            raise fail(f"output '{name}': {what} column(s) {missing} are not in its schema")
    return value
