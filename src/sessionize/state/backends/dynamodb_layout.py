"""The `dynamodb` store's items: their keys, attributes and encoding.

One table, `<TABLE_PREFIX>_state`, with string keys `pk` (hash) and `sk` (range), and a
global secondary index `expiry` (hash `xs`, range `xe`, keys only) over the key items. For
partition p of job J (versions and expiries are text of 20 digits, so that text order is
number order)::

    pk = J#p#KEY   sk = k                 key item: the key's recent values
        h  S  its entries, oldest first, ";"-separated, each
              "version.token.expiry.length.chunks" (expiry: the value's earliest expiry in
              microseconds; length -1: removed at that version; chunks 0: inline)
        b  B  the inline values (`keyblobs`) end to end, in the order of h ("-" if none;
              one binary attribute: botocore's cost is per attribute value, not per byte)
        xs S  "J#p#xS", S = KEY % INDEX_SHARDS: the key's shard of the expiry index
        xe S  the lowest expiry of the entries it holds (EXPIRY biased by 2**63), so at
              most the key's expiry at every version it holds; xs and xe are left out
              when no entry holds a value (the index then skips the item)
    pk = J#p#KEY   sk = vVERSIONTOKEN.i   chunk item i of a value too big to stay inline
        d  B  the i-th CHUNK_BYTES of the value
    pk = J#p       sk = vVERSION          version record: the version is committed
        tok S the commit's token   meta S the committed meta JSON   keys N, bytes N the
        size of the state   at S when it was written (UTC, for people)
    pk = J#p       sk = iVERSION.TOKEN.n  intent item n of a commit attempt, written before
                                          it touches any key item
        ks B  the keys it may touch, int64 little-endian ("-" if none)
    pk = J#p       sk = cVERSION.TOKEN.n  change item n of a commit attempt (only if it
                                          lowered or removed a key), written with its keys
        lo B  (key, xe) int64 pairs, by xe: keys whose xe went down (or appeared)
        xm N  the lowest xe in lo (only if lo holds any)
        rm B  keys removed at the version, for maintenance
    pk = J         sk = pPARTITION        partition record (PARTITION: 10 digits); no
                                          attributes
    pk = J         sk = rVERSION          job record (the driver's commit log)
        rec S the job record's JSON
    pk = J         sk = s                 the job's settings (the job records do not repeat
                                          them)
        js S  their JSON

An entry counts at version V iff its version <= V and its token is the one in the current
record of its version (`History`); a key's value at V is its newest entry that counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sessionize.state.rows import EMPTY_VERSION

INDEX = "expiry"  # the global secondary index over xs, xe
INDEX_SHARDS = 4  # part of the layout: changing it hides existing keys from the index
# (key, xe) pairs and removed keys per change item: small enough that `expiring` fetches
# only the items holding a key that can expire (by their lowest xe)
CHANGES_PER_ITEM = 2_000
INLINE_LIMIT = 300_000  # bytes of values kept inline in a key item (items max 400 KB)
CHUNK_BYTES = 350_000
KEY_ITEM = "k"  # the sk of a key item
# The first letter of the sk of the other items (above), by which they are queried.
VERSION_ITEM, INTENT_ITEM, CHANGE_ITEM, PARTITION_ITEM, JOB_RECORD_ITEM = "v", "i", "c", "p", "r"
_EXPIRY_BIAS = 2**63


# ----- names --------------------------------------------------------------------------------


def version_text(version: int) -> str:
    return f"{version:020d}"


def expiry_text(us: int) -> str:
    """The expiry `us` as 20 digits whose text order is time order."""
    return f"{us + _EXPIRY_BIAS:020d}"


def partition_pk(job: str, partition: int) -> str:
    """pk of the version records and intents of a partition."""
    return f"{job}#{partition}"


def key_pk(job: str, partition: int, key: int) -> str:
    """pk of the key item and chunk items of a key."""
    return f"{partition_pk(job, partition)}#{key}"


def index_shard_pk(job: str, partition: int, shard: int) -> str:
    """The value of xs of the key items in index shard `shard`."""
    return f"{partition_pk(job, partition)}#x{shard}"


def key_in_pk(pk: str) -> int:
    """The key of a key item's pk."""
    return int(pk.rsplit("#", 1)[1])


