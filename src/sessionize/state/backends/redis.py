"""The `redis` state store: the current state of a partition in a hash, an expiry index in a
sorted set, and one undo hash per version, changed by server-side scripts.

URI: `redis://[[USER]:PASSWORD@]HOST[:PORT]/DB` or `rediss://...` (TLS). Options:
`prefix` (of every Redis key, default `sessionize`), `socket_timeout` (seconds, default 60),
`connect_timeout` (seconds, default 5).

Keys of partition p of job J, all with the hash tag `{J/p}` (one cluster slot)::

    PREFIX:{J/p}:head        hash  key -> value at the newest version
    PREFIX:{J/p}:exp         zset  expiry index: members e8 + key, all scores 0, so that
                                   ZRANGEBYLEX - (e8(t) lists the keys expiring before t
    PREFIX:{J/p}:versions    zset  committed versions (score = member = version)
    PREFIX:{J/p}:info        hash  m:V -> meta JSON, k:V -> keys, b:V -> bytes of version V
    PREFIX:{J/p}:undo:V      hash  key -> its value before V ("" = it did not exist)
    PREFIX:{J/p}:stage:TOKEN hash  a commit's new values ("" = removed), before it is applied
    PREFIX:{J}:parts         set   partitions of J
    PREFIX:{J}:records       hash  version -> job record JSON

A value is e8 (the key's earliest expiry as 8 big-endian bytes, biased so that byte order is
time order) followed by the key's rows (`keyblobs`). Keys are decimal strings.

Commit of V on the loaded version P: one pipeline (one round trip) stages the new values
in a fresh hash, then a Lua script applies them atomically (Redis runs a script alone and
writes its effects to the append-only file as one transaction): it checks that P is still
committed, rolls back versions after P with their undo hashes (a re-executed batch, or
reprocessing), saves the current value of every changed key in undo:V, applies the new
values to head and exp, and records V. A batch that dies before the script leaves only an
invisible staging hash (it expires after a day).

Reading version V (any committed one): at the newest version, HMGET on head; at an older
one, a key's value is the one saved by the first version after V that changed it, else
head's. Expiry at V reads the index range, corrected by the undo hashes after V. Both run
as scripts, in one pipeline of 4,000 keys per call. Maintenance deletes the undo hashes of
versions up to the oldest retained one.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from urllib.parse import parse_qsl, urlencode, urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from sessionize.config import redact_uri
from sessionize.errors import ConfigError, StateError
from sessionize.state.backends.keyblobs import RowCodec, split_prefix
from sessionize.state.base import (
    EMPTY_VERSION,
    RowSpec,
    StateBackend,
    StoredVersion,
    check_job,
    check_partition,
    check_version,
)

KEYS_PER_CALL = 4_000
PAIRS_PER_HSET = 2_000
STAGE_TTL_S = 86_400
_BIAS = np.uint64(2**63)
_PREFIX = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
_DEFAULTS = {"prefix": "sessionize", "socket_timeout": 60.0, "connect_timeout": 5.0}

# Lua helpers shared by the scripts. KEYS: head, exp, versions, info. ARGV[1]: the prefix of
# the undo hashes. Byte strings are compared with string.byte (Redis sets LC_COLLATE, so
# '<' on strings would follow the locale).
_LUA_COMMON = r"""
local head, exp, vers, info = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local undo = ARGV[1]

local function before(a, b)  -- a < b, first 8 bytes, unsigned
  for i = 1, 8 do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end

local function index_member(value, key) return string.sub(value, 1, 8) .. key end

local function committed(v) return redis.call('ZSCORE', vers, v) end

local function forget_version(v)
  redis.call('DEL', undo .. v)
  redis.call('ZREM', vers, v)
  redis.call('HDEL', info, 'm:' .. v, 'k:' .. v, 'b:' .. v)
end

