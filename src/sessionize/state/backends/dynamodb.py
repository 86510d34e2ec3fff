"""The `dynamodb` state store: one item per key holding the key's recent versions, published
by a version record, with an expiry index of small items; batched with BatchGetItem and
BatchWriteItem.

URI: `dynamodb://TABLE_PREFIX?region=us-east-1[&endpoint=http://127.0.0.1:8000]`. Options:
`region`, `endpoint` (a local server such as dynalite; default AWS), `create` (create the
table, on-demand, if it is missing; default true), `workers` (requests in flight, default
8). Credentials come from the normal AWS chain (environment, profile, role), never the URI.

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
  4. read the items of the changed keys not read by this transaction (BatchGetItem), and
     write their new items (BatchWriteItem): the entries that count at P, pruned to those
     the oldest retained version still needs, plus V's entry; the new expiry index items,
     chunk items of big values, graveyard items of removed keys, and the partition record
     for a partition's first version;
  5. publish V's version record;
  6. delete index and chunk items no entry needs any more (best effort: an index item
     left behind only makes `expiring` check one key more, and is deleted when seen).

Maintenance to keep_from: the entries of failed attempts before keep_from are removed
(found through their intents), then the intents and version records before keep_from, then
the key items of keys removed at or before keep_from that no retained version sees.

Round trips per partition and batch: open 1 (the version records); `get_many` one
BatchGetItem per 100 keys; `expiring` one Query per index shard and page (4, up to ~16k
candidates each) plus BatchGetItems of the candidates, which `get_many` then reuses;
commit: 1 + one BatchWriteItem per 25 items written + 1 (+ one per superseded version).
Requests run on `workers` threads; unprocessed items are retried with backoff.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode, urlsplit

import numpy as np
import pyarrow as pa

from sessionize.errors import ConfigError, StateError
from sessionize.state.backends import dynamodb_fence as fence
from sessionize.state.backends.common import read_query
from sessionize.state.backends.dynamodb_client import BatchedClient
from sessionize.state.backends.dynamodb_layout import (
    INDEX_SHARDS,
    KEY_ITEM,
    NO_HISTORY,
    Entry,
    History,
    KeyItem,
    delete_request,
    expiry_from_text,
    expiry_text,
    graveyard_pk,
    history,
    index_pk,
    index_shard_pk,
    index_sk,
    intent_keys,
    intent_requests,
    job_record_sk,
    key_item_request,
    key_of,
    key_pk,
    key_writes,
    needed_entries,
    parse_key_item,
    partition_pk,
    partition_sk,
    put_request,
    unneeded,
    version_sk,
    version_text,
)
from sessionize.state.backends.keyblobs import RowCodec
from sessionize.state.base import StateBackend, base_gone_error, version_error
from sessionize.state.metrics import StateMetrics
from sessionize.state.rows import EMPTY_VERSION, RowSpec
from sessionize.state.stored import StoredVersion

_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{3,200}$")
_DEFAULTS: dict[str, Any] = {"region": None, "endpoint": None, "create": True, "workers": 8}


class DynamoDBBackend(StateBackend):
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
        self.client = BatchedClient(self.table, region=region, endpoint=endpoint, create=create,
                                    workers=workers, where=self.uri)  # fmt: skip

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
            raise ConfigError(f"not a DynamoDB URI: {uri!r}")
        if "@" in parts.netloc:
            raise ConfigError(
                "DynamoDB credentials do not belong in the state store URI: use the AWS"
                " credential chain (environment, profile, instance role)"
            )
        if parts.path.strip("/"):
            raise ConfigError(f"DynamoDB URI {uri!r}: use dynamodb://TABLE_PREFIX?options")
        given, _ = read_query(parts.query, list(_DEFAULTS), uri)
        options: dict[str, Any] = dict(given)
        if "create" in given:
            if given["create"].lower() not in ("true", "false", "1", "0"):
                raise ConfigError(f"create={given['create']!r} in {uri!r}: use true or false")
            options["create"] = given["create"].lower() in ("true", "1")
        if "workers" in given:
            if not given["workers"].isdigit():
                raise ConfigError(f"workers={given['workers']!r} in {uri!r} is not a number")
            options["workers"] = int(given["workers"])
        return cls(parts.netloc, spec=spec, **options)

    def check(self) -> None:
        self.client.ensure_table()

    def _records(self, job: str, partition: int, metrics: StateMetrics | None) -> dict[int, dict]:
        """The version records of a partition: version -> item."""
        what = f"reading versions of {job}/{partition}"
        items = self.client.query(partition_pk(job, partition), metrics, what, prefix="v")
        return {int(i["sk"]["S"][1:]): i for i in items}

    # ----- partitions -------------------------------------------------------------------

    def _versions(self, job: str, partition: int) -> list[int]:
        return sorted(self._records(job, partition, None))

    def _partitions(self, job: str) -> list[int]:
        items = self.client.query(job, None, f"listing partitions of {job}", prefix="p")
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
            [(key_pk(job, partition, k), KEY_ITEM) for k in wanted], stored.metrics,
            f"reading {len(wanted)} keys of {job}/{partition}",
        )  # fmt: skip
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
        out = []
        for k, e in entries:
            if not e.chunks:
                out.append(e.value)
                continue
            parts = [chunks.get((key_pk(job, partition, k), sk)) for sk in e.chunk_sks()]
            if any(c is None for c in parts):
                raise StateError(
                    f"state of key {k} in {job}/partition={partition} at version {e.version} is"
                    " incomplete: a chunk item is missing"
                )
            value = b"".join(c["d"]["B"] for c in parts)
            stored.metrics.bytes_read += len(value)
            out.append(value)
        return out

    def _commit(
        self, stored: DynamoDBVersion, version: int, puts: pa.Table, removes: pa.Array, meta: dict
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
            self.client.delete_one(partition_pk(job, partition), version_sk(v), what)
            metrics.round_trips += 1
            del records[v]
        if base == EMPTY_VERSION and later:
            self._drop_items(job, partition, metrics)
            stored.items.clear()
        seen = history(records, base)
        # 3. the intent: which keys this attempt may touch, before it touches any
        touched = np.unique(np.concatenate([encoded.keys, removed]))
        self.client.write(intent_requests(job, partition, version, token, touched), metrics, what)
        # 4. the key items, index, chunk and graveyard items
        self._read_items(stored, touched.tolist())
        changes: list[tuple[int, Entry]] = [
            (k, Entry(version, token, expiry, len(blob), 0, blob))
            for k, expiry, blob in zip(
                encoded.keys.tolist(), encoded.expiry.tolist(), encoded.blob_list(), strict=True
            )
        ]
        changes += [(k, Entry(version, token, 0, -1, 0, None)) for k in removed.tolist()]
        writes: list[dict] = []
        if not records:  # the partition's first version (again): list the partition
            writes.append(put_request({"pk": job, "sk": partition_sk(partition)}))
        stale: list[tuple[str, str]] = list(stored.junk)
        keys, nbytes = metrics.keys or 0, metrics.bytes or 0
        for k, new in changes:
            old = stored.items[k]
            before = old.at(base, seen)
            if new.removed and (before is None or before.removed):
                continue  # removing a key that does not exist: nothing to write
            keys += (not new.removed) - (before is not None and not before.removed)
            nbytes += max(new.length, 0) - (before.length if before and not before.removed else 0)
            entries = [*needed_entries(old, base, seen), new]
            writes += key_writes(job, partition, k, entries, old)
            stale += unneeded(job, partition, old, entries)
        self.client.write(writes, metrics, what)
        # 5. publish
        record = {
            "pk": partition_pk(job, partition), "sk": version_sk(version), "tok": token,
            "meta": meta_text, "keys": keys, "bytes": nbytes,
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }  # fmt: skip
        fence.check_fence(self.client, partition_pk(job, partition), job, stored.epoch, metrics)
        fence.put_unless_newer(self.client, put_request(record)["PutRequest"]["Item"], job,
                               stored.epoch, what)  # fmt: skip
        metrics.round_trips += 1
        # 6. clean up (a failure here leaves harmless leftovers: the version is committed)
        with contextlib.suppress(StateError):
            self.client.write([delete_request(pk, sk) for pk, sk in stale], metrics, what)
        metrics.keys, metrics.bytes = keys, nbytes
        metrics.rows_written += puts.num_rows
        metrics.bytes_written += encoded.nbytes + len(meta_text)
        metrics.extra["items_written"] = len(writes)

    def _drop_items(self, job: str, partition: int, metrics: StateMetrics | None) -> None:
        """Delete every key, chunk, index, graveyard and intent item of the partition (found
        through the index, graveyard and intents): for a partition that starts over."""
        what = f"clearing {job}/{partition}"
        pks = [index_shard_pk(job, partition, s) for s in range(INDEX_SHARDS)]
        pks.append(graveyard_pk(job, partition))
        small = [(pk, i["sk"]["S"]) for pk in pks
                 for i in self.client.query(pk, metrics, what, projection="pk, sk")]  # fmt: skip
        intents = self.client.query(partition_pk(job, partition), metrics, what, prefix="i")
        keys = {key_of(sk) for _, sk in small}
        for intent in intents:
            keys.update(intent_keys(intent))
        wanted = [(key_pk(job, partition, k), KEY_ITEM) for k in keys]
        items = self.client.get_items(wanted, metrics, what)
        deletes = [delete_request(pk, sk) for pk, sk in small]
        for (pk, _), raw in items.items():
            deletes.append(delete_request(pk, KEY_ITEM))
            chunk_sks = [sk for e in parse_key_item(0, raw).entries for sk in e.chunk_sks()]
            deletes += [delete_request(pk, sk) for sk in chunk_sks]
        self.client.write(deletes, metrics, what)
        self.client.write(
            [delete_request(i["pk"]["S"], i["sk"]["S"]) for i in intents], metrics, what
        )

    def _truncate_partition(self, job: str, partition: int, after: int) -> None:
        what = f"truncating {job}/{partition} after version {after}"
        records = self._records(job, partition, None)
        for v in sorted((v for v in records if v > after), reverse=True):
            self.client.delete_one(partition_pk(job, partition), version_sk(v), what)
        if not any(v <= after for v in records):
            self._drop_items(job, partition, None)
            self.client.delete_one(job, partition_sk(partition), what)

    def _maintain(self, job: str, partition: int, keep_from: int) -> None:
        what = f"maintenance of {job}/{partition}"
        ppk = partition_pk(job, partition)
        records = self._records(job, partition, None)
        # 1. attempts of versions before keep_from: a committed one's intent just goes; a
        #    failed or superseded one's entries are removed first, since they would count
        #    once their version is older than the oldest record
        below = f"i{version_text(keep_from)}"
        intents = self.client.query(ppk, None, what, below=below, prefix="i")
        failed: dict[tuple[int, str], list[int]] = {}
        for intent in intents:
            version, token, _ = intent["sk"]["S"][1:].split(".")
            record = records.get(int(version))
            if record is None or record["tok"]["S"] != token:
                failed.setdefault((int(version), token), []).extend(intent_keys(intent))
        if failed:
            self._repair(job, partition, failed)
        self.client.write([delete_request(ppk, i["sk"]["S"]) for i in intents], None, what)
        # 2. the records of the versions no longer retained
        old = [v for v in records if v < keep_from]
        self.client.write([delete_request(ppk, version_sk(v)) for v in old], None, what)
        for v in old:
            del records[v]
        # 3. keys removed at or before keep_from go if no retained version sees them
        gpk = graveyard_pk(job, partition)
        graves = self.client.query(gpk, None, what, below=version_text(keep_from + 1),
                                   projection="pk, sk")  # fmt: skip
        if not graves or not records:
            return
        seen = history(records, max(records))
        keys = {key_of(g["sk"]["S"]) for g in graves}
        raw = self.client.get_items([(key_pk(job, partition, k), KEY_ITEM) for k in keys],
                                    None, what)  # fmt: skip
        deletes = [delete_request(gpk, g["sk"]["S"]) for g in graves]
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
        self.client.write(deletes, None, what)

    def _repair(self, job: str, partition: int, failed: dict[tuple[int, str], list[int]]) -> None:
        """Remove the entries of failed attempts (version, token) from the items of the keys
        they touched."""
        what = f"repairing {job}/{partition}"
        keys = sorted({k for ks in failed.values() for k in ks})
        wanted = [(key_pk(job, partition, k), KEY_ITEM) for k in keys]
        raw = self.client.get_items(wanted, None, what)
        writes, stale = [], []
        for k in keys:
            pk = key_pk(job, partition, k)
            item = parse_key_item(k, raw.get((pk, KEY_ITEM)))
            entries = [e for e in item.entries if (e.version, e.token) not in failed]
            if len(entries) == len(item.entries):
                continue
            if entries:
                writes.append(key_item_request(pk, entries))
            else:
                writes.append(delete_request(pk, KEY_ITEM))
            stale += unneeded(job, partition, item, entries)
        self.client.write(writes, None, what)
        self.client.write([delete_request(pk, sk) for pk, sk in stale], None, what)

    # ----- job records ------------------------------------------------------------------

    def _write_job_record(self, job: str, version: int, body: str, epoch: int | None) -> None:
        fence.check_fence(self.client, job, job, epoch, None)
        item = put_request({"pk": job, "sk": job_record_sk(version), "rec": body})
        fence.put_unless_newer(self.client, item["PutRequest"]["Item"], job, epoch,
                               f"writing job record {job}/{version}")  # fmt: skip

    def _raise_fence(self, job: str, epoch: int, partitions: list[int]) -> int:
        pks = [job, *(partition_pk(job, p) for p in partitions)]
        return fence.raise_fences(self.client, pks, epoch, job)

    def _read_fence(self, job: str) -> int:
        return fence.read_fence(self.client, job, job, None)

    def _read_job_record(self, job: str, version: int) -> str | None:
        key = (job, job_record_sk(version))
        item = self.client.get_items([key], None, f"reading job record {job}").get(key)
        return None if item is None else item["rec"]["S"]

    def _job_versions(self, job: str) -> list[int]:
        items = self.client.query(job, None, f"listing job records of {job}", prefix="r",
                                  projection="pk, sk")  # fmt: skip
        return sorted(int(i["sk"]["S"][1:]) for i in items)

    def _delete_job_records(self, job: str, versions: list[int]) -> None:
        for v in sorted(versions, reverse=True):
            self.client.delete_one(job, job_record_sk(v), f"deleting job record {job}/{v}")


class DynamoDBVersion(StoredVersion):
    """A partition at a version: key items are read on demand and kept for the commit."""

    def __init__(self, backend: DynamoDBBackend, job: str, partition: int, version: int,
                 meta: dict, seen: History = NO_HISTORY):  # fmt: skip
        super().__init__(backend, job, partition, version, meta)
        self.backend: DynamoDBBackend = backend
        self.seen = seen
        self.items: dict[int, KeyItem] = {}
        self.junk: list[tuple[str, str]] = []  # index items found pointing at nothing

    def _read_rows(self, keys: pa.Int64Array) -> pa.Table:
        backend = self.backend
        wanted = keys.to_numpy().tolist()
        backend._read_items(self, wanted)
        pairs = []
        for k in wanted:
            e = self.items[k].at(self.version, self.seen)
            if e is not None and not e.removed:
                pairs.append((k, e))
        values = backend._values(self, pairs)
        table = backend.codec.decode(np.array([k for k, _ in pairs], dtype=np.int64), values)
        self.metrics.rows_loaded += table.num_rows
        return table

    def _read_expiring(self, upto_us: int) -> pa.Int64Array:
        backend, client = self.backend, self.backend.client
        job, partition = self.job, self.partition
        what = f"reading expiring keys of {job}/{partition}"
        shards = [index_shard_pk(job, partition, s) for s in range(INDEX_SHARDS)]
        below = expiry_text(upto_us)
        counters = [StateMetrics() for _ in shards]
        found = client.parallel(
            lambda i: client.query(shards[i], counters[i], what, below=below, projection="sk"),
            list(range(len(shards))),
        )
        self.metrics.round_trips += sum(c.round_trips for c in counters)
        candidates: dict[int, set[int]] = {}
        for items in found:
            for i in items:
                expiry, key = i["sk"]["S"].split("#")
                candidates.setdefault(int(key), set()).add(expiry_from_text(expiry))
        backend._read_items(self, candidates)
        out = []
        for k, expiries in candidates.items():
            item = self.items[k]
            e = item.at(self.version, self.seen)
            if e is not None and not e.removed and e.expiry < upto_us:
                out.append(k)
            for x in expiries - item.expiries():
                self.junk.append((index_pk(job, partition, k), index_sk(x, k)))
        return pa.array(sorted(out), pa.int64())

    def close(self) -> None:
        self.items = {}