def version_sk(kind: str, version: int, *attempt: str | int) -> str:
    """The sk of `version`'s record (VERSION_ITEM) or job record (JOB_RECORD_ITEM), or, with
    `attempt` = (token, n), of item n of an attempt's intents (INTENT_ITEM) or changes
    (CHANGE_ITEM)."""
    return ".".join([kind + version_text(version), *map(str, attempt)])


def partition_sk(partition: int) -> str:
    return f"{PARTITION_ITEM}{partition:010d}"


JOB_SETTINGS_SK = "s"  # the sk of the job's settings


# ----- key items ------------------------------------------------------------------------------


@dataclass
class Entry:
    """One value of a key, as listed in its key item."""

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
        first = version_sk(VERSION_ITEM, self.version) + self.token
        return [f"{first}.{i}" for i in range(self.chunks)]


@dataclass(frozen=True)
class History:
    """The committed history a reader or writer sees: the tokens of the committed versions
    it may use, and the oldest committed version of the partition.

    An entry counts iff its version is below `oldest` (every entry left there was committed:
    maintenance repairs failed attempts before it drops their versions' records), or its
    token is the one in the record of its version."""

    tokens: dict[int, str]
    oldest: int | None

    def counts(self, e: Entry) -> bool:
        if self.oldest is None:
            return False
        return e.version < self.oldest or self.tokens.get(e.version) == e.token


NO_HISTORY = History({}, None)


def history(records: dict[int, dict[str, Any]], upto: int) -> History:
    """The history seen from version `upto` (-1: nothing counts), given the version records
    (version -> item)."""
    if upto == EMPTY_VERSION or not records:
        return NO_HISTORY
    tokens = {v: r["tok"]["S"] for v, r in records.items() if v <= upto}
    return History(tokens, min(records))


@dataclass
class KeyItem:
    """A key item as read, entries oldest first (none for a missing item)."""

    key: int
    entries: list[Entry] = field(default_factory=list)

    def at(self, version: int, seen: History) -> Entry | None:
        """The entry that gives the key's value at `version`, if any counts."""
        found = None
        for e in self.entries:
            if e.version <= version and seen.counts(e):
                found = e
        return found

    def lowest_expiry(self) -> int | None:
        """Its xe: the lowest expiry of the values it holds (None: it holds none)."""
        return lowest_expiry(self.entries)


def lowest_expiry(entries: list[Entry]) -> int | None:
    return min((e.expiry for e in entries if not e.removed), default=None)


def parse_key_item(key: int, raw: dict[str, Any] | None) -> KeyItem:
    item = KeyItem(key)
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
        item.entries.append(Entry(int(version), token, int(expiry), size, n, value))
    return item


def needed_entries(old: KeyItem, base: int, seen: History) -> list[Entry]:
    """The entries of `old` that a commit on `base` keeps: those that count at `base`, from
    the one the oldest retained version reads on (older ones no version can read), without
    leading removals."""
    kept = [e for e in old.entries if e.version <= base and seen.counts(e)]
    if seen.oldest is not None:
        covering = [i for i, e in enumerate(kept) if e.version <= seen.oldest]
        if covering:
            kept = kept[covering[-1] :]
    while kept and kept[0].removed:
        kept.pop(0)
    return kept


# ----- write requests ---------------------------------------------------------------------------


def put_request(attributes: dict[str, Any]) -> dict[str, Any]:
    """A PutRequest of an item given as {name: bytes | int | str}."""
    item: dict[str, dict[str, Any]] = {}
    for name, value in attributes.items():
        if isinstance(value, bytes):
            item[name] = {"B": value}
        elif isinstance(value, int):
            item[name] = {"N": str(value)}
        else:
            item[name] = {"S": value}
    return {"PutRequest": {"Item": item}}


def delete_request(pk: str, sk: str) -> dict[str, Any]:
    return {"DeleteRequest": {"Key": {"pk": {"S": pk}, "sk": {"S": sk}}}}


