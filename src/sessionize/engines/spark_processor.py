"""Worker side of the `spark` engine: one key's step, as Spark's stateful APIs call it.

Spark calls these once per grouping key (a user) and micro-batch; each call hands that
user's stored open events and new events to `logic.advance` (the only implementation of the
rules), stores what stays open and returns the outputs as rows of one wide schema (`Shapes.wide`,
with a `kind` column) for the driver's foreachBatch to split and write.

- `SessionProcessor` (`spark_rocksdb.py`, PySpark 4.1+): `transformWithState` (Row-based
  API, RocksDB provider). The open events of a user are a ListState; one event-time timer
  per user, at its `expires_at`.
- `session_step_pandas`: `applyInPandasWithState` (HDFS-backed provider). The open events
  are one state value holding them as an Arrow IPC stream (PySpark 4.3 cannot read back
  array columns of a state schema), with an event-time timeout at `expires_at`.

Invalid lines travel through the same operator (so the query reads its source once), keyed
by their user id when they have one, else 0 (or ""); the step passes them straight to
`invalid_events` and they never touch the state.

Watermark: both receive the watermark Spark computed at the end of the previous batch
(`max(event_time) - lateness` over earlier batches, in ms), the watermark rule of
docs/design.md, "Semantics", as `watermark_before`. It judges lateness here, inside
`advance` (strict `<`, late events go
to `late_events`), because the operator's input carries no watermarked column, so Spark
drops nothing. It also decides emission: a session with `watermark > closed_at` is emitted
by the first batch that sees such a watermark (see the module doc of `spark_state`).

Timer bounds (measured on Spark 4.3): a transformWithState timer at T fires when
`watermark_ms >= T`; an applyInPandasWithState timeout at T fires when `watermark_ms > T`.
With watermarks in whole ms, `watermark_us > closed_at` holds exactly when
`watermark_ms > floor(closed_at / 1000)`, hence the two timer formulas below.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Row

from sessionize.config import SessionRules
from sessionize.logic import StepResult, advance
from sessionize.mapping import EventMapping
from sessionize.schema import (
    INVALID_EVENTS,
    OUTPUT_PARTITIONS,
    STATE_EXPIRY,
    TS,
    Layout,
    layout,
)

# ---------------------------------------------------------------------------- schemas

KEY = "key"
# Counters of one step, carried by one `stats` row per call that has events or state.
STATS_FIELDS = (
    "events_in",
    "on_time",
    "duplicates",
    "open_sessions_delta",
    "open_users_delta",
    "bot_events",
)
STATS = "stats"
# The state value of a user: its open events (the layout's state) as one Arrow IPC stream.
PANDAS_STATE_DDL = "open_events binary"


@dataclass(frozen=True)
class Shapes:
    """The operator's row shapes for one event mapping (user id type, kept attributes)."""

    mapping: EventMapping

    @property
    def layout(self) -> Layout:
        return layout(self.mapping)

    @functools.cached_property
    def input_columns(self) -> list[str]:
        """Columns of the operator's input after the grouping key, in order: the event with
        its time in µs, then the invalid line's fields (`reason` NULL for a valid event)."""
        names = self.layout.event.names
        return [names[0], "event_us", *names[2:], *INVALID_EVENTS.names]

    @property
    def state_strings(self) -> list[str]:
        """The stored rows' string columns after the time (schema 3: `carried_session` too)."""
        return self.layout.state_rows.names[2:]

    @property
    def strings(self) -> list[str]:
        """The event's string columns after its time: page, action and the attributes."""
        return self.layout.event.names[2:]

    @functools.cached_property
    def reason_pos(self) -> int:  # positions in an input Row, which starts with the key
        return 1 + self.input_columns.index("reason")

    @functools.cached_property
    def invalid_pos(self) -> int:
        return 1 + self.input_columns.index(INVALID_EVENTS.names[0])

    @functools.cached_property
    def wide(self) -> pa.Schema:
        """`kind`, the union of the output columns (timestamps as int64 µs), the counters."""
        fields: dict[str, pa.Field] = {}
        for name, sch in self.layout.outputs.items():
            for f in sch:
                if f.name in OUTPUT_PARTITIONS.get(name, ()):
                    continue  # derived again by the writer
                typ = pa.int64() if pa.types.is_timestamp(f.type) else f.type
                if f.name in fields:
                    assert fields[f.name].type == typ, f.name
                else:
                    fields[f.name] = pa.field(f.name, typ)
        counters = [pa.field(c, pa.int64()) for c in STATS_FIELDS]
        return pa.schema([pa.field("kind", pa.string()), *fields.values(), *counters])

    @functools.cached_property
    def pos(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.wide.names)}

    @functools.cached_property
    def out_row(self):
        return Row(*self.wide.names)

    @functools.cached_property
    def open_event_ddl(self) -> str:
        """The open events of a user in Spark's state: an event without its user (the key)."""
        cols = [
            "event_us bigint",
            *(f"`{n}` string" for n in self.state_strings),
            "expires_us bigint",
        ]
        return ", ".join(cols)

    @property
    def user_type(self) -> pa.DataType:
        return self.layout.user_type


