"""The store engine's backward half (engines/restorable.py): the state is our versioned
store's job `job`, and the job of its processor's follow-on where it has one (recorded
under `follow_on`: both commit every batch's version); a batch B is restorable while the
store keeps its job records and version B of every partition of both
(`state/base.py` retention keeps `RETAIN` of them)."""

from __future__ import annotations

from typing_extensions import override

from sessionize.engines.checkpoint import follow_on_job, same_setting
from sessionize.engines.restorable import RestorableState
from sessionize.errors import ConfigError
from sessionize.fs import delete_dir, resolve_fs
from sessionize.redaction import needs_secret, redact_uri
from sessionize.state import StateBackend, open_backend


class StoreRestorable(RestorableState):
    """A checkpoint whose state is in our store at `state_uri`, under `job`."""

    def __init__(
        self,
        checkpoint: str,
        state_uri: str,
        job: str,
        under_checkpoint: bool,
        state: str = "",
        follow_on: str | None = None,
    ):
        self.checkpoint = checkpoint
        self.state = state  # as the checkpoint records `--state`
        self.state_uri = state_uri
        self.job = job
        # The jobs a batch commits: the first step's, then its follow-on's.
        self.jobs = [job] + ([follow_on] if follow_on else [])
        # `--state files`: the store is the checkpoint's `state` directory, which Spark
        # wants empty when a query starts from nothing.
        self.under_checkpoint = under_checkpoint
        self._backend: StateBackend | None = None

    @classmethod
    @override
    def at(
        cls, checkpoint: str, settings: dict, recorded_uri: str | None, given: str | None
    ) -> StoreRestorable:
        job = str(settings.get("job", "sessionize"))
        state = str(settings.get("state", "files"))
        if state == "files":
            uri = f"files:{checkpoint.rstrip('/')}/state"
        else:
            # The last run's URI has the options it was given, unless `state migrate` has
            # switched the checkpoint to another store since.
            last_run = (
                recorded_uri
                if recorded_uri
                and same_setting("state", redact_uri(recorded_uri), redact_uri(state))
                else None
            )
            uri = _state_uri(checkpoint, last_run or state, given)
        return cls(
            checkpoint,
            uri,
            job,
            under_checkpoint=state == "files",
            state=state,
            follow_on=follow_on_job(settings, job),
        )

    @property
    def backend(self) -> StateBackend:
        if self._backend is None:
            self._backend = open_backend(self.state_uri)
        return self._backend

    @override
    def floors(self) -> dict[str, int]:
        records, versions = [], []
        for job in self.jobs:  # a batch is restorable only where every job still has it
            jobs = self.backend.job_versions(job)
            records += jobs[:1]
            kept = [self.backend.versions(job, p) for p in self.backend.partitions(job)]
            versions += [v[0] for v in kept if v]
        limits = {}
        if records:
            limits["the state's job records"] = max(records)
        if versions:
            limits["the state's partition versions"] = max(versions)
        return limits

    @override
    def restorable(self, batches: set[int]) -> set[int]:
        for job in self.jobs:
            batches = batches & set(self.backend.job_versions(job))
        return batches

    @override
    def record(self, batch: int) -> dict | None:
        return self.backend.read_job_record(self.job, batch)

    @override
    def describe_drop(self, to_batch: int) -> str:
        later = [v for v in self.backend.job_versions(self.job) if v > to_batch]
        where = self.backend.redacted_uri
        if not later:
            return f"no state version of {where}"
        jobs = " and ".join(self.jobs)
        return f"state versions {later[0]}..{later[-1]} of {where} (job {jobs})"

    @override
    def truncate_after(self, to_batch: int) -> None:
        # The first step's job first: its records are what a restart reads, so a crash
        # half way leaves later follow-on versions no record points at (superseded).
        for job in self.jobs:
            self.backend.truncate_after(job, to_batch)
        if to_batch == -1 and self.under_checkpoint:
            fs, base = resolve_fs(self.checkpoint)
            delete_dir(fs, f"{base}/state")

    @override
    def check_readable(self, what: str) -> None:
        return None

    @override
    def check_importable(self, what: str) -> None:
        raise ConfigError(
            f"{what} runs on state {self.state}, not Spark's: use `sessionize state migrate` "
            "to move it"
        )


def _state_uri(path: str, recorded_uri: str, given: str | None) -> str:
    if given is not None:
        if redact_uri(given) != redact_uri(recorded_uri):
            raise ConfigError(
                f"--state {redact_uri(given)} is not the state of checkpoint {path} "
                f"({recorded_uri})"
            )
        return given
    if needs_secret(recorded_uri):
        raise ConfigError(
            f"checkpoint {path} records its state as {recorded_uri}, without the secret: give "
            "it with --state URI"
        )
    return recorded_uri