-- Undo every version after `to` (>= the oldest retained one), newest first.
local function roll_back(to)
  local later = redis.call('ZRANGEBYSCORE', vers, '(' .. to, '+inf')
  for i = #later, 1, -1 do
    local saved = redis.call('HGETALL', undo .. later[i])
    for j = 1, #saved, 2 do
      local key, old = saved[j], saved[j + 1]
      local cur = redis.call('HGET', head, key)
      if cur then redis.call('ZREM', exp, index_member(cur, key)) end
      if old == '' then
        redis.call('HDEL', head, key)
      else
        redis.call('HSET', head, key, old)
        redis.call('ZADD', exp, 0, index_member(old, key))
      end
    end
    forget_version(later[i])
  end
end

local function drop_all()
  local all = redis.call('ZRANGE', vers, 0, -1)
  for i = 1, #all do redis.call('DEL', undo .. all[i]) end
  redis.call('DEL', head, exp, vers, info)
end

-- The versions after v, ascending (v committed).
local function after(v) return redis.call('ZRANGEBYSCORE', vers, '(' .. v, '+inf') end

local function is_head(v)
  local newest = redis.call('ZREVRANGE', vers, 0, 0)
  return newest[1] == v
end
"""

# KEYS: head, exp, versions, info, stage. ARGV: undo prefix, base, version, meta.
_COMMIT = (
    _LUA_COMMON
    + r"""
local stage, base, version = KEYS[5], ARGV[2], ARGV[3]
local keys, bytes = 0, 0
if base == '-1' then
  drop_all()
else
  if not committed(base) then return redis.error_reply('sessionize: base version gone') end
  roll_back(base)
  keys = tonumber(redis.call('HGET', info, 'k:' .. base) or '0')
  bytes = tonumber(redis.call('HGET', info, 'b:' .. base) or '0')
