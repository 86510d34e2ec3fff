"""Read the four outputs and reduce them to the small arrays the report plots.

Every aggregate is a pyarrow.compute or numpy operation over whole columns (no Python loop
per row), and each output is read with only the columns it needs, so a report over millions
of sessions takes seconds. Outputs are read as their committed rows, whatever format wrote
them (`sinks.registry.committed_rows`): a Delta table's current version, the commit files of
Parquet on s3://, the batch directories of local Parquet.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sessionize.redaction import redact_uri
from sessionize.sinks.registry import committed_rows

TOP_PAGES = 10
TOP_REASONS = 8
SESSION_COLUMNS = [
    "batch_id",
    "user_id",
    "start_time",
    "end_time",
    "duration_ms",
    "event_count",
    "pages",
    "end_reason",
]


@dataclass(frozen=True)
class Counts:
    """Labels and their counts, in the order to plot them."""

    labels: list[str]
    values: list[int]

    def as_dict(self) -> dict[str, int]:
        return dict(zip(self.labels, self.values, strict=True))


@dataclass(frozen=True)
class Histogram:
    """`counts[i]` values in [edges[i], edges[i + 1]); the last bin also holds the tail."""

    edges: np.ndarray
    counts: np.ndarray
    percentiles: dict[str, float]  # "p50", "p90", "p99"
    tail_from: float | None = None  # the last bin holds every value >= this


@dataclass(frozen=True)
class Hourly:
    hours: np.ndarray  # datetime64[h], UTC
    counts: np.ndarray


@dataclass
class OutputData:
    """What the report shows of the outputs; empty parts mean no rows were found."""

    root: str  # as shown: without a password
    found: set[str] = field(default_factory=set)  # the outputs that exist
    sessions: int = 0
    users: int = 0
    page_views: int = 0
    late: int = 0
    invalid: int = 0
    first_start: np.datetime64 | None = None
    last_end: np.datetime64 | None = None
    sessions_per_hour: Hourly | None = None
    events_per_hour: Hourly | None = None
    duration_min: Histogram | None = None
    events_per_session: Histogram | None = None
    end_reasons: Counts = field(default_factory=lambda: Counts([], []))
    entry_pages: Counts = field(default_factory=lambda: Counts([], []))
    exit_pages: Counts = field(default_factory=lambda: Counts([], []))
    top_pages: Counts = field(default_factory=lambda: Counts([], []))
    late_per_batch: Counts = field(default_factory=lambda: Counts([], []))
    invalid_per_batch: Counts = field(default_factory=lambda: Counts([], []))
    invalid_reasons: Counts = field(default_factory=lambda: Counts([], []))
    batches: list[str] = field(default_factory=list)  # every batch id seen, in order
    bots_left_out: int = 0  # bots' sessions (`is_bot`) not in the session figures


def read_columns(root: str, name: str, columns: list[str]) -> pa.Table | None:
    """Output `name` under `root` with `columns` (those it has), or None when it is absent."""
    dataset = committed_rows(root, name)
    if dataset is None:
        return None
    present = [c for c in columns if c in dataset.schema.names]
    if not present:
        return None
    return dataset.to_table(columns=present)


def load_outputs(root: str, with_bots: bool = False) -> OutputData:
    """The report's figures of the outputs under `root`; bots' sessions (`is_bot`, where
    the sessions have it) are left out of the session figures and counted, unless
    `with_bots`, as analytics tools leave known bots out."""
    data = OutputData(root=redact_uri(root))
    sessions = read_columns(root, "sessions", [*SESSION_COLUMNS, "is_bot", "stitched_user_id"])
    if sessions is not None and "is_bot" in sessions.column_names:
        bots = pc.fill_null(sessions["is_bot"], False)
        if not with_bots:
            data.bots_left_out = pc.sum(bots).as_py() or 0
            sessions = sessions.filter(pc.invert(bots))
    if sessions is not None and sessions.num_rows:
        _sessions(data, sessions)
    views = read_columns(root, "page_views", ["event_time"])
    if views is not None and views.num_rows:
        data.page_views = views.num_rows
        data.events_per_hour = hourly(views["event_time"])
    late = read_columns(root, "late_events", ["batch_id"])
    if late is not None:
        data.late = late.num_rows
        data.late_per_batch = per_batch(late["batch_id"])
    invalid = read_columns(root, "invalid_events", ["batch_id", "reason"])
    if invalid is not None:
        data.invalid = invalid.num_rows
        data.invalid_per_batch = per_batch(invalid["batch_id"])
        data.invalid_reasons = top_counts(invalid["reason"], TOP_REASONS)
    tables = {
        "sessions": sessions,
        "page_views": views,
        "late_events": late,
        "invalid_events": invalid,
    }
    data.found = {name for name, table in tables.items() if table is not None}
    ids = [
        t["batch_id"]
        for t in (sessions, late, invalid)
        if t is not None and "batch_id" in t.column_names
    ]
    if ids:
        every = pc.unique(pa.chunked_array([c for a in ids for c in a.chunks], ids[0].type))
        data.batches = [str(b) for b in np.sort(every.to_numpy())]
    return data


def _sessions(data: OutputData, t: pa.Table) -> None:
    data.sessions = t.num_rows
    # With identity `user_id` is null until a login: users are counted by the id that
    # stands for each visitor, logged in or not (docs/concepts/identity.md).
    who = "stitched_user_id" if "stitched_user_id" in t.column_names else "user_id"
    data.users = pc.count_distinct(t[who]).as_py()
    data.first_start = _as_np(pc.min(t["start_time"]))
    data.last_end = _as_np(pc.max(t["end_time"]))
    data.sessions_per_hour = hourly(t["start_time"])
    minutes = t["duration_ms"].to_numpy() / 60_000.0
    data.duration_min = histogram(minutes, bins=30)
    data.events_per_session = integer_histogram(t["event_count"].to_numpy())
    data.end_reasons = top_counts(t["end_reason"], None)
    entry, exit_, flat = _entry_exit_pages(t["pages"])
    data.entry_pages = top_counts(entry, TOP_PAGES)
    data.exit_pages = top_counts(exit_, TOP_PAGES)
    data.top_pages = top_counts(flat, TOP_PAGES)


def _as_np(scalar: pa.Scalar) -> np.datetime64 | None:
    value = scalar.cast(pa.int64()).as_py()
    return None if value is None else np.datetime64(value, "us")


def _entry_exit_pages(pages: pa.ChunkedArray) -> tuple[pa.Array, pa.Array, pa.Array]:
    """First and last page of every session, and every page, from the `pages` lists."""
    entries, exits, flats = [], [], []
    for chunk in pages.chunks:  # a handful of chunks, each a whole column slice
        offsets = chunk.offsets.to_numpy()
        values = chunk.values
        nonempty = offsets[1:] > offsets[:-1]
        entries.append(values.take(pa.array(offsets[:-1][nonempty])))
        exits.append(values.take(pa.array(offsets[1:][nonempty] - 1)))
        flats.append(values.slice(offsets[0], offsets[-1] - offsets[0]))
    return (
        pa.chunked_array(entries, pa.string()),
        pa.chunked_array(exits, pa.string()),
        pa.chunked_array(flats, pa.string()),
    )


def top_counts(values: pa.ChunkedArray | pa.Array, limit: int | None) -> Counts:
    """The most frequent values, most frequent first (ties by value, for a stable page)."""
    if len(values) == 0:
        return Counts([], [])
    vc = pc.value_counts(values)
    table = pa.table({"value": vc.field("values"), "count": vc.field("counts")})
    table = table.sort_by([("count", "descending"), ("value", "ascending")])
    if limit is not None:
        table = table.slice(0, limit)
    labels = ["(none)" if v is None else str(v) for v in table["value"].to_pylist()]
    return Counts(labels, table["count"].to_pylist())


def per_batch(batch_ids: pa.ChunkedArray) -> Counts:
    """Rows per batch, in batch order; batches without rows do not appear."""
    if len(batch_ids) == 0:
        return Counts([], [])
    vc = pc.value_counts(batch_ids)
    order = np.argsort(vc.field("values").to_numpy())
    ids = vc.field("values").to_numpy()[order]
    return Counts([str(i) for i in ids], vc.field("counts").to_numpy()[order].tolist())


def hourly(times: pa.ChunkedArray) -> Hourly:
    """Rows per UTC hour, every hour from the first to the last (empty hours as 0)."""
    # Arrow's integer division and value_counts: several times faster than numpy's `//`.
    hours = pc.divide(pc.cast(times, pa.int64()), 3_600_000_000)  # times are after 1970
    vc = pc.value_counts(hours)
    values, counts = vc.field("values").to_numpy(), vc.field("counts").to_numpy()
    first = int(values.min())
    dense = np.zeros(int(values.max()) - first + 1, np.int64)
    dense[values - first] = counts
    return Hourly(np.datetime64(first, "h") + np.arange(len(dense)), dense)


def histogram(values: np.ndarray, *, bins: int) -> Histogram:
    """Equal bins up to the 99.5th percentile; the last bin also holds the longer tail."""
    pct = _percentiles(values)
    top = float(np.percentile(values, 99.5))
    high = top if top > 0 else 1.0
    edges = np.linspace(0.0, high, bins + 1)
    counts, _ = np.histogram(np.minimum(values, high), bins=edges)
    tail = high if values.max() > high else None
    return Histogram(edges, counts, pct, tail)


def integer_histogram(values: np.ndarray, *, max_bins: int = 40) -> Histogram:
    """One bin per integer from 1 up to the 99th percentile (at most `max_bins`), then a
    last bin for everything above."""
    pct = _percentiles(values)
    cap = int(min(max(np.percentile(values, 99, method="lower"), 1), max_bins))
    counts = np.bincount(np.minimum(values, cap + 1), minlength=cap + 2)[1:]
    edges = np.arange(1, cap + 3, dtype=float)
    tail = float(cap + 1) if values.max() > cap else None
    if tail is None:
        counts, edges = counts[:-1], edges[:-1]
    return Histogram(edges, counts, pct, tail)


def _percentiles(values: np.ndarray) -> dict[str, float]:
    p = np.percentile(values, [50, 90, 99])
    return {"p50": float(p[0]), "p90": float(p[1]), "p99": float(p[2])}
