"""Which engine runs a job on a given `--state`: the one place that tells the engines apart.

The API asks `engine_for(state)` for the engine of a state and then asks that engine what
it can do (run any processor, feed outputs replaced by key) and to open itself; the
backward tools find a stopped checkpoint's engine here too (`restorable`, from the state
the checkpoint recorded). No caller names an engine or a kind of state.

    our store (files, postgresql://, redis://, dynamodb://)   any processor, sessions too
    Spark's state store (spark-rocksdb, spark-hdfs)           sessions only (engines/spark_state.py)
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from pyspark.sql import SparkSession
from typing_extensions import override

from sessionize import spark_version
from sessionize.engines.agreement import check_agreement
from sessionize.engines.checkpoint import CheckpointLike, check_follow_on_rows
from sessionize.engines.keyed import KeyedEngine, KeyedSettings
from sessionize.engines.restorable import RestorableState
from sessionize.engines.runner import Engine, Parser
from sessionize.engines.sessions import SessionEngine, SessionSettings
from sessionize.engines.spark_restorable import SparkRestorable
from sessionize.engines.spark_state import PROVIDERS, SparkStateEngine
from sessionize.engines.store_restorable import StoreRestorable
from sessionize.errors import ConfigError
from sessionize.sinks import replaced
from sessionize.sinks.registry import open_sink
from sessionize.state import StateBackend
from sessionize.state.lease import Lease


@dataclass(frozen=True)
class SessionRun:
    """Where a session stream's engine runs: its Spark session, the state `open_state`
    opened (None: Spark's), the checkpoint's place, the parser of the input's records
    and the lease the batches are fenced by."""

    spark: SparkSession
    state: StateBackend | None
    checkpoint: str
    parser: Parser
    lease: Lease | None


class EngineKind(ABC):
    """An engine as a job chooses it by its state: what it can do, how it opens."""

    # The engine's backward half, for the tools that work on a stopped checkpoint.
    restorable: type[RestorableState]

    @abstractmethod
    def owns(self, state: str) -> bool:
        """Whether this engine keeps `state` (as `--state` spells it, or as recorded)."""

    def check_replaced_by_key(self) -> None:  # noqa: B027 - most engines can
        """Raises ConfigError (one line) unless the engine can feed outputs replaced by key
        (`open_sessions`): the refresh after a rewind hands the whole state to the logic, so
        the engine must be able to read all of it."""

    def check_revisions(self) -> None:  # noqa: B027 - most engines can
        """Raises ConfigError (one line) unless the engine keeps emitted sessions for
        `--revise-within` (our store's state rows)."""

    def check_line(self, state: str) -> None:  # noqa: B027 - most engines run on every line
        """Raises EnvironmentProblem (one line) unless the installed Spark line runs the
        engine's operator for `state` (`spark_version`)."""

    def check_runs_processors(self, state: str) -> None:  # noqa: B027 - most engines do
        """Raises ConfigError (one line) unless the engine runs any `stateful.Processor`
        (else: sessions only)."""

    @abstractmethod
    def open_state(
        self, settings: SessionSettings, checkpoint: CheckpointLike, shown_uri: str
    ) -> StateBackend | None:
        """Before Spark starts: open a session job's state and check that it goes with
        `checkpoint` (`shown_uri`: the state as messages name it). Returns what
        `session_engine` is given."""

    @abstractmethod
    def session_engine(self, settings: SessionSettings, run: SessionRun) -> Engine:
        """The engine of a session stream, over `parser`'s records."""

    def keyed_engine(
        self, spark: SparkSession, settings: KeyedSettings, lease: Lease | None
    ) -> KeyedEngine:
        """The engine of a processor's job (its state opened and checked).

        Raises:
            ConfigError: the engine runs sessions only (`check_runs_processors`).
        """
        self.check_runs_processors(settings.state_uri)
        raise NotImplementedError(type(self).__name__)


class OurStore(EngineKind):
    """Our versioned store (engines/keyed.py; sessions: engines/sessions.py)."""

    restorable = StoreRestorable

    @override
    def owns(self, state: str) -> bool:
        return True  # every state no other engine claims

    @override
    def open_state(
        self, settings: SessionSettings, checkpoint: CheckpointLike, shown_uri: str
    ) -> StateBackend:
        backend = settings.open_state()
        backend.check()
        then = settings.follow_on()  # the users step's job, with identity
        check_agreement(
            backend, checkpoint, shown_uri, settings.job, then.job if then is not None else None
        )
        check_follow_on_rows(backend, then)
        return backend

    @override
    def session_engine(self, settings: SessionSettings, run: SessionRun) -> Engine:
        return SessionEngine(run.spark, settings, run.state, parser=run.parser, lease=run.lease)

    @override
    def keyed_engine(
        self, spark: SparkSession, settings: KeyedSettings, lease: Lease | None
    ) -> KeyedEngine:
        backend = settings.open_state()
        backend.check()
        return KeyedEngine(spark, settings, backend, lease=lease)


class SparkState(EngineKind):
    """Spark's own state store in the checkpoint (engines/spark_state.py): an engine for
    sessions only, calling the session logic directly."""

    restorable = SparkRestorable

    @override
    def owns(self, state: str) -> bool:
        return state in PROVIDERS

    @override
    def check_line(self, state: str) -> None:
        feature = {"spark-rocksdb": "transform_with_state", "spark-hdfs": "pandas_with_state"}
        spark_version.require(feature[state], f"--state {state}")

    @override
    def check_revisions(self) -> None:
        raise ConfigError(
            "--revise-within keeps emitted sessions in sessionize's own state store, not in "
            "Spark-managed state (--state spark-*): use --state files (or another store of "
            "ours), or leave --revise-within out"
        )

    @override
    def check_replaced_by_key(self) -> None:
        raise replaced.refuse(
            "Spark-managed state (--state spark-*) cannot be read whole to rebuild it",
            "use --state files (or another store of ours)",
        )

    @override
    def check_runs_processors(self, state: str) -> None:
        raise ConfigError(
            f"state {state}: Spark-managed state runs sessions only; give a processor's job "
            "files, files:PATH or a server URI (postgresql://, redis://, dynamodb://)"
        )

    @override
    def open_state(
        self, settings: SessionSettings, checkpoint: CheckpointLike, shown_uri: str
    ) -> None:
        self.check_line(settings.state_uri)
        if settings.mapping is not None and settings.mapping.anonymous:
            raise ConfigError(
                f"--anonymous-field: Spark-managed state ({settings.state_uri}) does not keep "
                "identities; use --state files (or another store of ours)"
            )
        return None  # the state is Spark's, in the checkpoint: Spark opens it

    @override
    def session_engine(self, settings: SessionSettings, run: SessionRun) -> Engine:
        sink = open_sink(
            settings.output, settings.output_format, job=settings.job, mapping=settings.mapping
        )
        return SparkStateEngine(settings, run.checkpoint, sink, parser=run.parser)


# Asked in order; the last owns every state.
_KINDS: tuple[EngineKind, ...] = (SparkState(), OurStore())


def engine_for(state: str) -> EngineKind:
    """The engine that keeps `state` (`--state` as given or as a checkpoint recorded it).

    >>> type(engine_for("files")).__name__
    'OurStore'
    >>> engine_for("spark-rocksdb").restorable.__name__
    'SparkRestorable'
    """
    return next(kind for kind in _KINDS if kind.owns(state))