def spark_type(schema: pa.Schema):
    """An Arrow schema as a Spark StructType."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)


# ---------------------------------------------------------------------------- the step


def _watermark_us(watermark_ms: int) -> int | None:
    """Spark's watermark starts at 0 (no event seen yet): that is the contract's minus infinity."""
    return watermark_ms * 1000 if watermark_ms > 0 else None


def step(
    rules: SessionRules, state: pa.Table, events: pa.Table, watermark_ms: int, lay: Layout
) -> StepResult:
    """Advance one user by one batch, judged and emitted by Spark's current watermark."""
    wm = _watermark_us(watermark_ms)
    return advance(state, events, rules=rules, watermark_before=wm, watermark_after=wm, layout=lay)


def expiry_us(table: pa.Table) -> int | None:
    """`expires_at` (µs) of a user's state rows, or None when it has none."""
    if table.num_rows == 0:
        return None
    return table[STATE_EXPIRY][0].cast(pa.int64()).as_py()


def step_tuples(sh: Shapes, res: StepResult, had_state: bool) -> Iterator[tuple]:
    """The step's outputs and its counters as wide tuples."""
    yield from wide_tuples(sh, "sessions", res.sessions)
    yield from wide_tuples(sh, "page_views", res.page_views)
    yield from wide_tuples(sh, "late_events", res.late)
    if res.events is not None:
        yield from wide_tuples(sh, "events", res.events)
    s = res.stats
    counters = {
        "kind": STATS,
        "events_in": s.events_in,
        "on_time": s.on_time,
        "duplicates": s.duplicates,
        "bot_events": s.bot_events,
        "open_sessions_delta": s.open_sessions_after - s.open_sessions_before,
        "open_users_delta": int(res.state_puts.num_rows > 0) - int(had_state),
    }
    row: list[object] = [None] * len(sh.wide)
    for name, value in counters.items():
        row[sh.pos[name]] = value
    yield tuple(row)


def wide_tuples(sh: Shapes, kind: str, table: pa.Table) -> Iterator[tuple]:
    """Rows of one output as tuples of the wide schema (timestamps as int µs)."""
    n = table.num_rows
    if n == 0:
        return
    nones = [None] * n
    cols: list[list] = [nones] * len(sh.wide)
    cols[0] = [kind] * n
    for name in table.column_names:
        pos = sh.pos.get(name)
        if pos is None:
            continue  # a partition column
        col = table[name]
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.int64())
        values = col.to_pylist()
        if pa.types.is_map(col.type):  # Arrow gives (key, value) pairs; a Spark map is a dict
            values = [None if v is None else dict(v) for v in values]
        cols[pos] = values
    yield from zip(*cols, strict=True)


# ------------------------------------------------ transformWithState's rows and timers


def _timer(expires_us: int | None) -> int | None:
    """The transformWithState timer (ms) that fires exactly when watermark > expires_at."""
    return None if expires_us is None else expires_us // 1000 + 1


def _events_from_rows(sh: Shapes, rows: list) -> pa.Table:
    """Input Rows of valid events (input columns after the key) -> the event schema."""
    cols = list(zip(*rows, strict=True))[1:]  # drop the key
    arrays = [
        pa.array(cols[0], sh.user_type),
        pa.array(cols[1], pa.int64()).cast(TS),
        *(pa.array(c, pa.string()) for c in cols[2 : 2 + len(sh.strings)]),
    ]
    return pa.Table.from_arrays(arrays, schema=sh.layout.event)