end
local saved = undo .. version
redis.call('DEL', saved)
local staged = redis.call('HGETALL', stage)
local n = #staged / 2
-- In slices of 1000 keys: one HMGET, then one HSET/ZREM/ZADD/HDEL per slice, not per key.
for lo = 1, n, 1000 do
  local hi = math.min(n, lo + 999)
  local names = {}
  for i = lo, hi do names[#names + 1] = staged[2 * i - 1] end
  local olds = redis.call('HMGET', head, unpack(names))
  local undo_args, unindex, set_args, index_args, gone = {}, {}, {}, {}, {}
  for j = 1, #names do
    local key, new, old = names[j], staged[2 * (lo + j - 1)], olds[j]
    if old then
      undo_args[#undo_args + 1] = key
      undo_args[#undo_args + 1] = old
      unindex[#unindex + 1] = index_member(old, key)
      keys = keys - 1
      bytes = bytes - (#old - 8)
    elseif new ~= '' then
      undo_args[#undo_args + 1] = key
      undo_args[#undo_args + 1] = ''
    end
    if new ~= '' then
      set_args[#set_args + 1] = key
      set_args[#set_args + 1] = new
      index_args[#index_args + 1] = 0
      index_args[#index_args + 1] = index_member(new, key)
      keys = keys + 1
      bytes = bytes + (#new - 8)
    elseif old then
      gone[#gone + 1] = key
    end
  end
  if #undo_args > 0 then redis.call('HSET', saved, unpack(undo_args)) end
  if #unindex > 0 then redis.call('ZREM', exp, unpack(unindex)) end
  if #set_args > 0 then redis.call('HSET', head, unpack(set_args)) end
  if #index_args > 0 then redis.call('ZADD', exp, unpack(index_args)) end
  if #gone > 0 then redis.call('HDEL', head, unpack(gone)) end
end
redis.call('DEL', stage)
redis.call('ZADD', vers, version, version)
redis.call('HSET', info, 'm:' .. version, ARGV[4], 'k:' .. version, keys, 'b:' .. version, bytes)
return {keys, bytes}
"""
)

# KEYS: head, exp, versions, info. ARGV: undo prefix, version, key...
_READ = (
    _LUA_COMMON
    + r"""
local v = ARGV[2]
if not committed(v) then return redis.error_reply('sessionize: version gone') end
local out = {}
if is_head(v) then
  return redis.call('HMGET', head, unpack(ARGV, 3))
end
local later = after(v)
for i = 3, #ARGV do
  local key, value = ARGV[i], nil
  for j = 1, #later do
    local old = redis.call('HGET', undo .. later[j], key)
    if old then value = old; break end
  end
  if value == nil then value = redis.call('HGET', head, key) end
  if value == '' then value = false end
  out[i - 2] = value
end
return out
"""
)

# KEYS: head, exp, versions, info. ARGV: undo prefix, version, e8(upto).
_EXPIRING = (
    _LUA_COMMON
    + r"""
local v, upto = ARGV[2], ARGV[3]
if not committed(v) then return redis.error_reply('sessionize: version gone') end
local found = redis.call('ZRANGEBYLEX', exp, '-', '(' .. upto)
if is_head(v) then return found end
local at_v = {}  -- key -> its value at v, for the keys changed after v
local later = after(v)
for j = 1, #later do
  local saved = redis.call('HGETALL', undo .. later[j])
  for i = 1, #saved, 2 do
    if at_v[saved[i]] == nil then at_v[saved[i]] = saved[i + 1] end
  end
end
local out = {}
for i = 1, #found do
  if at_v[string.sub(found[i], 9)] == nil then out[#out + 1] = found[i] end
end
for key, value in pairs(at_v) do
  if value ~= '' and before(value, upto) then out[#out + 1] = index_member(value, key) end
end
return out
"""
)

# KEYS: head, exp, versions, info. ARGV: undo prefix, after.
_TRUNCATE = (
    _LUA_COMMON
    + r"""
local to = tonumber(ARGV[2])
local oldest = redis.call('ZRANGE', vers, 0, 0)
if to < 0 or (oldest[1] and to < tonumber(oldest[1])) then
  drop_all()
else
  roll_back(ARGV[2])
end
return redis.call('ZCARD', vers)
"""
)

# KEYS: head, exp, versions, info. ARGV: undo prefix, keep_from.
_MAINTAIN = (
    _LUA_COMMON
    + r"""
local keep_from = tonumber(ARGV[2])
local old = redis.call('ZRANGEBYSCORE', vers, '-inf', keep_from)
for i = 1, #old do
  redis.call('DEL', undo .. old[i])
  if tonumber(old[i]) < keep_from then forget_version(old[i]) end
end
return #old
"""
)


class _Script:
    def __init__(self, source: str):
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()


class _BaseGone(StateError):
    """The version a commit was built on is no longer committed."""


_SCRIPTS = {
    name: _Script(src)
    for name, src in [("commit", _COMMIT), ("read", _READ), ("expiring", _EXPIRING),
                      ("truncate", _TRUNCATE), ("maintain", _MAINTAIN)]
}  # fmt: skip


class RedisBackend(StateBackend):
    scheme = "redis"

    def __init__(self, uri: str, *, spec: RowSpec | None = None):
        super().__init__(spec)
        self._parse(uri)
        self.codec = RowCodec(self.spec)
        self._client: redis.Redis | None = None

    # ----- configuration ----------------------------------------------------------------

    def _parse(self, uri: str) -> None:
        try:
            parts = urlsplit(uri)
            parts.port  # noqa: B018 - validates the port
        except ValueError as e:
            raise ConfigError(f"state store URI {redact_uri(uri)!r} is not valid: {e}") from None
        if parts.scheme.lower() not in ("redis", "rediss") or not parts.hostname:
            raise ConfigError(f"not a Redis URI: {redact_uri(uri)!r} (redis://HOST:PORT/DB)")
        db = parts.path.strip("/") or "0"
        if not db.isdigit():
            raise ConfigError(f"Redis database {db!r} in {redact_uri(uri)!r} is not a number")
        options: dict = dict(_DEFAULTS)
        query = parts.query
        for name, value in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
            if name not in _DEFAULTS:
                raise ConfigError(
                    f"unknown option '{name}' in state store URI {redact_uri(uri)!r};"
                    f" known: {', '.join(_DEFAULTS)}"
                )
            try:
                options[name] = type(_DEFAULTS[name])(value)
            except ValueError:
                raise ConfigError(
                    f"option {name}={value!r} in {redact_uri(uri)!r} is not valid"
                ) from None
        if not _PREFIX.match(options["prefix"]):
            raise ConfigError(f"prefix={options['prefix']!r}: use letters, digits and _ . : -")
        self.prefix = options["prefix"]
        self.socket_timeout = options["socket_timeout"]
        self.connect_timeout = options["connect_timeout"]
        self._password = parts.password
        self._base = f"{parts.scheme.lower()}://{parts.netloc}/{db}"

    @property
    def uri(self) -> str:
        options = {
            name: getattr(self, name) for name, default in _DEFAULTS.items()
            if getattr(self, name) != default
        }  # fmt: skip
        return self._base + (f"?{urlencode(options)}" if options else "")

    @classmethod
    def from_uri(cls, uri: str, spec: RowSpec | None = None) -> RedisBackend:
        return cls(uri, spec=spec)

    def check(self) -> None:
        self._call("connect", lambda r: r.ping())

    # ----- client, keys and errors ------------------------------------------------------

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis.from_url(
                self._base,
                socket_timeout=self.socket_timeout,
                socket_connect_timeout=self.connect_timeout,
                retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
                health_check_interval=30,
            )
        return self._client

    def _call(self, what: str, work):
        try:
            return work(self.client)
        except redis.ResponseError as e:
            if "sessionize: base version gone" in str(e):
                raise _BaseGone(str(e)) from None
            if "sessionize: version gone" in str(e):
                raise StateError(
                    f"Redis state store {self.redacted_uri}: {what} failed: the version is no"
                    " longer committed (truncated or re-committed meanwhile)"
                ) from None
            raise self._error(what, e) from None
        except redis.RedisError as e:
            raise self._error(what, e) from None

    def _error(self, what: str, e: BaseException) -> StateError:
        text = " ".join(str(e).split()) or type(e).__name__
        if self._password:
            text = text.replace(self._password, "***")
        return StateError(f"Redis state store {self.redacted_uri}: {what} failed: {text}")

    def _eval(self, pipe, name: str, keys: list[str], args: list) -> None:
        pipe.execute_command("EVALSHA", _SCRIPTS[name].sha, len(keys), *keys, *args)

    def _execute(self, what: str, build) -> list:
        """Run the commands `build(pipe)` adds, as one pipeline (one round trip); load the
        scripts and run it again if the server did not know them (after a restart)."""

        def run(r: redis.Redis) -> list:
            for attempt in (1, 2):
                pipe = r.pipeline(transaction=False)
                build(pipe)
                results = pipe.execute(raise_on_error=False)
                missing = [x for x in results if isinstance(x, redis.exceptions.NoScriptError)]
                if missing and attempt == 1:
                    for script in _SCRIPTS.values():
                        r.script_load(script.source)
                    continue
                for x in results:
                    if isinstance(x, Exception):
                        raise x
                return results
            raise AssertionError("unreachable")

        return self._call(what, run)

    def _tag(self, job: str, partition: int) -> str:
        return f"{self.prefix}:{{{job}/{partition}}}"

    def _pkeys(self, job: str, partition: int) -> list[str]:
        t = self._tag(job, partition)
        return [f"{t}:head", f"{t}:exp", f"{t}:versions", f"{t}:info"]

    def _undo(self, job: str, partition: int) -> str:
        return f"{self._tag(job, partition)}:undo:"

    def _job_key(self, job: str, what: str) -> str:
        return f"{self.prefix}:{{{job}}}:{what}"

    # ----- partitions -------------------------------------------------------------------

    def versions(self, job: str, partition: int) -> list[int]:
        check_job(job)
        check_partition(partition)
        key = self._pkeys(job, partition)[2]
        got = self._call("listing versions", lambda r: r.zrange(key, 0, -1))
        return sorted(int(v) for v in got)

    def partitions(self, job: str) -> list[int]:
        check_job(job)
        parts = sorted(
            int(p) for p in self._call("listing partitions",
                                       lambda r: r.smembers(self._job_key(job, "parts")))
        )  # fmt: skip
        if not parts:
            return []
        counts = self._execute(
            "listing partitions",
            lambda pipe: [pipe.zcard(self._pkeys(job, p)[2]) for p in parts],
        )
        return [p for p, n in zip(parts, counts, strict=True) if n]

    def _open_version(self, job: str, partition: int, version: int) -> RedisVersion:
        if version == EMPTY_VERSION:
            return RedisVersion(self, job, partition, version, {}, 0, 0)
        head, exp, vers, info = self._pkeys(job, partition)
        v = str(version)

        def build(pipe):
            pipe.zscore(vers, v)
            pipe.hmget(info, f"m:{v}", f"k:{v}", f"b:{v}")

        score, (meta, keys, nbytes) = self._execute(f"opening {job}/{partition}", build)
        if score is None or meta is None:
            raise StateError(_missing(job, partition, version, self.versions(job, partition)))
        stored = RedisVersion(
            self, job, partition, version, json.loads(meta), int(keys or 0), int(nbytes or 0)
        )
        stored.metrics.round_trips += 1
        return stored

    def _commit(
        self, stored: RedisVersion, version: int, puts: pa.Table, removes: pa.Array, meta: dict
    ) -> None:
        job, partition = stored.job, stored.partition
        encoded = self.codec.encode(puts)
        values = _prefixed(encoded.expiry, encoded.blobs)
        put_keys = _key_strings(encoded.keys)
        removed = _key_strings(removes.to_numpy(zero_copy_only=False))
        fields: list = [None] * (2 * (len(put_keys) + len(removed)))
        fields[0 : 2 * len(put_keys) : 2] = put_keys
        fields[1 : 2 * len(put_keys) : 2] = values
        fields[2 * len(put_keys) :: 2] = removed
        fields[2 * len(put_keys) + 1 :: 2] = [b""] * len(removed)
        stage = f"{self._tag(job, partition)}:stage:{uuid.uuid4().hex}"
        meta_text = json.dumps(meta, allow_nan=False)
        keys = [*self._pkeys(job, partition), stage]

        def build(pipe):
            pipe.sadd(self._job_key(job, "parts"), partition)
            for lo in range(0, len(fields), 2 * PAIRS_PER_HSET):
                pipe.execute_command("HSET", stage, *fields[lo : lo + 2 * PAIRS_PER_HSET])
            if fields:
                pipe.expire(stage, STAGE_TTL_S)
            args = [self._undo(job, partition), str(stored.version), str(version), meta_text]
            self._eval(pipe, "commit", keys, args)

        try:
            results = self._execute(f"committing version {version} of {job}/{partition}", build)
        except _BaseGone as e:
            raise StateError(
                f"cannot commit version {version} of {job}/partition={partition}: the version"
                f" it was built on, {stored.version}, is no longer committed"
                " (truncated or re-committed meanwhile)"
            ) from e
        n_keys, n_bytes = results[-1]
        m = stored.metrics
        m.round_trips += 1
        m.keys, m.bytes = int(n_keys), int(n_bytes)
        m.rows_written += puts.num_rows
        m.bytes_written += encoded.nbytes + 8 * len(put_keys) + len(meta_text)
        m.extra["keys_written"] = len(put_keys)

    def _truncate_partition(self, job: str, partition: int, after: int) -> None:
        keys = self._pkeys(job, partition)
        args = [self._undo(job, partition), str(after)]
        (left,) = self._execute(
            f"truncating {job}/{partition}", lambda p: self._eval(p, "truncate", keys, args)
        )
        if not left:
            self._call("truncating", lambda r: r.srem(self._job_key(job, "parts"), partition))

    def _maintain(self, job: str, partition: int, keep_from: int) -> None:
        keys = self._pkeys(job, partition)
        args = [self._undo(job, partition), str(keep_from)]
        self._execute(
            f"maintenance of {job}/{partition}", lambda p: self._eval(p, "maintain", keys, args)
        )

    # ----- job records ------------------------------------------------------------------

    def write_job_record(self, job: str, version: int, record: dict) -> None:
        check_job(job)
        check_version(version)
        try:
            body = json.dumps(record, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise StateError(f"job record of {job} version {version} is not JSON-able: {e}") from e
        key = self._job_key(job, "records")
        self._call(f"writing job record {job}/{version}", lambda r: r.hset(key, str(version), body))

    def read_job_record(self, job: str, version: int) -> dict | None:
        check_job(job)
        check_version(version)
        key = self._job_key(job, "records")
        got = self._call(f"reading job record {job}/{version}", lambda r: r.hget(key, str(version)))
        return None if got is None else json.loads(got)

    def job_versions(self, job: str) -> list[int]:
        check_job(job)
        key = self._job_key(job, "records")
        return sorted(int(v) for v in self._call("listing job records", lambda r: r.hkeys(key)))

    def _delete_job_records(self, job: str, versions: list[int]) -> None:
        if versions:
            key = self._job_key(job, "records")
            fields = [str(v) for v in sorted(versions, reverse=True)]
            self._call("deleting job records", lambda r: r.hdel(key, *fields))


class RedisVersion(StoredVersion):
    def __init__(self, backend: RedisBackend, job: str, partition: int, version: int,
                 meta: dict, keys: int, nbytes: int):  # fmt: skip
        super().__init__(job, partition, version, meta, backend.spec)
        self._backend = backend
        self.metrics.keys = keys
        self.metrics.bytes = nbytes

    def read_rows(self, keys: pa.Int64Array) -> pa.Table:
        if self.version == EMPTY_VERSION or not len(keys):
            return self.spec.empty()
        b = self._backend
        names = _key_strings(keys.to_numpy())
        pkeys = b._pkeys(self.job, self.partition)
        undo = b._undo(self.job, self.partition)
        v = str(self.version)

        def build(pipe):
            for lo in range(0, len(names), KEYS_PER_CALL):
                b._eval(pipe, "read", pkeys, [undo, v, *names[lo : lo + KEYS_PER_CALL]])

        results = b._execute(f"reading {len(names)} keys of {self.job}/{self.partition}", build)
        self.metrics.round_trips += 1
        values = pa.array([x for chunk in results for x in chunk], pa.binary())
        present = values.is_valid()
        found = keys.filter(present).to_numpy()
        _, blobs = split_prefix(values.filter(present), 8)
        self.metrics.bytes_read += int(pc.sum(pc.binary_length(values)).as_py() or 0)
        table = b.codec.decode(found, blobs)
        self.metrics.rows_loaded += table.num_rows
        return table

    def read_expiring(self, upto_us: int) -> pa.Int64Array:
        if self.version == EMPTY_VERSION:
            return pa.array([], pa.int64())
        b = self._backend
        pkeys = b._pkeys(self.job, self.partition)
        args = [b._undo(self.job, self.partition), str(self.version), _e8(upto_us)]
        (members,) = b._execute(
            f"reading expiring keys of {self.job}/{self.partition}",
            lambda pipe: b._eval(pipe, "expiring", pkeys, args),
        )
        self.metrics.round_trips += 1
        if not members:
            return pa.array([], pa.int64())
        _, names = split_prefix(pa.array(members, pa.binary()), 8)
        return pc.cast(names.cast(pa.string()), pa.int64())

    def write(self, version: int, puts: pa.Table, removes: pa.Int64Array, meta: dict) -> None:
        self._backend._commit(self, version, puts, removes, meta)


# ----- helpers -----------------------------------------------------------------------------


def _e8(us: int) -> bytes:
    """8 bytes whose byte order is the order of the signed microseconds `us`."""
    return ((us + 2**63) % 2**64).to_bytes(8, "big")


def _prefixed(expiry: np.ndarray, blobs: pa.ChunkedArray) -> list[bytes]:
    """e8(expiry) + blob for every key, joined by Arrow."""
    out: list[bytes] = []
    at = 0
    for chunk in blobs.chunks:
        n = len(chunk)
        e8 = (expiry[at : at + n].astype(np.uint64) + _BIAS).astype(">u8")
        offsets = np.arange(n + 1, dtype=np.int32) * 8
        heads = pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(e8.view(np.uint8))]
        )
        out += pc.binary_join_element_wise(heads, chunk, pa.scalar(b"", pa.binary())).to_pylist()
        at += n
    return out


def _key_strings(keys: np.ndarray) -> list[str]:
    return pc.cast(pa.array(np.asarray(keys, dtype=np.int64)), pa.string()).to_pylist()


def _missing(job: str, partition: int, version: int, have: list[int]) -> str:
    span = f"restorable: {have[0]}..{have[-1]}" if have else "no version is committed"
    return (
        f"version {version} of state {job}/partition={partition} is not committed"
        f" or no longer retained ({span})"
    )
