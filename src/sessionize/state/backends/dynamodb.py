"""The `dynamodb` state store: one item per key holding the key's recent versions, published
by a version record, found by expiry through a global secondary index over the key items;
batched with BatchGetItem and BatchWriteItem.

URI: `dynamodb://TABLE_PREFIX?region=us-east-1[&endpoint=http://127.0.0.1:8000]`. Options:
`region`, `endpoint` (a local server such as dynalite; default AWS), `create` (create the
table, on-demand, with its index, if it is missing; default true), `workers` (requests in
flight, default 8). Credentials come from the normal AWS chain (environment, profile, role),
never the URI. A table of the older layout (expiry index items, no `expiry` index) is
refused in one line: its state moves with `sessionize state migrate` of the version that
wrote it to another store, then with this version to a new table prefix (or the table is
deleted to start over).

Every item it writes, with its key and attributes, is in `dynamodb_layout.py`; the batched
requests (retries, unprocessed items) in `dynamodb_client.py`. Every commit has a random
token, written into each entry it adds; an entry counts at version V iff its version <= V
and its token is the one in the current record of its version. A key's value at V is its
newest entry that counts. So a commit becomes visible at once, when its version record is
written (a single PutItem), and the entries of a failed or superseded attempt never count.

Commit of V on the loaded version P (in this order):
  1. re-read the version records; P must still be committed, with its token;
  2. delete the records of the versions after P (newest first, one by one): from here the
     old history is gone and P is the newest version, whatever happens next (if P is the
     empty state, every item of the partition goes too);
  3. write the intent items: the keys this attempt may touch, before it touches any, so
     that maintenance can remove the entries of an attempt that never published;
  4. read the items of the changed keys not read by this transaction (BatchGetItem: the
     engine's `get_many` has read them already), and write their new items
     (BatchWriteItem), ONE item per changed key: the entries that count at P, pruned to
     those the oldest retained version still needs, plus V's entry, and the index
     attributes (xe: the lowest expiry the item holds); chunk items of big values only;
     the attempt's change items and, for a partition's first version, the partition
     record;
  5. publish V's version record;
  6. delete chunk items no entry needs any more (best effort: leftovers are harmless).

Expiry: `expiring(T)` at V queries the index for items with xe < T, one Query per shard.
As xe is at most the key's expiry at every version the item holds, that is a superset of
the keys expiring at V (leftover entries of failed attempts only add candidates); the
strongly consistent read of the candidates decides. The index is eventually consistent: it
may still show an item's xe from before a commit lowered it, or not show a new item yet.
So each commit lists in its change items the keys whose xe went down or appeared (or whose
old item held entries that do not count: an attempt that never published may have lowered
xe unlisted), with the new xe; `expiring` at V also reads the change items of the
LAG_VERSIONS (16) versions up to V that count and hold an xe < T (filtered by the server
on their lowest xe), and checks their keys with xe < T. A key is missed only if the index
lags more than 16 versions behind its table (DynamoDB documents a fraction of a second),
or behind the retained versions, whose change items maintenance keeps. Repair and
maintenance never lower an xe.

Maintenance to keep_from: the entries of failed attempts before keep_from are removed
(found through their intents), then the intents and version records before keep_from, then
the key items of keys removed at or before keep_from that no retained version sees (found
through the change items of committed versions), then the change items before keep_from.

Round trips per partition and batch: open 1 (the version records); `get_many` one
BatchGetItem per 100 keys; `expiring` one Query per index shard and page (4, up to ~16k
candidates each) and one of the recent change items, in parallel, plus BatchGetItems of
the candidates, which `get_many` then reuses; commit: 1 + one BatchWriteItem per 25 items
written + 1 (+ one per superseded version). Requests run on `workers` threads; unprocessed
items are retried with backoff. Besides the items it writes, DynamoDB writes the index for
each key item whose xe appears, changes (two writes) or goes.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterable
from typing import Any, cast
from urllib.parse import urlencode, urlsplit

import numpy as np
import pyarrow as pa

from sessionize.errors import ConfigError, StateError
from sessionize.redaction import redact_uri
from sessionize.state.backends import dynamodb_fence as fence
from sessionize.state.backends import dynamodb_upkeep as upkeep
from sessionize.state.backends.common import read_query
from sessionize.state.backends.dynamodb_client import BatchedClient, count
from sessionize.state.backends.dynamodb_layout import (
    CHANGE_ITEM,
    INDEX,
    INTENT_ITEM,
    JOB_RECORD_ITEM,
    JOB_SETTINGS_SK,
    KEY_ITEM,
    PARTITION_ITEM,
    VERSION_ITEM,
    Entry,
    change_requests,
    delete_request,
    history,
    intent_keys,
    intent_requests,
    key_pk,
    key_writes,
    lowers,
    lowest_expiry,
    needed_entries,
    parse_change,
    parse_key_item,
    partition_pk,
    partition_sk,
    put_request,
    unneeded,
    version_sk,
)
from sessionize.state.backends.dynamodb_version import DynamoDBVersion
from sessionize.state.backends.keyblobs import RowCodec
from sessionize.state.base import StateBackend, base_gone_error, version_error
from sessionize.state.metrics import StateMetrics
from sessionize.state.rows import EMPTY_VERSION, RowSpec
from sessionize.state.stored import Meta

_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{3,200}$")
_DEFAULTS: dict[str, Any] = {"region": None, "endpoint": None, "create": True, "workers": 8}


class DynamoDBBackend(StateBackend[DynamoDBVersion]):
    scheme = "dynamodb"

    def __init__(
        self,
        table_prefix: str,
        *,
        region: str | None = None,
        endpoint: str | None = None,
        create: bool = True,
        workers: int = 8,
        spec: RowSpec | None = None,
    ):
        super().__init__(spec)
        if not _PREFIX.match(table_prefix or ""):
            raise ConfigError(
                f"DynamoDB table prefix {table_prefix!r}: 3-200 letters, digits, '_', '.', '-'"
            )
        if not isinstance(workers, int) or not 1 <= workers <= 64:
            raise ConfigError(f"workers must be 1..64, not {workers!r}")
        if endpoint is not None and not re.match(r"^https?://[^/@\s]+/?$", endpoint):
            raise ConfigError(f"endpoint {endpoint!r} must look like http://HOST:PORT")
        self.table_prefix = table_prefix
        self.table = f"{table_prefix}_state"
        self.region = region
        self.endpoint = endpoint
        self.create = create
        self.workers = workers
        self.codec = RowCodec(self.spec)
        self.client = BatchedClient(
            self.table,
            region=region,
            endpoint=endpoint,
            create=create,
            workers=workers,
            where=self.uri,
            index=(INDEX, "xs", "xe"),
        )

    # ----- configuration ----------------------------------------------------------------

    @property
    def uri(self) -> str:
        options = {k: getattr(self, k) for k, d in _DEFAULTS.items() if getattr(self, k) != d}
        if "create" in options:
            options["create"] = str(options["create"]).lower()
        return f"dynamodb://{self.table_prefix}" + (f"?{urlencode(options)}" if options else "")

    @classmethod
    def from_uri(cls, uri: str, spec: RowSpec | None = None) -> DynamoDBBackend:
        parts = urlsplit(uri)
        if parts.scheme.lower() != "dynamodb":
            raise ConfigError(f"not a DynamoDB URI: {redact_uri(uri)!r}")
        if "@" in parts.netloc:
            raise ConfigError(
                "DynamoDB credentials do not belong in the state store URI: use the AWS"
                " credential chain (environment, profile, instance role)"
            )
        if parts.path.strip("/"):
            raise ConfigError(
                f"DynamoDB URI {redact_uri(uri)!r}: use dynamodb://TABLE_PREFIX?options"
            )
        given, _ = read_query(parts.query, list(_DEFAULTS), redact_uri(uri))
        options: dict[str, Any] = dict(given)
        if "create" in given:
            if given["create"].lower() not in ("true", "false", "1", "0"):
                raise ConfigError(
                    f"create={given['create']!r} in {redact_uri(uri)!r}: use true or false"
                )
            options["create"] = given["create"].lower() in ("true", "1")
        if "workers" in given:
            if not given["workers"].isdigit():
                raise ConfigError(
                    f"workers={given['workers']!r} in {redact_uri(uri)!r} is not a number"
                )
            options["workers"] = int(given["workers"])
        return cls(parts.netloc, spec=spec, **options)

    def check(self) -> None:
        self.client.ensure_table()

    def _records(
        self, job: str, partition: int, metrics: StateMetrics | None
    ) -> dict[int, dict[str, Any]]:
        """The version records of a partition: version -> item."""
        what = f"reading versions of {job}/{partition}"
        items = self.client.query(partition_pk(job, partition), metrics, what, prefix=VERSION_ITEM)
        return {int(i["sk"]["S"][1:]): i for i in items}

    # ----- partitions -------------------------------------------------------------------

    def _versions(self, job: str, partition: int) -> list[int]:
        return sorted(self._records(job, partition, None))

    def _partitions(self, job: str) -> list[int]:
        items = self.client.query(job, None, f"listing partitions of {job}", prefix=PARTITION_ITEM)
        return sorted(int(i["sk"]["S"][1:]) for i in items)

    def _open_version(self, job: str, partition: int, version: int) -> DynamoDBVersion:
        metrics = StateMetrics(version=version)
        records = self._records(job, partition, metrics) if version != EMPTY_VERSION else {}
        if version != EMPTY_VERSION and version not in records:
            raise version_error(job, partition, version, have=sorted(records))
        record = records.get(version)
        meta = json.loads(record["meta"]["S"]) if record else {}
        stored = DynamoDBVersion(self, job, partition, version, meta, history(records, version))
        stored.metrics.round_trips = metrics.round_trips
        stored.metrics.keys = int(record["keys"]["N"]) if record else 0
        stored.metrics.bytes = int(record["bytes"]["N"]) if record else 0
        return stored

    def _read_items(self, stored: DynamoDBVersion, keys: Iterable[int]) -> None:
        """Read the key items of `keys` not read yet into `stored.items`."""
        wanted = [int(k) for k in keys if int(k) not in stored.items]
        if not wanted:
            return
        job, partition = stored.job, stored.partition
        got = self.client.get_items(
            [(key_pk(job, partition, k), KEY_ITEM) for k in wanted],
            stored.metrics,
            f"reading {len(wanted)} keys of {job}/{partition}",
        )
        for k in wanted:
            raw = got.get((key_pk(job, partition, k), KEY_ITEM))
            item = parse_key_item(k, raw)
            stored.items[k] = item
            if raw is not None:
                stored.metrics.bytes_read += sum(len(e.value or b"") for e in item.entries)

    def _values(self, stored: DynamoDBVersion, entries: list[tuple[int, Entry]]) -> list[bytes]:
        """The values of (key, entry) pairs, reading chunk items where needed."""
        job, partition = stored.job, stored.partition
        need = [(key_pk(job, partition, k), sk) for k, e in entries for sk in e.chunk_sks()]
        chunks = self.client.get_items(need, stored.metrics, "reading big values") if need else {}
        out: list[bytes] = []
        for k, e in entries:
            if not e.chunks:
                out.append(cast(bytes, e.value))  # held in the entry itself
                continue
            parts = [chunks.get((key_pk(job, partition, k), sk)) for sk in e.chunk_sks()]
            if any(c is None for c in parts):
                raise StateError(
                    f"state of key {k} in {job}/partition={partition} at version {e.version} is"
                    " incomplete: a chunk item is missing"
                )
            value = b"".join(c["d"]["B"] for c in parts if c is not None)
            stored.metrics.bytes_read += len(value)
            out.append(value)
        return out

    def _commit(
        self, stored: DynamoDBVersion, version: int, puts: pa.Table, removes: pa.Array, meta: Meta
    ) -> None:
        job, partition, base = stored.job, stored.partition, stored.version
        metrics = stored.metrics
        what = f"committing version {version} of {job}/{partition}"
        encoded = self.codec.encode(puts)
        removed = removes.to_numpy(zero_copy_only=False).astype(np.int64)
        meta_text = json.dumps(meta, allow_nan=False)
        token = uuid.uuid4().hex[:12]

        # 1. the version records now; the base must still be the one that was read
        records = self._records(job, partition, metrics)
        if base != EMPTY_VERSION and (
            base not in records or records[base]["tok"]["S"] != stored.seen.tokens.get(base)
        ):
            raise base_gone_error(job, partition, version, base)
        # 2. supersede the versions after the base, newest first (unless fenced out)
        fence.check_fence(self.client, partition_pk(job, partition), job, stored.epoch, metrics)
        later = sorted((v for v in records if v > base), reverse=True)
        for v in later:
            self.client.delete_one(partition_pk(job, partition), version_sk(VERSION_ITEM, v), what)
            metrics.round_trips += 1
            del records[v]
        if base == EMPTY_VERSION and later:
            upkeep.drop_items(self.client, job, partition, metrics)
            stored.items.clear()
        seen = history(records, base)
        # 3. the intent: which keys this attempt may touch, before it touches any
        touched = np.unique(np.concatenate([encoded.keys, removed]))
        self.client.write(intent_requests(job, partition, version, token, touched), metrics, what)
        # 4. the key items (with their index attributes), chunk and change items
        self._read_items(stored, touched.tolist())
        changes: list[tuple[int, Entry]] = [
            (k, Entry(version, token, expiry, len(blob), 0, blob))
            for k, expiry, blob in zip(
                encoded.keys.tolist(), encoded.expiry.tolist(), encoded.blob_list(), strict=True
            )
        ]
        changes += [(k, Entry(version, token, 0, -1, 0, None)) for k in removed.tolist()]
        writes: list[dict[str, Any]] = []
        if not records:  # the partition's first version (again): list the partition
            writes.append(put_request({"pk": job, "sk": partition_sk(partition)}))
        stale: list[tuple[str, str]] = []
        lowered: list[tuple[int, int]] = []
        gone: list[int] = []
        index_writes = 0  # what DynamoDB writes to the index for these items (estimated)
        keys, nbytes = metrics.keys or 0, metrics.bytes or 0
        for k, new in changes:
            old = stored.items[k]
            before = old.at(base, seen)
            if new.removed and (before is None or before.removed):
                continue  # removing a key that does not exist: nothing to write
            keys += (not new.removed) - (before is not None and not before.removed)
            nbytes += max(new.length, 0) - (before.length if before and not before.removed else 0)
            entries = [*needed_entries(old, base, seen), new]
            writes += key_writes(job, partition, k, entries)
            stale += unneeded(job, partition, old, entries)
            xe, old_xe = lowest_expiry(entries), old.lowest_expiry()
            index_writes += 0 if xe == old_xe else 1 if None in (xe, old_xe) else 2
            if lowers(old, entries, seen):
                assert xe is not None  # lowered: it holds a value
                lowered.append((k, xe))
            if new.removed:
                gone.append(k)
        writes += change_requests(job, partition, version, token, lowered, gone)
        self.client.write(writes, metrics, what)
        count(metrics, "index_writes", index_writes)
        # 5. publish
        record = {
            "pk": partition_pk(job, partition),
            "sk": version_sk(VERSION_ITEM, version),
            "tok": token,
            "meta": meta_text,
            "keys": keys,
            "bytes": nbytes,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        fence.check_fence(self.client, partition_pk(job, partition), job, stored.epoch, metrics)
        fence.put_unless_newer(
            self.client, put_request(record)["PutRequest"]["Item"], job, stored.epoch, what
        )
        metrics.round_trips += 1
        # 6. clean up (a failure here leaves harmless leftovers: the version is committed)
        with contextlib.suppress(StateError):
            self.client.write([delete_request(pk, sk) for pk, sk in stale], metrics, what)
        metrics.keys, metrics.bytes = keys, nbytes
        metrics.rows_written += puts.num_rows
        metrics.bytes_written += encoded.nbytes + len(meta_text)

    def _truncate_partition(self, job: str, partition: int, after: int) -> None:
        what = f"truncating {job}/{partition} after version {after}"
        records = self._records(job, partition, None)
        for v in sorted((v for v in records if v > after), reverse=True):
            self.client.delete_one(partition_pk(job, partition), version_sk(VERSION_ITEM, v), what)
        if not any(v <= after for v in records):
            upkeep.drop_items(self.client, job, partition, None)
            self.client.delete_one(job, partition_sk(partition), what)

    def _maintain(self, job: str, partition: int, keep_from: int) -> None:
        what = f"maintenance of {job}/{partition}"
        ppk = partition_pk(job, partition)
        records = self._records(job, partition, None)
        # 1. attempts of versions before keep_from: a committed one's intent just goes; a
        #    failed or superseded one's entries are removed first, since they would count
        #    once their version is older than the oldest record
        below = version_sk(INTENT_ITEM, keep_from)
        intents = self.client.query(ppk, None, what, below=below, prefix=INTENT_ITEM)
        failed: dict[tuple[int, str], list[int]] = {}
        for intent in intents:
            version, token, _ = intent["sk"]["S"][1:].split(".")
            record = records.get(int(version))
            if record is None or record["tok"]["S"] != token:
                failed.setdefault((int(version), token), []).extend(intent_keys(intent))
        if failed:
            upkeep.repair(self.client, job, partition, failed)
        self.client.write([delete_request(ppk, i["sk"]["S"]) for i in intents], None, what)
        # 2. the records of the versions no longer retained
        old = [v for v in records if v < keep_from]
        self.client.write(
            [delete_request(ppk, version_sk(VERSION_ITEM, v)) for v in old], None, what
        )
        for v in old:
            del records[v]
        # 3. keys removed at or before keep_from go if no retained version sees them (a
        #    change item goes once its version is not retained: seen at least once here)
        upto = version_sk(CHANGE_ITEM, keep_from + 1)
        changes = self.client.query(ppk, None, what, below=upto, prefix=CHANGE_ITEM)
        keys, expired = set(), []
        for change in changes:
            version, token, _, removed = parse_change(change)
            if version in records and records[version]["tok"]["S"] == token:
                keys.update(removed)
            if version < keep_from:
                expired.append(delete_request(ppk, change["sk"]["S"]))
        if keys and records:
            upkeep.bury(self.client, job, partition, keys, records, keep_from)
        self.client.write(expired, None, what)

    # ----- job records ------------------------------------------------------------------

    def _write_job_record(self, job: str, version: int, body: str, epoch: int | None) -> None:
        self._put_job_item(
            job,
            {"sk": version_sk(JOB_RECORD_ITEM, version), "rec": body},
            epoch,
            f"writing job record {job}/{version}",
        )

    def _write_job_settings(self, job: str, body: str, epoch: int | None) -> None:
        self._put_job_item(
            job, {"sk": JOB_SETTINGS_SK, "js": body}, epoch, f"writing the settings of job {job}"
        )

    def _put_job_item(
        self, job: str, attributes: dict[str, Any], epoch: int | None, what: str
    ) -> None:
        """Put an item of the job's log (a record, the settings) unless fenced."""
        fence.check_fence(self.client, job, job, epoch, None)
        item = put_request({"pk": job, **attributes})
        fence.put_unless_newer(self.client, item["PutRequest"]["Item"], job, epoch, what)

    def _read_job_settings(self, job: str) -> str | None:
        key = (job, JOB_SETTINGS_SK)
        item = self.client.get_items([key], None, f"reading the settings of job {job}").get(key)
        return None if item is None else item["js"]["S"]

    def _raise_fence(self, job: str, epoch: int, partitions: list[int]) -> int:
        pks = [job, *(partition_pk(job, p) for p in partitions)]
        return fence.raise_fences(self.client, pks, epoch, job)

    def _read_fence(self, job: str) -> int:
        return fence.read_fence(self.client, job, job, None)

    def _read_job_record(self, job: str, version: int) -> str | None:
        key = (job, version_sk(JOB_RECORD_ITEM, version))
        item = self.client.get_items([key], None, f"reading job record {job}").get(key)
        return None if item is None else item["rec"]["S"]

    def _job_versions(self, job: str) -> list[int]:
        items = self.client.query(
            job, None, f"listing job records of {job}", prefix=JOB_RECORD_ITEM, projection="pk, sk"
        )
        return sorted(int(i["sk"]["S"][1:]) for i in items)

    def _delete_job_records(self, job: str, versions: list[int]) -> None:
        for v in sorted(versions, reverse=True):
            self.client.delete_one(
                job, version_sk(JOB_RECORD_ITEM, v), f"deleting job record {job}/{v}"
            )
