"""Find a job from its checkpoint (stream) or output (batch): its state, settings, lease and
last committed version, the way `sessionize stream` and `sessionize batch` would find them."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from sessionize.commands.options import recorded_state, state_uri
from sessionize.commands.statetools.contents import Shape, StoredRows
from sessionize.config import SessionRules
from sessionize.engines.checkpoint import (
    OUTPUT_RECORD,
    checkpoint_lease,
    comparable,
    follow_on_job,
    last_committed_batch,
    output_lease,
    recorded,
)
from sessionize.engines.keyed import recorded_rows
from sessionize.engines.locate import restorable_state
from sessionize.engines.restorable import RestorableState
from sessionize.errors import ConfigError, LeaseHeld, StateError
from sessionize.fs import child
from sessionize.mapping import EventMapping
from sessionize.redaction import needs_secret, redact_uri
from sessionize.schema import Layout, layout
from sessionize.state import StateBackend, layout_rows, open_backend
from sessionize.state.lease import Lease


@dataclass(frozen=True)
class StateJob:
    """A stopped job's state as its next run will see it."""

    checkpoint: str | None  # a stream's checkpoint, or None in batch mode
    output: str | None  # a batch job's output, or None for a stream
    job: str
    state: str  # as `--state` spells it: files, files:PATH, a server URI, spark-*
    state_uri: str  # what to open (for spark-*: the checkpoint)
    partitions: int
    rules: SessionRules | None  # a session job's (None: a processor's job)
    mapping: EventMapping | None  # a session job's: its state rows' schema
    engine: RestorableState | None = None  # a stream's engine (None: a batch job's store)
    processor: StoredRows | None = None  # a processor's job: its rows in the store
    # The other step of a processor with a follow-on: the follow-on's store job, or (for
    # the follow-on's own state) the first step's.
    follow_on: str | None = None

    @property
    def layout(self) -> Layout:
        """The state rows' layout: with `--revise-within` they carry the kept sessions'
        marks (`emitted_session`, `emitted_revision`)."""
        revise = self.rules is not None and self.rules.revise_within_us is not None
        return replace(layout(self.session_mapping), revise=revise)

    @property
    def session_rules(self) -> SessionRules:
        assert self.rules is not None, "a session job's"
        return self.rules

    @property
    def session_mapping(self) -> EventMapping:
        assert self.mapping is not None, "a session job's"
        return self.mapping

    @property
    def shape(self) -> Shape:
        """What the job keeps per key: a processor's rows, or the sessions' layout."""
        return self.processor or self.layout

    @property
    def what(self) -> str:
        if self.checkpoint:
            return f"checkpoint {self.checkpoint}"
        return f"output {redact_uri(str(self.output))}"

    def check_readable(self) -> None:
        """ConfigError (one line) unless the state tools can read this job's state."""
        if self.engine is not None:
            self.engine.check_readable(self.what)

    def home(self) -> str:
        """Where `--state files` keeps the store for this job."""
        if self.checkpoint:
            return child(self.checkpoint, "state")
        return child(str(self.output), "_state")

    def resolve(self, state: str) -> str:
        """`--state` value -> the URI to open, as the job's commands resolve it."""
        return state_uri(state, self.home())

    def backend(self) -> StateBackend:
        backend = self.open(self.state_uri)
        backend.check()
        return backend

    def open(self, uri: str) -> StateBackend:
        """A store at `uri` holding this job's rows (its schema and key)."""
        spec = self.processor.spec if self.processor else layout_rows(self.layout)
        return open_backend(uri, spec)

    def lease(self) -> Lease:
        if self.checkpoint:
            return checkpoint_lease(self.checkpoint)
        return output_lease(str(self.output))

    def check_idle(self) -> None:
        """LeaseHeld (one line) while a live driver holds the job; writes nothing."""
        holder = self.lease().records.latest()
        if holder is not None and not holder.presumed_dead(time.time()):
            raise LeaseHeld(
                f"{self.what} is in use by {holder.describe()}: stop that driver first "
                "(the state tools work on a stopped job)"
            )

    def last_version(self, backend: StateBackend) -> int:
        """The committed version the next run builds on."""
        versions = backend.job_versions(self.job)
        if self.checkpoint is None:
            if not versions:
                raise StateError(
                    f"state {backend.redacted_uri} has no committed hour of job '{self.job}'"
                )
            return versions[-1]
        spark_last = last_committed_batch(self.checkpoint)
        store_last = versions[-1] if versions else None
        if spark_last is None:
            raise StateError(f"{self.what} has no committed batch yet: there is no state to use")
        # The store may be one batch ahead (it records just before Spark commits); the next
        # run re-runs that batch on top of Spark's last one.
        if store_last not in (spark_last, spark_last + 1) or spark_last not in versions:
            raise StateError(
                f"{self.what} has committed batch {spark_last} but state "
                f"{backend.redacted_uri} has batch {store_last} for job '{self.job}': they "
                "belong to different runs; pass the --state that goes with this checkpoint"
            )
        return spark_last


