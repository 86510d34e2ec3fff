"""The `dynamodb` store's fence: items (pk=JOB, sk=`f`) for the job and (pk=the partition's
pk, sk=`f`) for each partition, whose number `ep` is the newest lease epoch that fenced it.

A DynamoDB condition sees only the item being written, and the local servers this is tested
against have no TransactWriteItems. So a commit reads its partition's fence (strongly
consistent) just before it supersedes later versions and again just before it publishes,
and publishes its version record (and a job record) only if no newer epoch wrote that record
(`ep` in the record, a condition on the put). A driver stalled exactly between that last
read and its publish (one request) could still publish once; the newer driver raised the
fence before it opened any state, so its own commit of that version, later, replaces it.
"""

from __future__ import annotations

from typing import Any

from sessionize.state.backends.dynamodb_client import BatchedClient
from sessionize.state.base import fenced_error
from sessionize.state.metrics import StateMetrics

FENCE_SK = "f"
ATTRIBUTE = "ep"
# A record is put only where no newer epoch wrote it (records of unfenced writers: epoch 0).
NOT_NEWER = f"attribute_not_exists({ATTRIBUTE}) OR {ATTRIBUTE} <= :ep"


def read_fence(client: BatchedClient, pk: str, job: str, metrics: StateMetrics | None) -> int:
    return client.read_number(pk, FENCE_SK, ATTRIBUTE, metrics, f"reading the fence of {job}")


def check_fence(
    client: BatchedClient, pk: str, job: str, epoch: int | None, metrics: StateMetrics | None
) -> None:
    """fenced_error if `epoch` (None: unfenced) is below the fence of item `pk`."""
    if epoch is None:
        return
    fence = read_fence(client, pk, job, metrics)
    if fence > epoch:
        raise fenced_error(job, epoch, fence)


def put_unless_newer(
    client: BatchedClient, item: dict[str, Any], job: str, epoch: int | None, what: str
) -> None:
    """Put a version or job record carrying `epoch`, unless a newer epoch wrote it."""
    mine = epoch or 0
    item = {**item, ATTRIBUTE: {"N": str(mine)}}
    if not client.put_one(item, what, condition=NOT_NEWER, values={":ep": {"N": str(mine)}}):
        pk, sk = item["pk"]["S"], item["sk"]["S"]
        found = client.get_items([(pk, sk)], None, what).get((pk, sk), {})
        raise fenced_error(job, mine, int(found.get(ATTRIBUTE, {}).get("N", mine + 1)))


def raise_fences(client: BatchedClient, pks: list[str], epoch: int, job: str) -> int:
    """Raise the fence of every item in `pks` to `epoch`; the highest fence afterwards."""
    what = f"fencing {job}"
    return max(client.raise_number(pk, FENCE_SK, ATTRIBUTE, epoch, what) for pk in pks)
