"""The `redis` store's keys and values.

Every key of partition p of job J carries the hash tag `{J/p}` (one cluster slot, so that
a script may touch all of them); PREFIX is the URI's `prefix` (default `sessionize`)::

    PREFIX:{J/p}:head         hash  key -> its value at the newest version
    PREFIX:{J/p}:exp          zset  the expiry index: one member `e8 + key` per key in head,
                                    all scores 0, so that ZRANGEBYLEX - (e8(t) lists the
                                    keys expiring before t
    PREFIX:{J/p}:versions     zset  the committed versions (score = member = version)
    PREFIX:{J/p}:info         hash  m:V -> meta JSON, k:V -> keys, b:V -> value bytes of
                                    version V; fence -> the newest lease epoch that fenced
                                    the partition (commit.lua refuses older committers)
    PREFIX:{J/p}:undo:V       hash  key -> its value before version V changed it ("": it did
                                    not exist), for every key V changed
    PREFIX:{J/p}:stage:TOKEN  hash  a commit's new values ("": removed) on their way to the
                                    commit script; expires after STAGE_TTL_S
    PREFIX:{J}:parts          set   the partitions of J that were ever committed
    PREFIX:{J}:records        hash  version -> the job record's JSON (the driver's commit log)
    PREFIX:{J}:job            hash  settings -> the job's settings JSON (record.lua, as a
                                    job record)
    PREFIX:{J}:fence          hash  fence -> the newest lease epoch that fenced the job
                                    (record.lua refuses job records and settings of older
                                    epochs)

Keys are decimal strings. A value is e8 -- the key's earliest expiry as 8 big-endian bytes,
biased by 2**63 so that byte order is time order -- followed by the key's rows
(`keyblobs`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

STAGE_TTL_S = 86_400
EXPIRY_BYTES = 8
_BIAS = np.uint64(2**63)


@dataclass(frozen=True)
class PartitionKeys:
    """The keys of partition p of job J (the module's doc), all under its hash tag `{J/p}`."""

    tag: str  # PREFIX:{J/p}

    @classmethod
    def of(cls, prefix: str, job: str, partition: int) -> PartitionKeys:
        return cls(f"{prefix}:{{{job}/{partition}}}")

    @property
    def scripts(self) -> list[str]:
        """[head, exp, versions, info]: the KEYS every script takes first."""
        return [f"{self.tag}:{name}" for name in ("head", "exp", "versions", "info")]

    @property
    def versions(self) -> str:
        return f"{self.tag}:versions"

    @property
    def info(self) -> str:
        return f"{self.tag}:info"

    @property
    def undo(self) -> str:
        """The undo hash of version V is this followed by V."""
        return f"{self.tag}:undo:"

    def stage(self, token: str) -> str:
        return f"{self.tag}:stage:{token}"


def job_key(prefix: str, job: str, what: str) -> str:
    """`parts`, `records`, `job` or `fence` of the job."""
    return f"{prefix}:{{{job}}}:{what}"


def expiry_bytes(us: int) -> bytes:
    """e8: 8 bytes whose byte order is the order of the signed microseconds `us`."""
    return ((us + 2**63) % 2**64).to_bytes(EXPIRY_BYTES, "big")


def values_of(expiry: np.ndarray, blobs: pa.ChunkedArray) -> list[bytes]:
    """e8(expiry) + blob for every key, joined by Arrow."""
    out: list[bytes] = []
    at = 0
    for chunk in blobs.chunks:
        n = len(chunk)
        e8 = (expiry[at : at + n].astype(np.uint64) + _BIAS).astype(">u8")
        offsets = np.arange(n + 1, dtype=np.int32) * EXPIRY_BYTES
        heads = pa.Array.from_buffers(
            pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(e8.view(np.uint8))]
        )
        out += pc.binary_join_element_wise(heads, chunk, pa.scalar(b"", pa.binary())).to_pylist()
        at += n
    return out


def key_strings(keys: np.ndarray) -> list[str]:
    as_strings = pc.cast(pa.array(np.asarray(keys, dtype=np.int64)), pa.string())
    strings: list[str] = as_strings.to_pylist()
    return strings
