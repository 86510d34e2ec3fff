"""A stream's state against Spark's commit log: both must point at the same batch, for
the job and for its second step's job, before the query starts."""

from __future__ import annotations

from sessionize.engines.checkpoint import CheckpointLike, last_committed_batch
from sessionize.errors import IncompatibleCheckpoint, StateError
from sessionize.redaction import redact_uri
from sessionize.state import StateBackend


def check_agreement(
    backend: StateBackend,
    checkpoint: CheckpointLike,
    store_uri: str,
    job: str,
    then: str | None = None,
) -> None:
    """Spark's commit log and the store's job log must point at the same batch, for the
    job and for its second step's job `then` (a follow-on's, a session job's users step).

    Raises:
        IncompatibleCheckpoint: the job has batches and its second step none (a
            checkpoint written before the step existed, or its state removed): one line
            saying to start over from a rewind to -1.
        StateError: they belong to different runs.
    """
    spark_last = last_committed_batch(checkpoint)
    versions = backend.job_versions(job)
    if then is not None and versions and not backend.job_versions(then):
        raise IncompatibleCheckpoint(
            f"checkpoint {checkpoint} has run job '{job}' up to batch {max(versions)} "
            f"without its second step '{then}' (state {redact_uri(store_uri)} has none of "
            "it: the checkpoint was written before that step existed, or its state was "
            f"removed): start the job over with `sessionize rewind --checkpoint {checkpoint} "
            "--to-batch -1`, then run it again"
        )
    for name in (job,) if then is None else (job, then):
        _check_job_agreement(backend, checkpoint, store_uri, name, spark_last)


def _check_job_agreement(
    backend: StateBackend,
    checkpoint: CheckpointLike,
    store_uri: str,
    job: str,
    spark_last: int | None,
) -> None:
    versions = backend.job_versions(job)
    store_last = max(versions) if versions else None
    done = -1 if spark_last is None else spark_last
    # The store may be one batch ahead: it commits just before Spark does.
    if (store_last is None and spark_last is None) or store_last in (done, done + 1):
        return
    raise StateError(
        f"checkpoint {checkpoint} has committed batch {spark_last} but state "
        f"{redact_uri(store_uri)} has batch {store_last} for job '{job}': they belong "
        "to different runs; use the state that goes with this checkpoint, or new ones"
    )
