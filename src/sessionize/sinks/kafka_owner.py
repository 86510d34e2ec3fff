"""The owner of a Kafka output (sinks/owner.py) as records of its `PREFIX._batches` topic.

Kafka has no conditional write, but a transactional id is one: a producer that starts with
the id fences every earlier one and aborts the transaction it left open. So every job claims
a prefix under the one id `sessionize.PREFIX._owner`: it starts its producer (fencing any
other claimer), reads the topic (`read_committed`), and only if no owner is there produces
`{"owner": {...}}` keyed `_owner` to partition 0 and commits. Of two jobs claiming at once,
the one fenced fails to commit and finds the other's record when it reads again. The first
owner record in the topic decides; a later one with the same id (the owner's checkpoint
moved) only renames its place. The batch markers (`{"job", "batch_id", "rows"}`) say which
outputs hold batches, for a prefix written before owners were recorded.

With `delivery=at-least-once` (a broker without transactions) the claim is a read, then a
write: two jobs starting on a new prefix within that moment could both claim it.
"""

from __future__ import annotations

import contextlib
import json
import time
import warnings

from sessionize.errors import SinkError
from sessionize.sinks.kafka_client import (
    MARKERS,
    KafkaOutput,
    _close,
    _flush,
    _kafka,
    _reason,
    _send,
    read_batches_topic,
)
from sessionize.sinks.owner import Owner, OwnerRecords

KEY = b"_owner"
_TIMEOUT_S = 30.0


class KafkaOwnerRecords(OwnerRecords):
    """The owner records of `kafka://HOST:PORT/PREFIX` (the URI's options do not matter)."""

    def __init__(self, output: str):
        self.out = KafkaOutput.parse(output)

    def read(self) -> Owner | None:
        return _first_owner(read_batches_topic(self.out))

    def create(self, owner: Owner) -> bool:
        return self._produce(owner, only_if_absent=True)

    def replace(self, owner: Owner) -> None:
        self._produce(owner, only_if_absent=False)

    def written(self) -> list[str]:
        names: set[str] = set()
        for key, body in read_batches_topic(self.out):
            if key != KEY and not body.get("retired"):
                names |= {name for name, rows in (body.get("rows") or {}).items() if rows}
        return sorted(names)

    def _produce(self, owner: Owner, *, only_if_absent: bool) -> bool:
        kafka = _kafka()
        exactly_once = self.out.delivery == "exactly-once"
        config: dict[str, str | bool] = {
            "bootstrap.servers": self.out.bootstrap,
            "client.id": "sessionize-owner",
        }
        if exactly_once:
            config["transactional.id"] = f"sessionize.{self.out.prefix}._owner"
        else:
            config["enable.idempotence"] = True
        producer = kafka.Producer(config)
        value = json.dumps({"owner": json.loads(owner.to_json())}).encode()
        try:
            if exactly_once:
                producer.init_transactions(_TIMEOUT_S)  # fences every other claimer
            if only_if_absent and self.read() is not None:
                return False
            if exactly_once:  # the commit flushes, and fails if another claimer fenced it
                producer.begin_transaction()
                producer.produce(self.out.topic(MARKERS), value=value, key=KEY, partition=0)
                producer.commit_transaction(_TIMEOUT_S)
            else:
                failures: list[str] = []
                _send(producer, self.out.topic(MARKERS), KEY, value, failures, partition=0)
                _flush(producer, failures)
        except kafka.KafkaException as e:
            found = self._awaited() if only_if_absent else None
            if found is not None:  # fenced by another claimer, which recorded its owner
                return found.id == owner.id
            where = f"Kafka {self.out.bootstrap}/{self.out.prefix}"
            raise SinkError(
                f"recording the owner of {where}: {_reason(e)}; run the job again"
            ) from e
        finally:
            # A fenced producer's close cannot abort its transaction, and says so with a
            # warning or, once librdkafka has marked the fence fatal, an exception: expected
            # (the claim's answer is decided above), so neither reaches the caller.
            with warnings.catch_warnings(), contextlib.suppress(kafka.KafkaException):
                warnings.simplefilter("ignore", RuntimeWarning)
                _close(producer)
        return True

    def _awaited(self) -> Owner | None:
        """The owner a claimer that fenced this one records, once it has committed (it
        does so at once, or its transaction times out)."""
        deadline = time.monotonic() + _TIMEOUT_S
        while True:
            found = self.read()
            if found is not None or time.monotonic() > deadline:
                return found
            time.sleep(0.2)


def _first_owner(records: list[tuple[bytes | None, dict]]) -> Owner | None:
    """The first owner recorded, with the place of its latest record."""
    owners = [
        Owner.from_json(json.dumps(body["owner"]))
        for key, body in records
        if key == KEY and "owner" in body
    ]
    if not owners:
        return None
    return [o for o in owners if o.id == owners[0].id][-1]