def key_item_request(job: str, partition: int, key: int, entries: list[Entry]) -> dict[str, Any]:
    """The put of a key item holding `entries`, with its expiry index attributes."""
    listing = ";".join(f"{e.version}.{e.token}.{e.expiry}.{e.length}.{e.chunks}" for e in entries)
    inline = b"".join(e.value for e in entries if e.value is not None) or b"-"
    item = {
        "pk": {"S": key_pk(job, partition, key)},
        "sk": {"S": KEY_ITEM},
        "h": {"S": listing},
        "b": {"B": inline},
    }
    lowest = lowest_expiry(entries)
    if lowest is not None:
        item["xs"] = {"S": index_shard_pk(job, partition, key % INDEX_SHARDS)}
        item["xe"] = {"S": expiry_text(lowest)}
    return {"PutRequest": {"Item": item}}


def key_writes(job: str, partition: int, key: int, entries: list[Entry]) -> list[dict[str, Any]]:
    """Put requests for the key item with `entries`, moving values out to chunk items if
    the item would be too big."""
    pk = key_pk(job, partition, key)
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
                put_request({"pk": pk, "sk": sk, "d": piece})
                for sk, piece in zip(e.chunk_sks(), pieces, strict=True)
            ]
    out.append(key_item_request(job, partition, key, entries))
    return out


def unneeded(job: str, partition: int, old: KeyItem, entries: list[Entry]) -> list[tuple[str, str]]:
    """(pk, sk) of the chunk items of `old` that `entries` no longer use."""
    pk = key_pk(job, partition, old.key)
    kept = {(e.version, e.token) for e in entries}
    return [
        (pk, sk) for e in old.entries if (e.version, e.token) not in kept for sk in e.chunk_sks()
    ]


def lowers(old: KeyItem, entries: list[Entry], seen: History) -> bool:
    """Whether the index may show the key above its new xe: its xe goes down (or appears),
    or the old item holds entries that do not count (those of an attempt that never
    published may have lowered xe unlisted)."""
    new = lowest_expiry(entries)
    if new is None:
        return False
    before = old.lowest_expiry()
    return before is None or new < before or not all(seen.counts(e) for e in old.entries)


def change_requests(
    job: str,
    partition: int,
    version: int,
    token: str,
    lowered: list[tuple[int, int]],
    removed: list[int],
) -> list[dict[str, Any]]:
    """The change items of an attempt: (key, new xe) of the keys it lowered, by xe, with the
    lowest xe of the item as xm (N, if it holds any); keys it removed."""
    pairs = np.array(sorted(lowered, key=lambda p: p[1]), dtype="<i8").reshape(-1, 2)
    gone = np.array(removed, dtype="<i8")
    n, out = CHANGES_PER_ITEM, []
    for i in range(0, max(len(lowered), len(removed)), n):
        item: dict[str, Any] = {
            "pk": partition_pk(job, partition),
            "sk": version_sk(CHANGE_ITEM, version, token, i // n),
            "lo": pairs[i : i + n].tobytes() or b"-",
            "rm": gone[i : i + n].tobytes() or b"-",
        }
        if len(pairs[i : i + n]):
            item["xm"] = int(pairs[i, 1])
        out.append(put_request(item))
    return out


def parse_change(item: dict[str, Any]) -> tuple[int, str, dict[int, int], list[int]]:
    """(version, token, {key: xe} lowered, keys removed) of a change item."""
    version, token, _ = item["sk"]["S"][1:].split(".")
    lo, rm = (item.get(a, {}).get("B", b"-") for a in ("lo", "rm"))
    pairs = np.frombuffer(b"" if lo == b"-" else lo, dtype="<i8").reshape(-1, 2).tolist()
    gone = np.frombuffer(b"" if rm == b"-" else rm, dtype="<i8").tolist()
    return int(version), token, {k: x for k, x in pairs}, gone


def intent_requests(
    job: str, partition: int, version: int, token: str, keys: np.ndarray
) -> list[dict[str, Any]]:
    """The intent items of an attempt that may touch `keys`."""
    per_item = CHUNK_BYTES // 8
    return [
        put_request(
            {
                "pk": partition_pk(job, partition),
                "sk": version_sk(INTENT_ITEM, version, token, i // per_item),
                "ks": keys[i : i + per_item].astype("<i8").tobytes() or b"-",
            }
        )
        for i in range(0, max(len(keys), 1), per_item)
    ]


def intent_keys(intent: dict[str, Any]) -> list[int]:
    """The keys an intent item lists."""
    data = intent["ks"]["B"]
    keys: list[int] = np.frombuffer(b"" if data == b"-" else data, dtype="<i8").tolist()
    return keys
