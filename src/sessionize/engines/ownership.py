"""Which job a start is, for the output's owner check (sinks/owner.py): its id, where its own
records are, and whether they say it wrote the output before owners were recorded.

- A stream (a session job's or a processor's) is its checkpoint: its id is made at its first
  start after the checks and kept in `CHECKPOINT/sessionize-id.json`, which moves with the
  checkpoint and which no rewind deletes (a rewind to -1 resets the settings, not the job).
- A batch job is its output record (`_sessionize.json`, the state and job its output goes
  with): the id is made with that record and kept in it.
- A `stateful.run` job is its job name and state: its id is derived from them (the state as
  recorded, so `files`, under the output, moves with it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

from sessionize.engines.checkpoint import (
    OUTPUT_RECORD,
    PATHS_FILE,
    Checkpoint,
    CheckpointLike,
    comparable,
    last_committed_batch,
    output_records,
    recorded,
    write_record,
)
from sessionize.sinks.claim import OwnerClaim, check_owner
from sessionize.sinks.owner import BATCH, STATEFUL_RUN, STREAM, Claimant, Owner, new_id

ID_FILE = "sessionize-id.json"  # in a checkpoint: the stream's id


def checkpoint_id(checkpoint: CheckpointLike) -> str | None:
    """The id of the stream of `checkpoint` (None: none made yet)."""
    return recorded(checkpoint, ID_FILE).get("id")


@dataclass(frozen=True)
class StreamOwner:
    """A stream as an output's owner: its checkpoint (whose id it is), its job, its kind
    (STREAM, STATEFUL_STREAM) and its processor's name (None for sessions)."""

    checkpoint: CheckpointLike
    job: str
    kind: str = STREAM
    processor: str | None = None

    def owner(self) -> Owner:
        """The owner this stream is (its id None while its checkpoint has none)."""
        ck = Checkpoint.of(self.checkpoint)
        return Owner(checkpoint_id(ck), self.kind, self.job, ck.key, self.processor)

    def check(self, output: str) -> None:
        """Before a stream takes its leases: refuse an output another job owns.

        Raises:
            OutputOwned: one line naming the owner and what to do.
        """
        check_owner(output, Claimant(self.owner(), lambda: _stream_wrote(self.checkpoint, output)))

    def claim(self, output: str) -> OwnerClaim:
        """Once the start is accepted (its lease held): the stream's id, made now for a new
        checkpoint, and the claim its batch runner makes before its first publish."""
        if checkpoint_id(self.checkpoint) is None:
            write_record(self.checkpoint, ID_FILE, {"id": new_id()})
        return OwnerClaim(output, self.owner())


def _stream_wrote(checkpoint: CheckpointLike, output: str) -> bool:
    """The checkpoint records `output` and committed a batch, and no batch job's record is
    with the output: the stream wrote it before outputs recorded their owner."""
    was = recorded(checkpoint).get("output") or recorded(checkpoint, PATHS_FILE).get("output")
    if was is None or comparable("output", was) != comparable("output", output):
        return False
    if output_records(output).read(OUTPUT_RECORD):
        return False  # a batch job wrote it (a stream may have too: the batch job keeps it)
    return last_committed_batch(checkpoint) is not None


def batch_owner(output: str, job: str, state: str) -> Owner:
    """The owner a batch job is: the id its output record holds (None: not made yet)."""
    bound = output_records(output).read(OUTPUT_RECORD)
    return Owner(bound.get("id"), BATCH, job, state)


def check_batch(output: str, job: str, state: str) -> None:
    """Before a batch job takes its lease (its output record, if any, matched already):
    refuse an output another job owns; one that its record binds it to was written by it.

    Raises:
        OutputOwned: one line naming the owner and what to do.
    """
    written = bool(output_records(output).read(OUTPUT_RECORD))
    check_owner(output, Claimant(batch_owner(output, job, state), lambda: written))


def batch_claim(output: str, job: str, state: str, record: dict) -> OwnerClaim:
    """The batch job's output record (`record`, with the id made now if it has none),
    written where it is new or lacks the id, and the claim of its first publish."""
    before = output_records(output).read(OUTPUT_RECORD)
    if not before.get("id"):
        output_records(output).write(OUTPUT_RECORD, {**record, **before, "id": new_id()})
    return OwnerClaim(output, batch_owner(output, job, state))


def run_owner(job: str, state: str, processor: str) -> Owner:
    """The owner a `stateful.run` job is: its id derived from its job name and state (as
    recorded: `files` for the store under the output)."""
    key = f"{STATEFUL_RUN}\n{job}\n{comparable('state', state)}".encode()
    return Owner(hashlib.sha256(key).hexdigest()[:32], STATEFUL_RUN, job, state, processor)


def check_run(output: str, owner: Owner, wrote: Callable[[], bool]) -> None:
    """Before a `stateful.run` takes its lease: refuse an output another job owns; `wrote`
    says whether the job's state has batches (it wrote the output before owners were
    recorded).

    Raises:
        OutputOwned: one line naming the owner and what to do.
    """
    check_owner(output, Claimant(owner, wrote))
