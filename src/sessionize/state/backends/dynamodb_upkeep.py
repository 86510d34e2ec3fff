"""The `dynamodb` store's upkeep outside a commit: clearing a partition that starts over,
repairing the key items a failed attempt wrote, deleting the items of removed keys no
retained version sees (see `dynamodb` for when each runs)."""

from __future__ import annotations

from typing import Any

from sessionize.state.backends.dynamodb_client import BatchedClient
from sessionize.state.backends.dynamodb_layout import (
    CHANGE_ITEM,
    INDEX_SHARDS,
    INTENT_ITEM,
    KEY_ITEM,
    delete_request,
    history,
    index_shard_pk,
    intent_keys,
    key_in_pk,
    key_item_request,
    key_pk,
    parse_change,
    parse_key_item,
    partition_pk,
    unneeded,
)
from sessionize.state.metrics import StateMetrics


def drop_items(
    client: BatchedClient, job: str, partition: int, metrics: StateMetrics | None
) -> None:
    """Delete every key, chunk, intent and change item of the partition (keys found
    through the index, the intents and the change items): for a partition that starts
    over."""
    what = f"clearing {job}/{partition}"
    ppk = partition_pk(job, partition)
    keys: set[int] = set()
    for s in range(INDEX_SHARDS):
        found = client.query(
            index_shard_pk(job, partition, s), metrics, what, projection="pk", on_index=True
        )
        keys.update(key_in_pk(i["pk"]["S"]) for i in found)
    intents = client.query(ppk, metrics, what, prefix=INTENT_ITEM)
    changes = client.query(ppk, metrics, what, prefix=CHANGE_ITEM)
    for intent in intents:
        keys.update(intent_keys(intent))
    for change in changes:
        _, _, lowered, removed = parse_change(change)
        keys.update(lowered, removed)
    wanted = [(key_pk(job, partition, k), KEY_ITEM) for k in keys]
    items = client.get_items(wanted, metrics, what)
    deletes = []
    for (pk, _), raw in items.items():
        deletes.append(delete_request(pk, KEY_ITEM))
        chunk_sks = [sk for e in parse_key_item(0, raw).entries for sk in e.chunk_sks()]
        deletes += [delete_request(pk, sk) for sk in chunk_sks]
    client.write(deletes, metrics, what)
    client.write([delete_request(ppk, i["sk"]["S"]) for i in intents + changes], metrics, what)


def bury(
    client: BatchedClient,
    job: str,
    partition: int,
    keys: set[int],
    records: dict[int, dict[str, Any]],
    keep_from: int,
) -> None:
    """Delete the items of the keys removed at or before keep_from that no retained
    version sees."""
    what = f"maintenance of {job}/{partition}"
    seen = history(records, max(records))
    raw = client.get_items([(key_pk(job, partition, k), KEY_ITEM) for k in keys], None, what)
    deletes = []
    for k in keys:
        pk = key_pk(job, partition, k)
        item = parse_key_item(k, raw.get((pk, KEY_ITEM)))
        newest = item.at(max(records), seen)
        if not item.entries or (newest is not None and not newest.removed):
            continue  # gone already, or alive again
        if newest is not None and newest.version > keep_from:
            continue  # removed again later; a retained version still sees the value
        deletes.append(delete_request(pk, KEY_ITEM))
        deletes += [delete_request(*x) for x in unneeded(job, partition, item, [])]
    client.write(deletes, None, what)


def repair(
    client: BatchedClient, job: str, partition: int, failed: dict[tuple[int, str], list[int]]
) -> None:
    """Remove the entries of failed attempts (version, token) from the items of the keys
    they touched."""
    what = f"repairing {job}/{partition}"
    keys = sorted({k for ks in failed.values() for k in ks})
    wanted = [(key_pk(job, partition, k), KEY_ITEM) for k in keys]
    raw = client.get_items(wanted, None, what)
    writes, stale = [], []
    for k in keys:
        pk = key_pk(job, partition, k)
        item = parse_key_item(k, raw.get((pk, KEY_ITEM)))
        entries = [e for e in item.entries if (e.version, e.token) not in failed]
        if len(entries) == len(item.entries):
            continue
        if entries:  # its xe can only go up: nothing for the change items
            writes.append(key_item_request(job, partition, k, entries))
        else:
            writes.append(delete_request(pk, KEY_ITEM))
        stale += unneeded(job, partition, item, entries)
    client.write(writes, None, what)
    client.write([delete_request(pk, sk) for pk, sk in stale], None, what)
