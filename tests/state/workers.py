"""Row builders and commit helpers for the state tests; light enough to import in the child
processes the tests start (no pytest, no numpy)."""

from __future__ import annotations

import pyarrow as pa

from sessionize import schema
from sessionize.state import StateBackend

J = "job-a"


def rows(spec: dict[int, list[int]], page: str = "p") -> pa.Table:
    """State rows: {key: [expires_at_us, ...]} -> one row per expiry, pages page0, page1..."""
    keys, exps, pages = [], [], []
    for k, es in spec.items():
        for i, e in enumerate(es):
            keys.append(k)
            exps.append(e)
            pages.append(f"{page}{i}")
    n = len(keys)
    cols = {f.name: pa.nulls(n, f.type) for f in schema.STATE}
    cols[schema.STATE_KEY] = pa.array(keys, pa.int64())
    cols[schema.STATE_EXPIRY] = pa.array(exps, schema.TS)
    cols["event_time"] = pa.array(exps, schema.TS)
    cols["page"] = pa.array(pages, pa.string())
    cols["action"] = pa.array(["view"] * n, pa.string())
    return pa.table(cols, schema=schema.STATE)


def content(table: pa.Table) -> dict[int, list[tuple[str, int]]]:
    """{key: [(page, expires_at_us), ...] in row order} of a state table."""
    out: dict[int, list[tuple[str, int]]] = {}
    exp = table.column(schema.STATE_EXPIRY).cast(pa.int64()).to_pylist()
    keys = table.column(schema.STATE_KEY).to_pylist()
    for k, p, e in zip(keys, table["page"].to_pylist(), exp, strict=True):
        out.setdefault(k, []).append((p, e))
    return out


def expected(spec: dict[int, list[int]], page: str = "p") -> dict[int, list[tuple[str, int]]]:
    return content(rows(spec, page))


def read_all(backend: StateBackend, job: str, partition: int, version: int, keys=range(100)):
    with backend.open(job, partition, version) as ps:
        return content(ps.get_many(list(keys)))


def commit(backend, job, partition, parent, version, puts=None, removes=(), meta=None, page="p"):
    ps = backend.open(job, partition, parent)
    if puts:
        ps.put_many(rows(puts, page))
    if removes:
        ps.remove_many(list(removes))
    ps.commit(version, meta)
    return ps


def commit_versions(backend: StateBackend, partition: int, versions: int) -> int:
    for v in range(versions):
        commit(backend, J, partition, v - 1, v, {partition * 1000 + v: [v]})
    return partition
