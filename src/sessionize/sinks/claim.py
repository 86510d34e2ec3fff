"""The owner check at a job's start and the owner's record at its first publish, for any
output (the records: `owner.py`; PostgreSQL's: `postgres_records.py`; Kafka's:
`kafka_owner.py`)."""

from __future__ import annotations

from dataclasses import dataclass

from sessionize.errors import OutputOwned
from sessionize.fs import location_key, without_options
from sessionize.sinks.owner import Claimant, Owner, OwnerRecords, refusal
from sessionize.sinks.registry import sink_at


def owner_records(output: str) -> OwnerRecords:
    """The owner records of `output`, where its sink keeps them."""
    return sink_at(output).owner_records()


def shown(output: str) -> str:
    """An output as messages name it: one spelling of its place, no secrets."""
    if output.startswith(("kafka://", "iceberg://")):  # a topic prefix, a namespace
        return without_options(output)
    return location_key(output)


def check_owner(output: str, me: Claimant) -> None:
    """At a job's start, before it records or writes anything: refuse an output that
    belongs to another job.

    Raises:
        OutputOwned: one line naming the owner and what to do.
    """
    records = owner_records(output)
    recorded = records.read()
    written = [] if recorded is not None else records.written()
    why = refusal(shown(output), recorded, written, me)
    if why is not None:
        raise OutputOwned(why)


@dataclass
class OwnerClaim:
    """Records `owner` as the owner of `output` just before the job's first publish (the
    batch runner calls it before each publish; after one success in a process it does
    nothing). Pickles as the output and the owner: over Spark Connect the batch runner
    runs in the server's Python, which claims there."""

    output: str
    owner: Owner
    claimed: bool = False

    def __call__(self) -> None:
        if self.claimed:
            return
        records = owner_records(self.output)
        if not records.create(self.owner):
            found = records.read()
            why = refusal(shown(self.output), found, [], Claimant(self.owner))
            if why is not None:  # another job took the output since this one started
                raise OutputOwned(why)
            if found != self.owner:  # the same job, its checkpoint moved: its new place
                records.replace(self.owner)
        self.claimed = True
