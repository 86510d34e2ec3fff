"""Generated JSON events rewritten as Parquet files, in the sample layout or a mapped one.

Each JSON file becomes one Parquet file with the same events, at the same relative path
(`.parquet` for `.json`) and with the same modification time, so a stream reads them in
the same order and batches as the JSON files.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# The mapped layout: other names, epoch-ms times, attributes in other structs.
MAPPED = dict(user="uid", time="ts", page="url", action="type", time_format="epoch-ms")
MAPPED_KEEP = {
    "site": "src.site",
    "api_version": "src.api",
    "browser": "tech.browser",
    "language": "tech.lang",
    "device_type": "tech.device_type",
}
MAPPED_SCHEMA = pa.schema(
    [
        ("uid", pa.int64()),
        ("ts", pa.int64()),
        ("url", pa.string()),
        ("type", pa.string()),
        ("src", pa.struct([("site", pa.string()), ("api", pa.string())])),
        (
            "tech",
            pa.struct(
                [("browser", pa.string()), ("lang", pa.string()), ("device_type", pa.string())]
            ),
        ),
    ]
)


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def sample_row(e: dict) -> dict:
    """The JSON object as a typed row: the same nesting, event_time a timestamp."""
    return {**e, "event_time": _time(e["event_time"])}


def mapped_row(e: dict) -> dict:
    tech, source = e.get("technical") or {}, e.get("source") or {}
    return {
        "uid": e["user_id"],
        "ts": int(_time(e["event_time"]).timestamp() * 1000),
        "url": e["page"]["current"],
        "type": e.get("action"),
        "src": {"site": source.get("site"), "api": source.get("api_version")},
        "tech": {
            "browser": tech.get("browser"),
            "lang": tech.get("lang"),
            "device_type": (tech.get("device") or {}).get("type"),
        },
    }


def json_files(root: Path) -> list[Path]:
    """The tree's JSON files in arrival (modification time) order."""
    return sorted(root.rglob("*.json"), key=lambda p: (p.stat().st_mtime, str(p)))


def write_parquet(src: Path, dst: Path, layout: str) -> Path:
    """One JSON file as one Parquet file (`layout`: sample or mapped), same mtime."""
    events = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
    if layout == "sample":
        rows = [sample_row(e) for e in events]
        keys = list(dict.fromkeys(k for r in rows for k in r))
        table = pa.table({k: pa.array([r.get(k) for r in rows]) for k in keys})
    else:
        table = pa.Table.from_pylist([mapped_row(e) for e in events], MAPPED_SCHEMA)
    dst.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, dst)
    mtime = src.stat().st_mtime
    os.utime(dst, (mtime, mtime))
    return dst


def parquet_tree(json_root: Path, out: Path, layout: str = "sample") -> Path:
    for src in json_files(json_root):
        write_parquet(src, out / src.relative_to(json_root).with_suffix(".parquet"), layout)
    return out