def locate(
    checkpoint: str | None, output: str | None, state: str | None = None, job: str | None = None
) -> StateJob:
    """The job of `--checkpoint` (its `sessionize.json`) or of `--output` (batch mode: the
    state under `OUTPUT/_state` or `--state`, settings from its last job record)."""
    if bool(checkpoint) == bool(output):
        raise ConfigError("give either --checkpoint (a stream) or --output (a batch job)")
    if checkpoint:
        found = _stream_job(checkpoint, state)
        return found if job is None or job == found.job else _follow_on_job(found, job)
    # The state the output goes with, as its runs recorded it (`commands/batch.py`).
    bound = recorded(str(output), OUTPUT_RECORD)
    if state is None and needs_secret(bound.get("state", "")):
        raise ConfigError(
            f"output {redact_uri(str(output))} goes with state {bound['state']}, recorded "
            "without the "
            "password: pass --state with the full URI"
        )
    state = state or bound.get("state") or "files"
    return _batch_job(str(output), state, job or bound.get("job") or "sessionize")


def _stream_job(checkpoint: str, state: str | None) -> StateJob:
    settings = recorded(checkpoint)
    if not settings.get("state"):
        raise StateError(
            f"checkpoint {checkpoint} has no sessionize.json: not a sessionize checkpoint, "
            "or one that never started"
        )
    home = child(checkpoint, "state")
    chosen = state or str(settings["state"])
    if comparable("state", recorded_state(chosen)) != comparable("state", settings["state"]):
        raise ConfigError(
            f"checkpoint {checkpoint} runs on state {settings['state']}, not "
            f"{redact_uri(chosen)}: pass that --state (with its password), or none"
        )
    if needs_secret(chosen):
        raise ConfigError(
            f"checkpoint {checkpoint} records its state without the password: pass "
            "--state with the full URI"
        )
    uri = state_uri(chosen, home)  # checked above: the recorded state, with its secret
    return StateJob(
        checkpoint=checkpoint,
        output=None,
        job=str(settings.get("job", "sessionize")),
        state=chosen,
        state_uri=uri,
        partitions=int(settings["partitions"]),
        engine=restorable_state(checkpoint, settings, uri),
        **_kind(settings, str(settings.get("job", "sessionize"))),
    )


def _follow_on_job(first: StateJob, job: str) -> StateJob:
    """The stream's follow-on step (`stateful.FollowOn`) named by `--job`: its own store job,
    read with the rows the store recorded for it; refused for any other name."""
    if job != first.follow_on:
        steps = f"'{first.job}'" + (f" and '{first.follow_on}'" if first.follow_on else "")
        raise ConfigError(
            f"{first.what} runs job {steps}, not '{job}': leave --job out, or name one of them"
        )
    backend = open_backend(first.state_uri)
    settings = backend.recorded_settings(job)
    if not settings:
        raise StateError(f"state {backend.redacted_uri} has nothing recorded of job '{job}' yet")
    rows = StoredRows(recorded_rows(settings), str(settings["key"]))
    # follow_on names the job it goes with: the two move together or not at all.
    return replace(first, job=job, processor=rows, follow_on=first.job)


def _batch_job(output: str, state: str, job: str) -> StateJob:
    uri = state_uri(state, child(output, "_state"))
    backend = open_backend(uri)
    backend.check()
    settings = backend.recorded_settings(job) if backend.job_versions(job) else None
    if not settings:
        raise StateError(
            f"state {backend.redacted_uri} has no committed hour of job '{job}': pass the "
            "--state and --job of the batch job"
        )
    return StateJob(
        checkpoint=None,
        output=output,
        job=job,
        state=state,
        state_uri=uri,
        partitions=int(settings["partitions"]),
        **_kind(settings, job),
    )


def _kind(settings: dict, job: str) -> dict:
    """A session job's rules and mapping, or a processor's stored rows (by its key); the
    job of its second step, if it has one."""
    follow_on = follow_on_job(settings, job)
    if "processor" in settings:
        rows = StoredRows(recorded_rows(settings), str(settings["key"]))
        return {"rules": None, "mapping": None, "processor": rows, "follow_on": follow_on}
    mapping = EventMapping.from_record(settings)
    return {"rules": rules_of(settings), "mapping": mapping, "follow_on": follow_on}


def rules_of(settings: dict) -> SessionRules:
    return SessionRules.from_record(settings)
