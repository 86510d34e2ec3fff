"""Sessions on the `store` engine: the session job's settings and its driver side.

The session logic is the processor `SessionProcessor` (logic/processor.py); the engine is
the one every processor runs on (engines/keyed.py, engines/partition.py). What a session
job adds, so that its checkpoints, records and outputs stay as they are:
- its input: raw records through the parser (JSON lines or typed columns, `--max-future`
  judged by the batch's time), which marks invalid lines with `reason`, `raw`, `source`,
  written to `invalid_events`;
- its outputs: every session sink (Parquet, Delta, PostgreSQL, Kafka), with the event
  mapping's columns, and `open_sessions` replaced by user, rebuilt from the whole state
  when it is behind (`_refresh`);
- its record: the session counters flat in `batch`, the flags' settings (`state_settings`)
  as the job's settings entry, and the session line per batch.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from typing_extensions import override

from sessionize.base_schema import IDENTITY_FIRST_SEEN, IDENTITY_USER_TIME
from sessionize.config import DEFAULT_ATTRIBUTION_LOOKBACK_US, SessionRules, format_duration
from sessionize.engines.batch_marks import parse_marked
from sessionize.engines.keyed import KeyedEngine, KeyedSettings
from sessionize.engines.mapping_check import RECORD_KEY as CHECK_KEY
from sessionize.engines.mapping_check import MappingCheck, count_present, input_names
from sessionize.engines.plan_once import PlanOnce, job_property, properties_reach_jobs
from sessionize.engines.runner import RETAIN, BatchRequest, BatchResult, Engine, Parser
from sessionize.engines.session_report import SUMMED, session_line
from sessionize.events import batch_time, blocks
from sessionize.logic.processor import COUNTERS, DROPPED, SessionProcessor
from sessionize.mapping import EventMapping
from sessionize.parsing import event_columns, parse
from sessionize.schema import (
    CARRIED_SESSION,
    INVALID_EVENTS,
    STATE_EXPIRY,
    Layout,
    layout,
)
from sessionize.sinks.base import Sink
from sessionize.sinks.registry import capabilities, open_sink
from sessionize.state import RowSpec, StateBackend, layout_rows
from sessionize.state.lease import Lease

# The store's measures as a session batch record names them: record name -> the task's
# (engines/partition.py). They follow the engine's counts and the session counters.
_STORE = {
    "state_rows_loaded": "store_rows_loaded",
    "state_rows_written": "store_rows_written",
    "state_round_trips": "state_round_trips",
    "state_bytes_read": "state_bytes_read",
    "state_bytes_written": "state_bytes_written",
    "state_load_us": "state_load_us",
    "state_commit_us": "state_commit_us",
}


# The stored columns an input row never has: a carry row's and an identity row's marks.
STATE_ONLY = (CARRIED_SESSION, IDENTITY_FIRST_SEEN, IDENTITY_USER_TIME)


@dataclass(frozen=True)
class SessionSettings(KeyedSettings):
    """A session job's settings: the processor's (`SessionSettings.of` builds the
    `SessionProcessor` from the rules) and what only sessions have."""

    rules: SessionRules | None = None
    mapping: EventMapping = EventMapping()  # where the fields are; part of the state
    open_sessions: bool = False  # also the `open_sessions` output, replaced by user
    # Events more than this ahead of the batch's time are invalid (None: no limit). A rule
    # on input, not part of the state: not in the record.
    max_future_us: int | None = None

    @classmethod
    def of(
        cls,
        rules: SessionRules,
        partitions: int,
        state_uri: str,
        job: str,
        output: str,
        *,
        max_future_us: int | None = None,
        retain: int = RETAIN,
        maintenance_every: int = 10,
        output_format: str = "parquet",
        epoch: int | None = None,
        mapping: EventMapping | None = None,
        open_sessions: bool = False,
        handoff: str = "",
    ) -> SessionSettings:
        """The settings of a session job with these rules and flags (`handoff`: where the
        sessions go to the users step with identity, engines/handoff.py)."""
        mapping = mapping or EventMapping()
        lay = layout(mapping)
        current = lay.identity and capabilities(output, output_format).keeps_current
        return cls(
            processor=SessionProcessor(rules, lay, open_sessions, identities_current=current),
            input_schema=pa.schema(
                [f for f in lay.stored if f.name not in (STATE_EXPIRY, *STATE_ONLY)]
            ),
            partitions=partitions,
            state_uri=state_uri,
            job=job,
            output=output,
            lateness_us=rules.lateness_us,
            retain=retain,
            maintenance_every=maintenance_every,
            epoch=epoch,
            output_format=output_format,
            rules=rules,
            mapping=mapping,
            open_sessions=open_sessions,
            max_future_us=max_future_us,
            handoff=handoff,
        )

    @property
    def layout(self) -> Layout:
        """The processor's: the mapping's, with `--revise-within` marks in the state."""
        return cast(SessionProcessor, self.processor).layout

    @property
    def revise(self) -> bool:
        return self.rules is not None and self.rules.revise_within_us is not None

    @property
    @override
    def invalid_output(self) -> str:
        return "invalid_events"

    @override
    def split_input(self, rows: pa.Table | None) -> tuple[pa.Table, pa.Table]:
        """Parsed rows from Spark -> (valid events as the layout's event schema, plus
        `user_key` with string ids; invalid lines)."""
        if rows is None or rows.num_rows == 0:
            return self.input_schema.empty_table(), INVALID_EVENTS.empty_table()
        bad = pc.is_valid(rows["reason"])
        valid = rows.filter(pc.invert(bad)).select(event_columns(self.mapping))
        invalid = rows.filter(bad).select([f.name for f in INVALID_EVENTS])
        return valid.cast(self.input_schema), invalid.cast(INVALID_EVENTS)

    @override
    def input_counts(self, rows: pa.Table) -> dict[str, int]:
        """The valid events in which each mapped path is present (engines/mapping_check.py)."""
        return count_present(self.mapping, rows)

    @override
    def row_spec(self) -> RowSpec | None:
        """What the store's rows are (None: the default, schema.STATE)."""
        spec = layout_rows(self.layout)
        return None if spec.is_default else spec

    @override
    def sink(self) -> Sink:
        return open_sink(
            self.output,
            self.output_format,
            job=self.job,
            mapping=self.mapping,
            open_sessions=self.open_sessions,
            revise=self.revise,
        )

    @override
    def record(self) -> dict:
        return settings_record(self)


