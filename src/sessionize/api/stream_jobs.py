"""The two kinds of stream the launcher starts (api/launcher.py): a session job (a
`Sessionizer` over events) and any processor's job (`stateful.stream`). Each says only
what differs: its checks, its record in the checkpoint, its state and its engine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from pyspark.sql import DataFrame

from sessionize.api.arguments import state_uri
from sessionize.api.inputs import reader
from sessionize.api.launcher import Started, StreamJob, StreamPlaces
from sessionize.api.processor_settings import ProcessorSettings
from sessionize.api.recorded import recorded_state
from sessionize.api.sessionizer_settings import SessionizerSettings, StoreSettings
from sessionize.api.workers import check_workers
from sessionize.engines.agreement import check_agreement
from sessionize.engines.checkpoint import (
    Checkpoint,
    check_or_record,
    check_or_record_processor,
)
from sessionize.engines.choice import SessionRun, engine_for
from sessionize.engines.keyed import settings_record
from sessionize.engines.sessions import SessionSettings
from sessionize.errors import ConfigError
from sessionize.logic.processor import check_revisable
from sessionize.redaction import redact_uri
from sessionize.schema import layout
from sessionize.sinks.owner import STATEFUL_STREAM, STREAM
from sessionize.sinks.registry import check_open_sessions, check_revisions
from sessionize.state.lease import Lease


class SessionJob(Protocol):
    """What a session stream needs of its `Sessionizer` (api/sessionizer.py), which starts
    it: the job's settings, resolved against the checkpoint's record."""

    settings: SessionizerSettings

    def with_checkpoint(
        self, checkpoint: Checkpoint | str, output_format: str | None = None
    ) -> tuple[SessionJob, str]: ...

    def recorded_settings(self, output_format: str) -> dict[str, object]: ...

    def engine_settings(
        self,
        state_uri: str,
        output: str,
        output_format: str,
        open_sessions: bool = False,
        handoff: str = "",
    ) -> SessionSettings: ...


@dataclass
class SessionStream(StreamJob):
    """A `Sessionizer` over a stream of events (a DataFrame, or a function that builds it
    once the checks that need no Spark have passed)."""

    sessionizer: SessionJob
    events: DataFrame | Callable[[], DataFrame]
    open_sessions: bool = False
    owner_kind: str = STREAM

    def names(self) -> StoreSettings:
        return self.sessionizer.settings.store

    def check(self, places: StreamPlaces) -> None:
        engine_for(self.state).check_line(self.state)

    def resolved(self, places: StreamPlaces) -> tuple[SessionStream, str]:
        s, output_format = self.sessionizer.with_checkpoint(places.checkpoint, places.output_format)
        return replace(self, sessionizer=s), output_format

    def check_outputs(self, places: StreamPlaces, output_format: str) -> None:
        s = self.sessionizer.settings
        revise = s.rules.revise_within_us is not None
        if revise:  # what keeps and revises emitted sessions, before anything is recorded
            engine_for(self.state).check_revisions()
            check_revisable(layout(s.mapping), self.open_sessions)
        check_revisions(revise, places.output, output_format)
        if self.open_sessions:  # replaced by user: the engine feeds it, the output keeps it
            engine_for(self.state).check_replaced_by_key()
        check_open_sessions(self.open_sessions, places.output, output_format)

    def record(self, places: StreamPlaces, output_format: str) -> None:
        identity = {"output": places.output}
        if places.input_name != "dataframe":  # a DataFrame's source cannot be named
            identity["input"] = redact_uri(places.input_name)
        settings = self.sessionizer.recorded_settings(output_format)
        check_or_record(places.checkpoint, {**settings, **identity})

    def recorded_input(self, places: StreamPlaces) -> dict[str, str]:
        return {"input": redact_uri(places.input_name)}

    def store_uri(self, checkpoint: Checkpoint) -> str:
        return state_uri(self.state, checkpoint.child("state"))

    def start_engine(self, places: StreamPlaces, output_format: str, lease: Lease) -> Started:
        s, ck = self.sessionizer, places.checkpoint
        store_uri = self.store_uri(ck)
        # The engine of the state: ours opens and checks its store now, before Spark starts.
        kind = engine_for(s.settings.store.state)
        settings = s.engine_settings(
            store_uri, places.output, output_format, self.open_sessions, ck.child("handoff")
        )
        state = kind.open_state(settings, ck, store_uri)
        df = self.events() if callable(self.events) else self.events
        if not df.isStreaming:
            raise ConfigError(
                "stream() needs a streaming DataFrame; use sessions() for a bounded one"
            )
        records, parser = reader(df, s.settings.mapping)
        spark = df.sparkSession
        check_workers(spark)
        run = SessionRun(spark, state, ck.place, parser, lease)
        engine = kind.session_engine(settings, run)
        return Started(spark, engine, records)


@dataclass
class ProcessorStream(StreamJob):
    """A `stateful.Processor` over a streaming DataFrame with its key (and event time)."""

    df: DataFrame
    settings: ProcessorSettings
    owner_kind: str = STATEFUL_STREAM

    def names(self) -> ProcessorSettings:
        return self.settings

    @property
    def processor(self) -> str | None:  # type: ignore[override]
        return self.settings.declared.name

    def check(self, places: StreamPlaces) -> None:
        engine_for(self.state).check_runs_processors(self.state)
        if not self.df.isStreaming:
            raise ConfigError("stateful.stream needs a streaming DataFrame; use stateful.run")
        self.settings.check_columns(self.df)

    def resolved(self, places: StreamPlaces) -> tuple[ProcessorStream, str]:
        return self, places.output_format or "parquet"

    def check_outputs(self, places: StreamPlaces, output_format: str) -> None:
        self.settings.check_outputs(places.output, output_format)

    def record(self, places: StreamPlaces, output_format: str) -> None:
        keyed = self.settings.keyed(
            self.df, self.store_uri(places.checkpoint), places.output, output_format
        )
        check_or_record_processor(
            places.checkpoint,
            {
                **settings_record(keyed),
                "output": places.output,
                "output_format": output_format,
                "outputs": list(keyed.processor_outputs),
                "state": recorded_state(self.state),
                "job": self.job,
            },
        )

    def store_uri(self, checkpoint: Checkpoint) -> str:
        return self.settings.store_uri(checkpoint.child("state"))

    def start_engine(self, places: StreamPlaces, output_format: str, lease: Lease) -> Started:
        ck = places.checkpoint
        store_uri = self.store_uri(ck)
        keyed = self.settings.keyed(
            self.df, store_uri, places.output, output_format, ck.child("handoff")
        )
        engine = engine_for(store_uri).keyed_engine(self.df.sparkSession, keyed, lease)
        then = keyed.follow_on()
        check_agreement(
            engine.backend, ck, store_uri, self.job, then.job if then is not None else None
        )
        check_workers(self.df.sparkSession)
        return Started(self.df.sparkSession, engine, self.df)
