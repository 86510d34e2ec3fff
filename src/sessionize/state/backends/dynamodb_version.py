"""A partition of the DynamoDB store at one version (`dynamodb.py`, whose doc describes the
items): reads load the key items they need, `expiring` reads the index and the changes the
index may not show yet."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from sessionize.state.backends.dynamodb_layout import (
    CHANGE_ITEM,
    INDEX_SHARDS,
    NO_HISTORY,
    History,
    KeyItem,
    expiry_text,
    index_shard_pk,
    key_in_pk,
    parse_change,
    partition_pk,
    version_sk,
)
from sessionize.state.metrics import StateMetrics
from sessionize.state.stored import StoredVersion

if TYPE_CHECKING:
    from sessionize.state.backends.dynamodb import DynamoDBBackend

LAG_VERSIONS = 16  # versions whose lowered keys `expiring` checks beside the index


class DynamoDBVersion(StoredVersion):
    """A partition at a version: key items are read on demand and kept for the commit."""

    def __init__(
        self,
        backend: DynamoDBBackend,
        job: str,
        partition: int,
        version: int,
        meta: dict[str, Any],
        seen: History = NO_HISTORY,
    ):
        super().__init__(backend, job, partition, version, meta)
        self.backend: DynamoDBBackend = backend
        self.seen = seen
        self.items: dict[int, KeyItem] = {}

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
        job, partition, version = self.job, self.partition, self.version
        what = f"reading expiring keys of {job}/{partition}"
        below = expiry_text(upto_us)
        shards = [index_shard_pk(job, partition, s) for s in range(INDEX_SHARDS)]
        first = version_sk(CHANGE_ITEM, max(version - LAG_VERSIONS + 1, 0))
        queries = [
            *(
                lambda m, pk=pk: client.query(
                    pk, m, what, below=below, projection="pk", on_index=True
                )
                for pk in shards
            ),
            lambda m: client.query(
                partition_pk(job, partition),
                m,
                what,
                prefix=first,
                below=version_sk(CHANGE_ITEM, version + 1),
                where=("xm < :t", {":t": {"N": str(upto_us)}}),
            ),
        ]
        counters = [StateMetrics() for _ in queries]
        found = client.parallel(lambda i: queries[i](counters[i]), list(range(len(queries))))
        self.metrics.round_trips += sum(c.round_trips for c in counters)
        candidates = {key_in_pk(i["pk"]["S"]) for items in found[:-1] for i in items}
        for change in found[-1]:  # keys the index may not show low enough yet
            v, token, lowered, _ = parse_change(change)
            if self.seen.tokens.get(v) == token:
                candidates.update(k for k, xe in lowered.items() if xe < upto_us)
        backend._read_items(self, candidates)
        out = []
        for k in candidates:
            e = self.items[k].at(version, self.seen)
            if e is not None and not e.removed and e.expiry < upto_us:
                out.append(k)
        return pa.array(sorted(out), pa.int64())

    def close(self) -> None:
        self.items = {}