def plans_once(parser: Parser) -> bool:
    """Whether `parser` is `parse` (with options or not) reading through the block reader:
    its plan with batch marks and `now=batch_time.FROM_JOB` holds nothing of the batch it
    reads, so that one plan serves every micro-batch of a stream."""
    options = parser.keywords if isinstance(parser, functools.partial) else {}
    func = parser.func if isinstance(parser, functools.partial) else parser
    mapping = options.get("mapping") or EventMapping()
    return func is parse and "now" not in options and blocks.plan(mapping) is not None


class SessionEngine(KeyedEngine):
    """The session job's driver side: the parse, the `open_sessions` refresh, its record."""

    settings: SessionSettings
    summed = SUMMED
    totals = Engine.totals  # the engine's totals and the session counters in SUMMED

    def __init__(
        self,
        spark: SparkSession,
        settings: SessionSettings,
        backend: StateBackend | None = None,
        parser: Parser = parse,
        lease: Lease | None = None,
    ):
        super().__init__(spark, settings, backend, lease)
        self.parser = parser  # raw records -> events and invalid rows (JSON lines by default)
        self.parse_plan = PlanOnce()
        self.mapping_check = MappingCheck(settings.mapping)  # judged once per run

    def _plans_once(self, raw: DataFrame) -> bool:
        """Whether the batch's parse is built once per query (`engines/plan_once.py`)."""
        return properties_reach_jobs(raw) and plans_once(self.parser)

    @override
    def run(self, raw: DataFrame, request: BatchRequest, previous: dict) -> BatchResult:
        """The batch's time travels with its job where the parse is built once per query."""
        now = "" if request.now_us is None else str(request.now_us)
        with job_property(raw, batch_time.PROPERTY, now if self._plans_once(raw) else None):
            result = super().run(raw, request, previous)
        check = self.mapping_check.after_batch(
            result.seen, request.last, lambda: input_names(raw, self.parser)
        )
        if check is not None:
            result.fields[CHECK_KEY] = check
        return result

    @override
    def _marked(self, raw: DataFrame, request: BatchRequest, marks: pa.Array) -> DataFrame:
        """Events further than `max_future_us` ahead of the batch's time (`request.now_us`)
        are invalid."""

        # A `now` the reading tasks get (µs, or from their job): they judge `max_future_us`
        # themselves. A valid event's `source` (its file and line) is never read: it stays
        # behind rather than crossing back from the reading task and then the shuffle, a
        # file path on every line.
        def build(now: int | str | None) -> Callable[[DataFrame], DataFrame]:
            return lambda df: parse_marked(
                self.parser,
                df,
                marks,
                now=now,
                max_future_us=self.settings.max_future_us,
                valid_sources=False,
            )

        if self._plans_once(raw):
            return self.parse_plan.over(raw, build(batch_time.FROM_JOB))
        return build(request.now_us)(raw)

    @override
    def _refresh(self, request: BatchRequest) -> bool:
        """Whether an output replaced by key (`open_sessions`, `identities` kept current)
        is behind the state this batch builds on (turned on for a running job, emptied by
        a removal of batches): then the batch hands every key of the state to the logic,
        once."""
        if request.first:
            return False
        kept = [s.name for s in self.sink.outputs.replaced]
        done = (request.previous, request.version)
        return any(self.sink.replaced_as_of(name) not in done for name in kept)

    @override
    def _batch(self, counts: list[dict], records: int) -> dict:
        batch = {
            "invalid": sum(c["invalid"] for c in counts),
            "events_in": sum(c["rows"] for c in counts),
            "late": sum(c["late"] for c in counts),
            DROPPED: sum(c["dropped"] for c in counts),
        }
        for name in COUNTERS:
            batch[name] = sum(c["counters"].get(name, 0) for c in counts)
        for name, measure in _STORE.items():
            batch[name] = sum(c[measure] for c in counts)
        batch["records"] = records
        return batch

    @override
    def progress_line(self, label: str, record: dict) -> str:
        return session_line(label, record)


def settings_record(settings: SessionSettings) -> dict:
    """The settings that are part of the state, as flags spell them: the job's settings."""
    assert settings.rules is not None
    return state_settings(settings.rules, settings.partitions, settings.mapping)


def state_settings(rules: SessionRules, partitions: int, mapping: EventMapping) -> dict:
    """The session settings that are part of the state, as flags spell them: the one
    definition the store's settings entry and the checkpoint's record (api/recorded.py)
    share."""
    if not mapping.anonymous:  # without identity the TTL and lookback mean nothing
        rules = dataclasses.replace(
            rules, user_ttl_us=None, attribution_lookback_us=DEFAULT_ATTRIBUTION_LOOKBACK_US
        )
    return {
        "gap": format_duration(rules.gap_us),
        "lateness": format_duration(rules.lateness_us),
        "close_actions": ",".join(rules.close_actions),
        **rules.record(),
        "partitions": partitions,
        **mapping.record(),
    }