def _invalid_from_rows(sh: Shapes, rows: list) -> pa.Table:
    if not rows:
        return INVALID_EVENTS.empty_table()
    cols = list(zip(*rows, strict=True))[sh.invalid_pos :]
    return pa.Table.from_arrays([pa.array(c, pa.string()) for c in cols], schema=INVALID_EVENTS)


def _state_from_tuples(sh: Shapes, user, tuples: list[tuple]) -> pa.Table:
    """ListState tuples (the open event DDL) -> the layout's state schema."""
    if not tuples:
        return sh.layout.state.empty_table()
    cols = list(zip(*tuples, strict=True))
    n = len(sh.state_strings)
    return pa.Table.from_arrays(
        [
            pa.array([user] * len(tuples), sh.user_type),
            pa.array(cols[0], pa.int64()).cast(TS),
            *(pa.array(c, pa.string()) for c in cols[1 : 1 + n]),
            pa.array(cols[1 + n], pa.int64()).cast(TS),
        ],
        schema=sh.layout.state,
    )


def _state_tuples(sh: Shapes, state: pa.Table) -> list[tuple]:
    """State rows of one user -> ListState tuples (the open event DDL)."""
    cols = [
        state["event_time"].cast(pa.int64()).to_pylist(),
        *(state[name].to_pylist() for name in sh.state_strings),
        state[STATE_EXPIRY].cast(pa.int64()).to_pylist(),
    ]
    return list(zip(*cols, strict=True))


# ------------------------------------------------------------------ applyInPandasWithState


def session_step_pandas(rules: SessionRules, mapping: EventMapping | None = None):
    """The function for applyInPandasWithState(..., EventTimeTimeout) over the input columns."""
    sh = Shapes(mapping or EventMapping())

    def fn(key, pdfs, state):
        wm_ms = state.getCurrentWatermarkMs()
        events, invalid = _split_pandas(sh, pdfs)
        rows = list(wide_tuples(sh, "invalid_events", invalid))
        stored = _decode(state.get[0]) if state.exists else sh.layout.state.empty_table()
        if events.num_rows or stored.num_rows:
            res = step(rules, stored, events, wm_ms, sh.layout)
            expires = expiry_us(res.state_puts)
            if expires is None:
                state.remove()
            else:
                if events.num_rows or res.sessions.num_rows or state.hasTimedOut:
                    state.update((_encode(res.state_puts),))
                # Fires when watermark_ms > T, i.e. exactly when watermark > expires_at.
                state.setTimeoutTimestamp(expires // 1000)
            rows.extend(step_tuples(sh, res, stored.num_rows > 0))
        if rows:
            yield _pandas(sh, rows)

    return fn


def _split_pandas(sh: Shapes, pdfs: Iterable) -> tuple[pa.Table, pa.Table]:
    """Input frames -> (valid events as the event schema, invalid lines as INVALID_EVENTS)."""
    tables = [pa.Table.from_pandas(pdf[sh.input_columns], preserve_index=False) for pdf in pdfs]
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return sh.layout.event.empty_table(), INVALID_EVENTS.empty_table()
    t = pa.concat_tables(tables, promote_options="permissive")
    bad = pc.is_valid(t["reason"])
    valid = t.filter(pc.invert(bad))
    events = pa.Table.from_arrays(
        [
            valid["user_id"].cast(sh.user_type),
            valid["event_us"].cast(pa.int64()).cast(TS),
            *(valid[c].cast(pa.string()) for c in sh.strings),
        ],
        schema=sh.layout.event,
    )
    invalid = t.filter(bad)
    invalid = pa.Table.from_arrays(
        [invalid[c].cast(pa.string()) for c in INVALID_EVENTS.names], schema=INVALID_EVENTS
    )
    return events, invalid


def _encode(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _decode(blob: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(blob)).read_all()


def _pandas(sh: Shapes, rows: list[tuple]):
    """Wide tuples -> a pandas frame whose integer columns keep None (not NaN) for nulls and
    whose maps are dicts (Spark converts a map from a dict, not from Arrow's pairs)."""
    columns = list(zip(*rows, strict=True))
    arrays = [pa.array(c, f.type) for c, f in zip(columns, sh.wide, strict=True)]
    table = pa.Table.from_arrays(arrays, schema=sh.wide)
    return table.to_pandas(integer_object_nulls=True, maps_as_pydicts="strict")
