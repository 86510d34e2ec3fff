"""The `redis` state store: the current state of a partition in a hash, an expiry index in a
sorted set, and one undo hash per version, changed by server-side scripts.

URI: `redis://[[USER]:PASSWORD@]HOST[:PORT]/DB` or `rediss://...` (TLS). Options:
`prefix` (of every Redis key, default `sessionize`), `socket_timeout` (seconds, default 60),
`connect_timeout` (seconds, default 5).

Every key it writes, and what a value holds, is in `redis_layout.py`.

Commit of V on the loaded version P: one pipeline (one round trip) stages the new values
in a fresh hash, then a Lua script (`commit.lua`) applies them atomically (Redis runs a
script alone and writes its effects to the append-only file as one transaction): it checks
that P is still committed, rolls back versions after P with their undo hashes (a
re-executed batch, or reprocessing), saves the current value of every changed key in
undo:V, applies the new values to head and exp, and records V. A batch that dies before
the script leaves only an invisible staging hash (it expires after a day).

Reading version V (any committed one): at the newest version, HMGET on head; at an older
one, a key's value is the one saved by the first version after V that changed it, else
head's. Expiry at V reads the index range, corrected by the undo hashes after V. Both run
as scripts, in one pipeline of 4,000 keys per call. Maintenance deletes the undo hashes of
versions up to the oldest retained one.

The scripts live in `redis_scripts/*.lua` (package data); `common.lua` is prepended to each.
They are registered with redis-py (`register_script`) and run by EVALSHA inside our
pipelines, loaded again when the server does not know them (after a restart or a flush).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import redis
from redis.backoff import ExponentialBackoff
from redis.commands.core import Script
from redis.retry import Retry

from sessionize.errors import ConfigError, StateError
from sessionize.redaction import check_userinfo, redact_uri
from sessionize.state.backends.common import one_line, query_of, read_query, typed_options
from sessionize.state.backends.keyblobs import RowCodec, split_prefix
from sessionize.state.backends.redis_layout import (
    EXPIRY_BYTES,
    STAGE_TTL_S,
    PartitionKeys,
    expiry_bytes,
    job_key,
    key_strings,
    values_of,
)
from sessionize.state.base import StateBackend, base_gone_error, fenced_error, version_error
from sessionize.state.rows import EMPTY_VERSION, RowSpec, no_keys
from sessionize.state.stored import Meta, StoredVersion

KEYS_PER_CALL = 4_000
PAIRS_PER_HSET = 2_000
SCRIPTS = ("commit", "read", "expiring", "truncate", "maintain", "fence", "record")
_PREFIX = re.compile(r"^[A-Za-z0-9_.:-]{1,100}$")
_DEFAULTS = {"prefix": "sessionize", "socket_timeout": 60.0, "connect_timeout": 5.0}


@cache
def script_source(name: str) -> str:
    """The Lua source of script `name`: `common.lua`, then `NAME.lua`."""
    folder = resources.files(__package__) / "redis_scripts"
    return (folder / "common.lua").read_text() + (folder / f"{name}.lua").read_text()


T = TypeVar("T")


class _BaseGone(StateError):
    """The version a commit was built on is no longer committed."""


class _Fenced(StateError):
    """A newer lease epoch fenced the job (the script's reply names it)."""

    def __init__(self, reply: str):
        super().__init__(reply)
        self.fence = int(reply.rsplit(" ", 1)[-1])


class RedisBackend(StateBackend["RedisVersion"]):  # defined below
    scheme = "redis"

    def __init__(self, uri: str, *, spec: RowSpec | None = None):
        super().__init__(spec)
        self._parse(uri)
        self.codec = RowCodec(self.spec)
        self._client: redis.Redis | None = None
        self._scripts: dict[str, Script] = {}

    # ----- configuration ----------------------------------------------------------------

    def _parse(self, uri: str) -> None:
        check_userinfo(uri, "state store URI")
        try:
            parts = urlsplit(uri)
            parts.port  # noqa: B018 - validates the port
        except ValueError as e:
            raise ConfigError(
                f"state store URI {redact_uri(uri)!r} is not valid: {redact_uri(str(e))}"
            ) from None
        if parts.scheme.lower() not in ("redis", "rediss") or not parts.hostname:
            raise ConfigError(f"not a Redis URI: {redact_uri(uri)!r} (redis://HOST:PORT/DB)")
        db = parts.path.strip("/") or "0"
        if not db.isdigit():
            raise ConfigError(f"Redis database {db!r} in {redact_uri(uri)!r} is not a number")
        given, _ = read_query(parts.query, list(_DEFAULTS), redact_uri(uri))
        options = {**_DEFAULTS, **typed_options(given, _DEFAULTS, redact_uri(uri))}
        if not _PREFIX.match(options["prefix"]):
            raise ConfigError(f"prefix={options['prefix']!r}: use letters, digits and _ . : -")
        self.prefix = options["prefix"]
        self.socket_timeout = options["socket_timeout"]
        self.connect_timeout = options["connect_timeout"]
        self._password = parts.password
        self._base = f"{parts.scheme.lower()}://{parts.netloc}/{db}"

    @property
    def uri(self) -> str:
        return self._base + query_of(self, _DEFAULTS)

    @classmethod
    def from_uri(cls, uri: str, spec: RowSpec | None = None) -> RedisBackend:
        return cls(uri, spec=spec)

    def check(self) -> None:
        self._call("connect", lambda r: r.ping())

    # ----- client, keys and errors ------------------------------------------------------

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            client = redis.Redis.from_url(
                self._base,
                socket_timeout=self.socket_timeout,
                socket_connect_timeout=self.connect_timeout,
                retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
                health_check_interval=30,
            )
            # the scripts first: another thread may use the client as soon as it is set
            self._scripts = {n: client.register_script(script_source(n)) for n in SCRIPTS}
            self._client = client
        return self._client

    def _call(self, what: str, work: Callable[[redis.Redis], T]) -> T:
        try:
            return work(self.client)
        except redis.ResponseError as e:
            if "sessionize: base version gone" in str(e):
                raise _BaseGone(str(e)) from None
            if "sessionize: fenced" in str(e):
                raise _Fenced(str(e)) from None
            if "sessionize: version gone" in str(e):
                raise StateError(
                    f"Redis state store {self.redacted_uri}: {what} failed: the version is no"
                    " longer committed (truncated or re-committed meanwhile)"
                ) from None
            raise self._error(what, e) from None
        except redis.RedisError as e:
            raise self._error(what, e) from None

    def _error(self, what: str, e: BaseException) -> StateError:
        text = one_line(e, self._password)
        return StateError(f"Redis state store {self.redacted_uri}: {what} failed: {text}")

    def _eval(self, pipe: Any, name: str, keys: list[str], args: list[Any]) -> None:
        """Add script `name` to the pipeline (EVALSHA: the pipeline does not check first
        whether the server knows it, which would cost a round trip; `_execute` does)."""
        self.client  # noqa: B018 - registers the scripts with the client
        pipe.execute_command("EVALSHA", self._scripts[name].sha, len(keys), *keys, *args)

    def _execute(self, what: str, build: Callable[[Any], object]) -> list[Any]:
        """Run the commands `build(pipe)` adds, as one pipeline (one round trip); load the
        scripts and run it again if the server did not know them (after a restart)."""

        def run(r: redis.Redis) -> list[Any]:
            for attempt in (1, 2):
                pipe = r.pipeline(transaction=False)
                build(pipe)
                results = pipe.execute(raise_on_error=False)
                missing = [x for x in results if isinstance(x, redis.exceptions.NoScriptError)]
                if missing and attempt == 1:
                    for script in self._scripts.values():
                        r.script_load(script.script)
                    continue
                for x in results:
                    if isinstance(x, Exception):
                        raise x
                return results
            raise AssertionError("unreachable")

        return self._call(what, run)

    def _keys(self, job: str, partition: int) -> PartitionKeys:
        return PartitionKeys.of(self.prefix, job, partition)

    def _job_key(self, job: str, what: str) -> str:
        return job_key(self.prefix, job, what)

    # ----- partitions -------------------------------------------------------------------

    def _versions(self, job: str, partition: int) -> list[int]:
        key = self._keys(job, partition).versions
        got = self._call("listing versions", lambda r: r.zrange(key, 0, -1))
        return sorted(int(cast(bytes, v)) for v in got)

    def _partitions(self, job: str) -> list[int]:
        parts = sorted(
            int(p)
            for p in self._call(
                "listing partitions", lambda r: r.smembers(self._job_key(job, "parts"))
            )
        )
        if not parts:
            return []
        counts = self._execute(
            "listing partitions",
            lambda pipe: [pipe.zcard(self._keys(job, p).versions) for p in parts],
        )
        return [p for p, n in zip(parts, counts, strict=True) if n]

    def _open_version(self, job: str, partition: int, version: int) -> RedisVersion:
        if version == EMPTY_VERSION:
            return RedisVersion(self, job, partition, version, {}, 0, 0)
        partition_keys = self._keys(job, partition)
        versions, info = partition_keys.versions, partition_keys.info
        member = str(version)

        def build(pipe: Any) -> None:
            pipe.zscore(versions, member)
            pipe.hmget(info, f"m:{member}", f"k:{member}", f"b:{member}")

        score, (meta, keys, nbytes) = self._execute(f"opening {job}/{partition}", build)
        if score is None or meta is None:
            raise version_error(job, partition, version, have=self._versions(job, partition))
        stored = RedisVersion(
            self, job, partition, version, json.loads(meta), int(keys or 0), int(nbytes or 0)
        )
        stored.metrics.round_trips += 1
        return stored

    def _commit(
        self, stored: RedisVersion, version: int, puts: pa.Table, removes: pa.Array, meta: Meta
    ) -> None:
        job, partition = stored.job, stored.partition
        encoded = self.codec.encode(puts)
        values = values_of(encoded.expiry, encoded.blobs)
        put_keys = key_strings(encoded.keys)
        removed = key_strings(removes.to_numpy(zero_copy_only=False))
        fields: list[Any] = [None] * (2 * (len(put_keys) + len(removed)))
        fields[0 : 2 * len(put_keys) : 2] = put_keys
        fields[1 : 2 * len(put_keys) : 2] = values
        fields[2 * len(put_keys) :: 2] = removed
        fields[2 * len(put_keys) + 1 :: 2] = [b""] * len(removed)
        partition_keys = self._keys(job, partition)
        stage = partition_keys.stage(uuid.uuid4().hex)
        meta_text = json.dumps(meta, allow_nan=False)
        keys = [*partition_keys.scripts, stage]

        def build(pipe: Any) -> None:
            pipe.sadd(self._job_key(job, "parts"), partition)
            for lo in range(0, len(fields), 2 * PAIRS_PER_HSET):
                pipe.execute_command("HSET", stage, *fields[lo : lo + 2 * PAIRS_PER_HSET])
            if fields:
                pipe.expire(stage, STAGE_TTL_S)
            args = [
                partition_keys.undo,
                str(stored.version),
                str(version),
                meta_text,
                _epoch_arg(stored.epoch),
            ]
            self._eval(pipe, "commit", keys, args)

        try:
            results = self._execute(f"committing version {version} of {job}/{partition}", build)
        except _BaseGone as e:
            raise base_gone_error(job, partition, version, stored.version) from e
        except _Fenced as e:
            raise fenced_error(job, stored.epoch or 0, e.fence) from None
        n_keys, n_bytes = results[-1]
        metrics = stored.metrics
        metrics.round_trips += 1
        metrics.keys, metrics.bytes = int(n_keys), int(n_bytes)
        metrics.rows_written += puts.num_rows
        metrics.bytes_written += encoded.nbytes + EXPIRY_BYTES * len(put_keys) + len(meta_text)
        metrics.extra["keys_written"] = len(put_keys)

    def _truncate_partition(self, job: str, partition: int, after: int) -> None:
        partition_keys = self._keys(job, partition)
        keys, args = partition_keys.scripts, [partition_keys.undo, str(after)]
        (left,) = self._execute(
            f"truncating {job}/{partition}", lambda p: self._eval(p, "truncate", keys, args)
        )
        if not left:
            self._call("truncating", lambda r: r.srem(self._job_key(job, "parts"), partition))

    def _maintain(self, job: str, partition: int, keep_from: int) -> None:
        partition_keys = self._keys(job, partition)
        keys, args = partition_keys.scripts, [partition_keys.undo, str(keep_from)]
        self._execute(
            f"maintenance of {job}/{partition}", lambda p: self._eval(p, "maintain", keys, args)
        )

    # ----- job records ------------------------------------------------------------------

    def _write_job_record(self, job: str, version: int, body: str, epoch: int | None) -> None:
        self._record_unless_fenced(
            job, "records", str(version), body, epoch, f"writing job record {job}/{version}"
        )

    def _write_job_settings(self, job: str, body: str, epoch: int | None) -> None:
        self._record_unless_fenced(
            job, "job", "settings", body, epoch, f"writing the settings of job {job}"
        )

    def _record_unless_fenced(
        self, job: str, hash_name: str, field: str, body: str, epoch: int | None, what: str
    ) -> None:
        """Set `field` of the job's hash `hash_name` (the records, or `job` for the
        settings) with the job record's script, which refuses an epoch below the fence."""
        keys = [self._job_key(job, hash_name), self._job_key(job, "fence")]
        args = ["", field, body, _epoch_arg(epoch)]
        try:
            self._execute(what, lambda p: self._eval(p, "record", keys, args))
        except _Fenced as e:
            raise fenced_error(job, epoch or 0, e.fence) from None

    def _read_job_settings(self, job: str) -> bytes | None:
        key = self._job_key(job, "job")
        got = self._call(f"reading the settings of job {job}", lambda r: r.hget(key, "settings"))
        return cast(bytes | None, got)  # the client returns bytes (no decode_responses)

    # ----- the fence: a `fence` field in the job's and each partition's hash ---------------

    def _raise_fence(self, job: str, epoch: int, partitions: list[int]) -> int:
        hashes = [self._job_key(job, "fence")]
        hashes += [self._keys(job, p).info for p in partitions]

        def build(pipe: Any) -> None:
            for key in hashes:
                self._eval(pipe, "fence", [key], ["", str(epoch)])

        fences = self._execute(f"fencing {job}", build)
        return max(int(f) for f in fences)

    def _read_fence(self, job: str) -> int:
        key = self._job_key(job, "fence")
        return int(self._call(f"reading the fence of {job}", lambda r: r.hget(key, "fence")) or 0)

    def _read_job_record(self, job: str, version: int) -> bytes | None:
        key = self._job_key(job, "records")
        what = f"reading job record {job}/{version}"
        return cast(bytes | None, self._call(what, lambda r: r.hget(key, str(version))))

    def _job_versions(self, job: str) -> list[int]:
        key = self._job_key(job, "records")
        return sorted(int(v) for v in self._call("listing job records", lambda r: r.hkeys(key)))

    def _delete_job_records(self, job: str, versions: list[int]) -> None:
        if versions:
            key = self._job_key(job, "records")
            fields = [str(v) for v in sorted(versions, reverse=True)]
            self._call("deleting job records", lambda r: r.hdel(key, *fields))


def _epoch_arg(epoch: int | None) -> str:
    return "" if epoch is None else str(epoch)


class RedisVersion(StoredVersion):
    def __init__(
        self,
        backend: RedisBackend,
        job: str,
        partition: int,
        version: int,
        meta: dict[str, Any],
        keys: int,
        nbytes: int,
    ):
        super().__init__(backend, job, partition, version, meta)
        self.backend: RedisBackend = backend
        self.metrics.keys = keys
        self.metrics.bytes = nbytes

    def _read_rows(self, keys: pa.Int64Array) -> pa.Table:
        backend = self.backend
        names = key_strings(keys.to_numpy())
        partition_keys = backend._keys(self.job, self.partition)
        script_keys, args = partition_keys.scripts, [partition_keys.undo, str(self.version)]

        def build(pipe: Any) -> None:
            for lo in range(0, len(names), KEYS_PER_CALL):
                backend._eval(pipe, "read", script_keys, [*args, *names[lo : lo + KEYS_PER_CALL]])

        what = f"reading {len(names)} keys of {self.job}/{self.partition}"
        results = backend._execute(what, build)
        self.metrics.round_trips += 1
        values = pa.array([x for chunk in results for x in chunk], pa.binary())
        present = values.is_valid()
        found = keys.filter(present).to_numpy()
        _, blobs = split_prefix(values.filter(present), EXPIRY_BYTES)
        self.metrics.bytes_read += int(pc.sum(pc.binary_length(values)).as_py() or 0)
        table = backend.codec.decode(found, blobs)
        self.metrics.rows_loaded += table.num_rows
        return table

    def _read_expiring(self, upto_us: int) -> pa.Int64Array:
        backend = self.backend
        partition_keys = backend._keys(self.job, self.partition)
        script_keys = partition_keys.scripts
        args = [
            partition_keys.undo,
            str(self.version),
            expiry_bytes(upto_us),
        ]
        (members,) = backend._execute(
            f"reading expiring keys of {self.job}/{self.partition}",
            lambda pipe: backend._eval(pipe, "expiring", script_keys, args),
        )
        self.metrics.round_trips += 1
        if not members:
            return no_keys()
        _, names = split_prefix(pa.array(members, pa.binary()), EXPIRY_BYTES)
        return pc.cast(names.cast(pa.string()), pa.int64())
