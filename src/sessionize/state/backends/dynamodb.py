"""The `dynamodb` state store: one item per key holding the key's recent versions, published
by a version record, with an expiry index of small items; batched with BatchGetItem and
BatchWriteItem.

URI: `dynamodb://TABLE_PREFIX?region=us-east-1[&endpoint=http://127.0.0.1:8000]`. Options:
`region`, `endpoint` (a local server such as dynalite; default AWS), `create` (create the
table, on-demand, if it is missing; default true), `workers` (requests in flight, default
8). Credentials come from the normal AWS chain (environment, profile, role), never the URI.

One table, `<TABLE_PREFIX>_state`, string keys `pk` and `sk`::

    pk = J#p#KEY      sk = k             the key item: h = its entries, oldest first, as
                                         "version.token.expiry.length.chunks;..." (length
                                         -1: removed at that version), b = their inline
                                         values (keyblobs) end to end, in the same order
                                         (one binary attribute: botocore's cost is per
                                         attribute value, not per byte)
    pk = J#p#KEY      sk = vVERSIONTOKEN.i  chunk i of a value too big to stay inline
    pk = J#p#xS       sk = EXPIRY#KEY    expiry index, shard S = KEY % 4 (EXPIRY: 20 digits,
                                         biased so that text order is time order); one
                                         item per expiry any stored entry has
    pk = J#p#g        sk = VERSION#KEY   keys removed at VERSION, for maintenance
    pk = J#p          sk = vVERSION      version record: token, meta, keys, bytes
    pk = J            sk = pPARTITION    partition record
    pk = J            sk = rVERSION      job record (the driver's commit log)

Versions are zero-padded to 20 digits. Every commit has a random token, written into each
entry it adds; an entry counts at version V iff its version <= V and its token is the one
in the current record of its version. A key's value at V is its newest entry that counts.
So a commit becomes visible at once, when its version record is written (a single PutItem),
and the entries of a failed or superseded attempt never count.

Commit of V on the loaded version P (in this order):
  1. re-read the version records; P must still be committed, with its token;
  2. delete the records of the versions after P (newest first, one by one): from here the
     old history is gone and P is the newest version, whatever happens next;
  3. read the items of the changed keys not read by this transaction (BatchGetItem), and
     write their new items (BatchWriteItem): the entries that count at P, pruned to those
     the oldest retained version still needs, plus V's entry; the new expiry index items,
     chunk items of big values, and graveyard items of removed keys;
  4. publish V's version record;
  5. delete index and chunk items no entry needs any more (best effort: an index item
     left behind only makes `expiring` check one key more, and is deleted when seen).

Round trips per partition and batch: open 1 (the version records); `get_many` one
BatchGetItem per 100 keys; `expiring` one Query per index shard and page (4, up to ~16k
candidates each) plus BatchGetItems of the candidates, which `get_many` then reuses;
commit: 1 + one BatchWriteItem per 25 items written + 1 (+ one per superseded version).
Requests run on `workers` threads; unprocessed items are retried with backoff.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import boto3
import botocore.config
import botocore.exceptions
import numpy as np
import pyarrow as pa

from sessionize.errors import ConfigError, StateError
from sessionize.state.backends.keyblobs import RowCodec
from sessionize.state.base import (
    EMPTY_VERSION,
    RowSpec,
    StateBackend,
    StateMetrics,
    StoredVersion,
    check_job,
    check_partition,
    check_version,
)

GET_BATCH = 100  # BatchGetItem limit
WRITE_BATCH = 25  # BatchWriteItem limit
INDEX_SHARDS = 4  # part of the layout: changing it hides existing index items
INLINE_LIMIT = 300_000  # bytes of values kept inline in a key item (items max 400 KB)
CHUNK_BYTES = 350_000
MAX_ATTEMPTS = 12  # for unprocessed items, with exponential backoff
_BIAS = 2**63
_PREFIX = re.compile(r"^[A-Za-z0-9_.-]{3,200}$")
_DEFAULTS: dict[str, Any] = {"region": None, "endpoint": None, "create": True, "workers": 8}


def _v(version: int) -> str:
    return f"{version:020d}"


def _e20(us: int) -> str:
    return f"{us + _BIAS:020d}"


@dataclass
class _Entry:
    version: int
    token: str
    expiry: int
    length: int  # -1: the key was removed at this version
    chunks: int  # 0: the value is inline
    value: bytes | None  # inline value

    @property
    def removed(self) -> bool:
        return self.length < 0

    def chunk_sks(self) -> list[str]:
        return [f"v{_v(self.version)}{self.token}.{i}" for i in range(self.chunks)]


@dataclass(frozen=True)
class _Line:
    """The committed history a reader or writer sees: the tokens of the committed versions
    it may use, and the oldest committed version of the partition.

    An entry counts iff its version is below `oldest` (every entry left there was committed:
    maintenance repairs failed attempts before it drops their versions' records), or its
    token is the one in the record of its version."""

    tokens: dict[int, str]
    oldest: int | None

    def counts(self, e: _Entry) -> bool:
        if self.oldest is None:
            return False
        return e.version < self.oldest or self.tokens.get(e.version) == e.token


_NOTHING = _Line({}, None)


@dataclass
class _Item:
    """A key item as read, entries oldest first (none for a missing item)."""

    key: int
    entries: list[_Entry] = field(default_factory=list)

    def at(self, version: int, line: _Line) -> _Entry | None:
        """The entry that gives the key's value at `version`, if any counts."""
        found = None
        for e in self.entries:
            if e.version <= version and line.counts(e):
                found = e
        return found

    def expiries(self) -> set[int]:
        return {e.expiry for e in self.entries if not e.removed}


def _parse_item(key: int, raw: dict | None) -> _Item:
    item = _Item(key)
    if not raw or "h" not in raw:
        return item
    values = raw.get("b", {}).get("B", b"")
    at = 0
    for text in raw["h"]["S"].split(";"):
        version, token, expiry, length, chunks = text.split(".")
        size, n = int(length), int(chunks)
        value = None
        if size >= 0 and not n:  # inline
            value, at = values[at : at + size], at + size
        item.entries.append(_Entry(int(version), token, int(expiry), size, n, value))
    return item


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
        self._client_pid: int | None = None
        self._client_obj = None
        self._executor: ThreadPoolExecutor | None = None
        self._ready = False
        self._lock = threading.Lock()

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
        options: dict[str, Any] = {}
        query = parts.query
        for name, value in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
            if name not in _DEFAULTS:
                raise ConfigError(
                    f"unknown option '{name}' in state store URI {uri!r};"
                    f" known: {', '.join(_DEFAULTS)}"
                )
            if name == "create":
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ConfigError(f"create={value!r} in {uri!r}: use true or false")
                options[name] = value.lower() in ("true", "1")
            elif name == "workers":
                if not value.isdigit():
                    raise ConfigError(f"workers={value!r} in {uri!r} is not a number")
                options[name] = int(value)
            else:
                options[name] = value
        return cls(parts.netloc, spec=spec, **options)

    def check(self) -> None:
        self._ensure_table()

    # ----- client, table and errors -----------------------------------------------------

    @property
    def _client(self):
        pid = os.getpid()
        if self._client_obj is None or self._client_pid != pid:
            with self._lock:
                if self._client_obj is None or self._client_pid != pid:
                    config = botocore.config.Config(
                        connect_timeout=5,
                        read_timeout=60,
                        retries={"max_attempts": 3, "mode": "standard"},
                        max_pool_connections=2 * self.workers,
                        parameter_validation=False,
                    )
                    session = boto3.session.Session()
                    self._client_obj = session.client(
                        "dynamodb",
                        region_name=self.region,
                        endpoint_url=self.endpoint,
                        config=config,
                    )
                    self._executor = ThreadPoolExecutor(self.workers, "sessionize-dynamodb")
                    self._client_pid = pid
        return self._client_obj

    def _call(self, what: str, work: Callable[[Any], Any]) -> Any:
        try:
            return work(self._client)
        except botocore.exceptions.NoRegionError:
            raise StateError(
                f"DynamoDB state store {self.uri}: {what} failed: no AWS region"
                " (add ?region=... to the URI or set AWS_DEFAULT_REGION)"
            ) from None
        except botocore.exceptions.NoCredentialsError:
            raise StateError(
                f"DynamoDB state store {self.uri}: {what} failed: no AWS credentials found"
                " in the credential chain"
            ) from None
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            text = " ".join(str(e).split())
            raise StateError(f"DynamoDB state store {self.uri}: {what} failed: {text}") from None

    def _ensure_table(self) -> None:
        if self._ready:
            return

        def ensure(client) -> None:
            # Errors are told apart by code: the classes under client.exceptions are built
            # lazily and may differ between threads that raced to build them.
            try:
                status = client.describe_table(TableName=self.table)["Table"]["TableStatus"]
            except botocore.exceptions.ClientError as e:
                if _code(e) != "ResourceNotFoundException":
                    raise
                if not self.create:
                    raise StateError(
                        f"DynamoDB state store {self.uri}: table {self.table} does not exist"
                        " (and create=false)"
                    ) from None
                try:
                    client.create_table(
                        TableName=self.table,
                        BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=[
                            {"AttributeName": "pk", "AttributeType": "S"},
                            {"AttributeName": "sk", "AttributeType": "S"},
                        ],
                        KeySchema=[
                            {"AttributeName": "pk", "KeyType": "HASH"},
                            {"AttributeName": "sk", "KeyType": "RANGE"},
                        ],
                    )
                except botocore.exceptions.ClientError as e2:
                    if _code(e2) != "ResourceInUseException":  # another worker created it
                        raise
                status = "CREATING"
            if status != "ACTIVE":
                client.get_waiter("table_exists").wait(
                    TableName=self.table, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
                )

        self._call(f"opening table {self.table}", ensure)
        self._ready = True

    # ----- batched primitives -------------------------------------------------------------

    def _parallel(self, work: Callable[[Any], Any], chunks: list) -> list:
        if len(chunks) <= 1:
            return [work(c) for c in chunks]
        self._client  # noqa: B018 - a forked child gets its own client and threads first
        return list(self._executor.map(work, chunks))

    def _get_items(
        self, keys: list[tuple[str, str]], metrics: StateMetrics | None, what: str
    ) -> dict[tuple[str, str], dict]:
        """Items by (pk, sk), read consistently, 100 per BatchGetItem, retrying unprocessed
        keys with backoff."""
        self._ensure_table()
        chunks = [keys[i : i + GET_BATCH] for i in range(0, len(keys), GET_BATCH)]

        def get(chunk: list[tuple[str, str]]) -> tuple[list[dict], int]:
            request = {
                self.table: {
                    "Keys": [{"pk": {"S": pk}, "sk": {"S": sk}} for pk, sk in chunk],
                    "ConsistentRead": True,
                }
            }
            found: list[dict] = []
            for attempt in range(MAX_ATTEMPTS):
                reply = self._call(what, lambda c, r=request: c.batch_get_item(RequestItems=r))
                found += reply.get("Responses", {}).get(self.table, [])
                request = reply.get("UnprocessedKeys") or {}
                if not request:
                    return found, attempt + 1
                _backoff(attempt)
            raise StateError(f"DynamoDB state store {self.uri}: {what}: keys stayed unprocessed")

        out: dict[tuple[str, str], dict] = {}
        for found, trips in self._parallel(get, chunks):
            if metrics is not None:
                metrics.round_trips += trips
            for item in found:
                out[(item["pk"]["S"], item["sk"]["S"])] = item
        return out

    def _write(self, requests: list[dict], metrics: StateMetrics | None, what: str) -> None:
        """PutRequest/DeleteRequest entries, 25 per BatchWriteItem (in parallel), retrying
        unprocessed items with backoff. Order among them is not kept."""
        if not requests:
            return
        self._ensure_table()
        chunks = [requests[i : i + WRITE_BATCH] for i in range(0, len(requests), WRITE_BATCH)]

        def write(chunk: list[dict]) -> int:
            pending = {self.table: chunk}
            for attempt in range(MAX_ATTEMPTS):
                reply = self._call(what, lambda c, r=pending: c.batch_write_item(RequestItems=r))
                pending = reply.get("UnprocessedItems") or {}
                if not pending:
                    return attempt + 1
                _backoff(attempt)
            raise StateError(f"DynamoDB state store {self.uri}: {what}: items stayed unprocessed")

        trips = sum(self._parallel(write, chunks))
        if metrics is not None:
            metrics.round_trips += trips

    def _query(self, pk: str, metrics: StateMetrics | None, what: str, *, below: str | None = None,
               prefix: str | None = None, projection: str | None = None) -> list[dict]:  # fmt: skip
        """All items of `pk` (with sk < `below`, or sk beginning with `prefix`), consistently."""
        self._ensure_table()
        condition = "pk = :pk"
        values: dict[str, dict] = {":pk": {"S": pk}}
        if below is not None and prefix is not None:
            condition += " AND sk BETWEEN :lo AND :sk"  # `below` itself is never a key
            values[":lo"] = {"S": prefix}
            values[":sk"] = {"S": below}
        elif below is not None:
            condition += " AND sk < :sk"
            values[":sk"] = {"S": below}
        elif prefix is not None:
            condition += " AND begins_with(sk, :sk)"
            values[":sk"] = {"S": prefix}
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ConsistentRead": True,
        }
        if projection:
            request["ProjectionExpression"] = projection
        items: list[dict] = []
        while True:
            reply = self._call(what, lambda c, r=dict(request): c.query(**r))
            if metrics is not None:
                metrics.round_trips += 1
            items += reply.get("Items", [])
            if "LastEvaluatedKey" not in reply:
                return items
            request["ExclusiveStartKey"] = reply["LastEvaluatedKey"]

    def _delete_one(self, pk: str, sk: str, what: str) -> None:
        self._ensure_table()
        self._call(what, lambda c: c.delete_item(
            TableName=self.table, Key={"pk": {"S": pk}, "sk": {"S": sk}}))  # fmt: skip

    # ----- names ------------------------------------------------------------------------

    @staticmethod
    def _ppk(job: str, partition: int) -> str:
        return f"{job}#{partition}"

    @staticmethod
    def _kpk(job: str, partition: int, key: int) -> str:
        return f"{job}#{partition}#{key}"

    @staticmethod
    def _xpk(job: str, partition: int, key: int) -> str:
        return f"{job}#{partition}#x{key % INDEX_SHARDS}"

    @staticmethod
    def _gpk(job: str, partition: int) -> str:
        return f"{job}#{partition}#g"

    def _records(self, job: str, partition: int, metrics: StateMetrics | None) -> dict[int, dict]:
        """The version records of a partition: version -> item."""
        items = self._query(self._ppk(job, partition), metrics, f"reading versions of {job}/"
                            f"{partition}", prefix="v")  # fmt: skip
        return {int(i["sk"]["S"][1:]): i for i in items}

    # ----- partitions -------------------------------------------------------------------

    def versions(self, job: str, partition: int) -> list[int]:
        check_job(job)
        check_partition(partition)
        return sorted(self._records(job, partition, None))

    def partitions(self, job: str) -> list[int]:
        check_job(job)
        items = self._query(job, None, f"listing partitions of {job}", prefix="p")
        return sorted(int(i["sk"]["S"][1:]) for i in items)

    def _open_version(self, job: str, partition: int, version: int) -> DynamoDBVersion:
        metrics = StateMetrics(version=version)
        records = self._records(job, partition, metrics) if version != EMPTY_VERSION else {}
        if version != EMPTY_VERSION and version not in records:
            raise StateError(_missing(job, partition, version, sorted(records)))
        line = _line(records, version)
        rec = records.get(version)
        meta = json.loads(rec["meta"]["S"]) if rec else {}
        stored = DynamoDBVersion(self, job, partition, version, meta, line)
        stored.metrics.round_trips = metrics.round_trips
        stored.metrics.keys = int(rec["keys"]["N"]) if rec else 0
        stored.metrics.bytes = int(rec["bytes"]["N"]) if rec else 0
        return stored

    def _read_items(self, stored: DynamoDBVersion, keys: Iterable[int]) -> None:
        """Read the key items of `keys` not read yet into `stored.items`."""
        wanted = [int(k) for k in keys if int(k) not in stored.items]
        if not wanted:
            return
        job, p = stored.job, stored.partition
        got = self._get_items(
            [(self._kpk(job, p, k), "k") for k in wanted], stored.metrics,
            f"reading {len(wanted)} keys of {job}/{p}",
        )  # fmt: skip
        for k in wanted:
            raw = got.get((self._kpk(job, p, k), "k"))
            item = _parse_item(k, raw)
            stored.items[k] = item
            if raw is not None:
                stored.metrics.bytes_read += sum(len(e.value or b"") for e in item.entries)

    def _values(self, stored: DynamoDBVersion, entries: list[tuple[int, _Entry]]) -> list[bytes]:
        """The values of (key, entry) pairs, reading chunk items where needed."""
        job, p = stored.job, stored.partition
        need = [(self._kpk(job, p, k), sk) for k, e in entries for sk in e.chunk_sks()]
        chunks = self._get_items(need, stored.metrics, "reading big values") if need else {}
        out = []
        for k, e in entries:
            if not e.chunks:
                out.append(e.value)
                continue
            parts = [chunks.get((self._kpk(job, p, k), sk)) for sk in e.chunk_sks()]
            if any(c is None for c in parts):
                raise StateError(
                    f"state of key {k} in {job}/partition={p} at version {e.version} is"
                    " incomplete: a chunk item is missing"
                )
            value = b"".join(c["d"]["B"] for c in parts)
            stored.metrics.bytes_read += len(value)
            out.append(value)
        return out

    def _commit(
        self, stored: DynamoDBVersion, version: int, puts: pa.Table, removes: pa.Array, meta: dict
    ) -> None:
        job, p, base = stored.job, stored.partition, stored.version
        m = stored.metrics
        what = f"committing version {version} of {job}/{p}"
        encoded = self.codec.encode(puts)
        removed = removes.to_numpy(zero_copy_only=False).astype(np.int64)
        meta_text = json.dumps(meta, allow_nan=False)
        token = uuid.uuid4().hex[:12]

        # 1. the version records now; the base must still be the one that was read
        records = self._records(job, p, m)
        if base != EMPTY_VERSION and (
            base not in records or records[base]["tok"]["S"] != stored.line.tokens.get(base)
        ):
            raise StateError(
                f"cannot commit version {version} of {job}/partition={p}: the version it was"
                f" built on, {base}, is no longer committed (truncated or re-committed meanwhile)"
            )
        # 2. supersede the versions after the base, newest first
        later = sorted((v for v in records if v > base), reverse=True)
        for v in later:
            self._delete_one(self._ppk(job, p), f"v{_v(v)}", what)
            m.round_trips += 1
            del records[v]
        if base == EMPTY_VERSION and later:
            self._drop_items(job, p, m)
            stored.items.clear()
        line = _line(records, base)
        # 3. the intent: which keys this attempt may touch, before it touches any
        touched = np.unique(np.concatenate([encoded.keys, removed]))
        self._write(self._intent(job, p, version, token, touched), m, what)
        # 4. the key items, index, chunk and graveyard items
        self._read_items(stored, touched.tolist())
        changes: list[tuple[int, _Entry]] = [
            (k, _Entry(version, token, e, len(b), 0, b))
            for k, e, b in zip(
                encoded.keys.tolist(), encoded.expiry.tolist(), encoded.blob_list(), strict=True
            )
        ]
        changes += [(k, _Entry(version, token, 0, -1, 0, None)) for k in removed.tolist()]
        writes: list[dict] = []
        if not records:  # the partition's first version (again): list the partition
            writes.append(self._put({"pk": job, "sk": f"p{partition_sk(p)}"}))
        stale: list[tuple[str, str]] = list(stored.junk)
        keys, nbytes = m.keys or 0, m.bytes or 0
        for k, new in changes:
            old = stored.items[k]
            before = old.at(base, line)
            if new.removed and (before is None or before.removed):
                continue  # removing a key that does not exist: nothing to write
            keys += (not new.removed) - (before is not None and not before.removed)
            nbytes += max(new.length, 0) - (before.length if before and not before.removed else 0)
            entries = [*_needed(old, base, line), new]
            writes += self._item_writes(job, p, k, entries, old)
            stale += self._unneeded(job, p, old, entries)
        self._write(writes, m, what)
        # 5. publish
        record = {
            "pk": self._ppk(job, p), "sk": f"v{_v(version)}", "tok": token, "meta": meta_text,
            "keys": keys, "bytes": nbytes, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }  # fmt: skip
        item = self._put(record)["PutRequest"]["Item"]
        self._call(what, lambda c: c.put_item(TableName=self.table, Item=item))
        m.round_trips += 1
        # 6. clean up (a failure here leaves harmless leftovers: the version is committed)
        with contextlib.suppress(StateError):
            self._write([_delete(pk, sk) for pk, sk in stale], m, what)
        m.keys, m.bytes = keys, nbytes
        m.rows_written += puts.num_rows
        m.bytes_written += encoded.nbytes + len(meta_text)
        m.extra["items_written"] = len(writes)

    def _intent(self, job: str, p: int, version: int, token: str, keys: np.ndarray) -> list:
        per_item = CHUNK_BYTES // 8
        return [
            self._put({
                "pk": self._ppk(job, p), "sk": f"i{_v(version)}.{token}.{i // per_item}",
                "ks": keys[i : i + per_item].astype("<i8").tobytes() or b"-",
            })
            for i in range(0, max(len(keys), 1), per_item)
        ]  # fmt: skip

    def _item_writes(self, job: str, p: int, key: int, entries: list[_Entry], old: _Item) -> list:
        """Put requests for the key item with `entries` (moving values out to chunk items
        if the item would be too big), its new index items and graveyard item."""
        pk = self._kpk(job, p, key)
        out = []
        inline = sum(len(e.value or b"") for e in entries)
        for e in entries:  # oldest values go out first; the newest stays if it fits
            if inline <= INLINE_LIMIT:
                break
            if e.value is not None and (e is not entries[-1] or len(e.value) > INLINE_LIMIT):
                inline -= len(e.value)
                pieces = [e.value[i : i + CHUNK_BYTES] for i in range(0, len(e.value), CHUNK_BYTES)]
                e.chunks, e.value = len(pieces), None
                out += [
                    self._put({"pk": pk, "sk": sk, "d": piece})
                    for sk, piece in zip(e.chunk_sks(), pieces, strict=True)
                ]
        out.append(self._key_item(pk, entries))
        have = old.expiries()
        for e in entries:
            if not e.removed and e.expiry not in have:
                have.add(e.expiry)
                out.append(self._put({"pk": self._xpk(job, p, key),
                                      "sk": f"{_e20(e.expiry)}#{key}"}))  # fmt: skip
        if entries[-1].removed:
            out.append(self._put({"pk": self._gpk(job, p),
                                  "sk": f"{_v(entries[-1].version)}#{key}"}))  # fmt: skip
        return out

    def _key_item(self, pk: str, entries: list[_Entry]) -> dict:
        h = ";".join(f"{e.version}.{e.token}.{e.expiry}.{e.length}.{e.chunks}" for e in entries)
        b = b"".join(e.value for e in entries if e.value is not None) or b"-"
        item = {"pk": {"S": pk}, "sk": {"S": "k"}, "h": {"S": h}, "b": {"B": b}}
        return {"PutRequest": {"Item": item}}

    def _unneeded(self, job: str, p: int, old: _Item, entries: list[_Entry]) -> list:
        """(pk, sk) of the chunk and index items of `old` that `entries` no longer use."""
        key = old.key
        pk = self._kpk(job, p, key)
        kept = {(e.version, e.token) for e in entries}
        out = [(pk, sk) for e in old.entries if (e.version, e.token) not in kept
               for sk in e.chunk_sks()]  # fmt: skip
        expiries = {e.expiry for e in entries if not e.removed}
        out += [(self._xpk(job, p, key), f"{_e20(x)}#{key}") for x in old.expiries() - expiries]
        return out

    @staticmethod
    def _put(attributes: dict) -> dict:
        item = {}
        for name, value in attributes.items():
            if isinstance(value, bytes):
                item[name] = {"B": value}
            elif isinstance(value, int):
                item[name] = {"N": str(value)}
            else:
                item[name] = {"S": value}
        return {"PutRequest": {"Item": item}}

    def _drop_items(self, job: str, p: int, metrics: StateMetrics | None) -> None:
        """Delete every key, chunk, index, graveyard and intent item of the partition (found
        through the index, graveyard and intents): for a partition that starts over."""
        what = f"clearing {job}/{p}"
        pks = [f"{job}#{p}#x{s}" for s in range(INDEX_SHARDS)] + [self._gpk(job, p)]
        small = [(pk, i["sk"]["S"]) for pk in pks
                 for i in self._query(pk, metrics, what, projection="pk, sk")]  # fmt: skip
        intents = self._query(self._ppk(job, p), metrics, what, prefix="i")
        keys = {int(sk.split("#")[1]) for _, sk in small}
        for i in intents:
            keys.update(np.frombuffer(_ks(i), dtype="<i8").tolist())
        items = self._get_items([(self._kpk(job, p, k), "k") for k in keys], metrics, what)
        deletes = [_delete(pk, sk) for pk, sk in small]
        for (pk, _), raw in items.items():
            deletes.append(_delete(pk, "k"))
            deletes += [
                _delete(pk, sk) for e in _parse_item(0, raw).entries for sk in e.chunk_sks()
            ]
        self._write(deletes, metrics, what)
        self._write([_delete(i["pk"]["S"], i["sk"]["S"]) for i in intents], metrics, what)

    def _truncate_partition(self, job: str, partition: int, after: int) -> None:
        what = f"truncating {job}/{partition} after version {after}"
        records = self._records(job, partition, None)
        for v in sorted((v for v in records if v > after), reverse=True):
            self._delete_one(self._ppk(job, partition), f"v{_v(v)}", what)
        if not any(v <= after for v in records):
            self._drop_items(job, partition, None)
            self._delete_one(job, f"p{partition_sk(partition)}", what)

    def _maintain(self, job: str, partition: int, keep_from: int) -> None:
        what = f"maintenance of {job}/{partition}"
        ppk = self._ppk(job, partition)
        records = self._records(job, partition, None)
        # 1. attempts of versions before keep_from: a committed one's intent just goes; a
        #    failed or superseded one's entries are removed first, since they would count
        #    once their version is older than the oldest record
        intents = self._query(ppk, None, what, below=f"i{_v(keep_from)}", prefix="i")
        failed: dict[tuple[int, str], list[int]] = {}
        for i in intents:
            version, token, _ = i["sk"]["S"][1:].split(".")
            rec = records.get(int(version))
            if rec is None or rec["tok"]["S"] != token:
                keys = np.frombuffer(_ks(i), dtype="<i8").tolist()
                failed.setdefault((int(version), token), []).extend(keys)
        if failed:
            self._repair(job, partition, failed)
        self._write([_delete(ppk, i["sk"]["S"]) for i in intents], None, what)
        # 2. the records of the versions no longer retained
        old = [v for v in records if v < keep_from]
        self._write([_delete(ppk, f"v{_v(v)}") for v in old], None, what)
        for v in old:
            del records[v]
        # 3. keys removed at or before keep_from go if no retained version sees them
        gpk = self._gpk(job, partition)
        graves = self._query(gpk, None, what, below=f"{_v(keep_from + 1)}", projection="pk, sk")
        if not graves or not records:
            return
        line = _line(records, max(records))
        keys = {int(g["sk"]["S"].split("#")[1]) for g in graves}
        raw = self._get_items([(self._kpk(job, partition, k), "k") for k in keys], None, what)
        deletes = [_delete(gpk, g["sk"]["S"]) for g in graves]
        for k in keys:
            pk = self._kpk(job, partition, k)
            item = _parse_item(k, raw.get((pk, "k")))
            newest = item.at(max(records), line)
            if not item.entries or (newest is not None and not newest.removed):
                continue  # gone already, or alive again
            if newest is not None and newest.version > keep_from:
                continue  # removed again later; a retained version still sees the value
            deletes.append(_delete(pk, "k"))
            deletes += [_delete(*x) for x in self._unneeded(job, partition, item, [])]
        self._write(deletes, None, what)

    def _repair(self, job: str, p: int, failed: dict[tuple[int, str], list[int]]) -> None:
        """Remove the entries of failed attempts (version, token) from the items of the keys
        they touched."""
        what = f"repairing {job}/{p}"
        keys = sorted({k for ks in failed.values() for k in ks})
        raw = self._get_items([(self._kpk(job, p, k), "k") for k in keys], None, what)
        writes, stale = [], []
        for k in keys:
            pk = self._kpk(job, p, k)
            item = _parse_item(k, raw.get((pk, "k")))
            entries = [e for e in item.entries if (e.version, e.token) not in failed]
            if len(entries) == len(item.entries):
                continue
            writes.append(self._key_item(pk, entries) if entries else _delete(pk, "k"))
            stale += self._unneeded(job, p, item, entries)
        self._write(writes, None, what)
        self._write([_delete(pk, sk) for pk, sk in stale], None, what)

    # ----- job records ------------------------------------------------------------------

    def write_job_record(self, job: str, version: int, record: dict) -> None:
        check_job(job)
        check_version(version)
        try:
            body = json.dumps(record, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise StateError(f"job record of {job} version {version} is not JSON-able: {e}") from e
        self._ensure_table()
        item = self._put({"pk": job, "sk": f"r{_v(version)}", "rec": body})["PutRequest"]["Item"]
        self._call(f"writing job record {job}/{version}",
                   lambda c: c.put_item(TableName=self.table, Item=item))  # fmt: skip

    def read_job_record(self, job: str, version: int) -> dict | None:
        check_job(job)
        check_version(version)
        got = self._get_items([(job, f"r{_v(version)}")], None, f"reading job record {job}")
        item = got.get((job, f"r{_v(version)}"))
        return None if item is None else json.loads(item["rec"]["S"])

    def job_versions(self, job: str) -> list[int]:
        check_job(job)
        items = self._query(job, None, f"listing job records of {job}", prefix="r",
                            projection="pk, sk")  # fmt: skip
        return sorted(int(i["sk"]["S"][1:]) for i in items)

    def _delete_job_records(self, job: str, versions: list[int]) -> None:
        for v in sorted(versions, reverse=True):
            self._delete_one(job, f"r{_v(v)}", f"deleting job record {job}/{v}")


class DynamoDBVersion(StoredVersion):
    """A partition at a version: key items are read on demand and kept for the commit."""

    def __init__(self, backend: DynamoDBBackend, job: str, partition: int, version: int,
                 meta: dict, line: _Line):  # fmt: skip
        super().__init__(job, partition, version, meta, backend.spec)
        self._backend = backend
        self.line = line
        self.items: dict[int, _Item] = {}
        self.junk: list[tuple[str, str]] = []  # index items found pointing at nothing

    def read_rows(self, keys: pa.Int64Array) -> pa.Table:
        if self.version == EMPTY_VERSION or not len(keys):
            return self.spec.empty()
        b = self._backend
        wanted = keys.to_numpy().tolist()
        b._read_items(self, wanted)
        pairs = []
        for k in wanted:
            e = self.items[k].at(self.version, self.line)
            if e is not None and not e.removed:
                pairs.append((k, e))
        values = b._values(self, pairs)
        table = b.codec.decode(np.array([k for k, _ in pairs], dtype=np.int64), values)
        self.metrics.rows_loaded += table.num_rows
        return table

    def read_expiring(self, upto_us: int) -> pa.Int64Array:
        if self.version == EMPTY_VERSION:
            return pa.array([], pa.int64())
        b = self._backend
        job, p = self.job, self.partition
        what = f"reading expiring keys of {job}/{p}"
        shards = [f"{job}#{p}#x{s}" for s in range(INDEX_SHARDS)]
        below = _e20(upto_us)
        counters = [StateMetrics() for _ in shards]
        found = b._parallel(
            lambda i: b._query(shards[i], counters[i], what, below=below, projection="sk"),
            list(range(len(shards))),
        )
        self.metrics.round_trips += sum(c.round_trips for c in counters)
        candidates: dict[int, set[int]] = {}
        for items in found:
            for i in items:
                e20, key = i["sk"]["S"].split("#")
                candidates.setdefault(int(key), set()).add(int(e20) - _BIAS)
        b._read_items(self, candidates)
        out = []
        for k, expiries in candidates.items():
            item = self.items[k]
            e = item.at(self.version, self.line)
            if e is not None and not e.removed and e.expiry < upto_us:
                out.append(k)
            for x in expiries - item.expiries():
                self.junk.append((b._xpk(job, p, k), f"{_e20(x)}#{k}"))
        return pa.array(sorted(out), pa.int64())

    def write(self, version: int, puts: pa.Table, removes: pa.Int64Array, meta: dict) -> None:
        self._backend._commit(self, version, puts, removes, meta)

    def close(self) -> None:
        self.items = {}


# ----- helpers -----------------------------------------------------------------------------


def _line(records: dict[int, dict], upto: int) -> _Line:
    """The line seen from version `upto` (-1: nothing counts)."""
    if upto == EMPTY_VERSION or not records:
        return _NOTHING
    tokens = {v: r["tok"]["S"] for v, r in records.items() if v <= upto}
    return _Line(tokens, min(records))


def _needed(old: _Item, base: int, line: _Line) -> list[_Entry]:
    """The entries of `old` that a commit on `base` keeps: those that count at `base`, from
    the one the oldest retained version reads on (older ones no version can read), without
    leading removals."""
    kept = [e for e in old.entries if e.version <= base and line.counts(e)]
    if line.oldest is not None:
        covering = [i for i, e in enumerate(kept) if e.version <= line.oldest]
        if covering:
            kept = kept[covering[-1] :]
    while kept and kept[0].removed:
        kept.pop(0)
    return kept


def _ks(intent: dict) -> bytes:
    data = intent["ks"]["B"]
    return b"" if data == b"-" else data


def partition_sk(partition: int) -> str:
    return f"{partition:010d}"


def _code(e: botocore.exceptions.ClientError) -> str:
    return e.response.get("Error", {}).get("Code", "")


def _delete(pk: str, sk: str) -> dict:
    return {"DeleteRequest": {"Key": {"pk": {"S": pk}, "sk": {"S": sk}}}}


def _backoff(attempt: int) -> None:
    time.sleep(min(1.0, 0.02 * 2**attempt) * (0.5 + random.random() / 2))


def _missing(job: str, partition: int, version: int, have: list[int]) -> str:
    span = f"restorable: {have[0]}..{have[-1]}" if have else "no version is committed"
    return (
        f"version {version} of state {job}/partition={partition} is not committed"
        f" or no longer retained ({span})"
    )
