"""A second event layout for tests: the generator's events with other field names, string
user keys and epoch-millisecond times, and the expected outputs of both layouts from the
reference implementation (tests/logic/reference.py)."""

from __future__ import annotations

import json
import os
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from sessionize.mapping import EventMapping
from tests.logic.reference import reference_advance

# The mapping of layout B, and the same as flags.
MAPPING_B = EventMapping(
    user="anonymous_id",
    time="ts",
    page="url",
    action="type",
    time_format="epoch-ms",
    user_type="string",
    keep=(
        ("site", "ctx.site"),
        ("api_version", "ctx.v"),
        ("browser", "ua.name"),
        ("language", "ua.lang"),
        ("device_type", "ua.device"),
    ),
)
FLAGS_B = [
    "--user-field",
    "anonymous_id",
    "--user-type",
    "string",
    "--time-field",
    "ts",
    "--time-format",
    "epoch-ms",
    "--page-field",
    "url",
    "--action-field",
    "type",
    "--keep-fields",
    "site=ctx.site,api_version=ctx.v,browser=ua.name,language=ua.lang,device_type=ua.device",
]
GAP_US = LATENESS_US = 10 * 60_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)


def key_of(user_id: int) -> str:
    """Layout B's string key of a user: non-ASCII, with the `-` and `%` that session ids
    escape."""
    return f"ü-{user_id}%✓"


def _us(iso: str) -> int:
    t = datetime.fromisoformat(iso)
    if t.tzinfo is None:  # no offset means UTC
        t = t.replace(tzinfo=UTC)
    return (t - _EPOCH) // _US


def read_events(root: Path) -> list[dict]:
    """Layout A's events as the reference's rows (generated without invalid lines)."""
    out = []
    for path in sorted(root.rglob("*.json")):
        for line in path.read_text().splitlines():
            e = json.loads(line)
            src, tech = e.get("source", {}), e.get("technical", {})
            out.append(
                {
                    "user_id": e["user_id"],
                    "event_time": _us(e["event_time"]),
                    "page": e["page"]["current"],
                    "action": e.get("action", "view"),
                    "site": src.get("site"),
                    "api_version": src.get("api_version"),
                    "browser": tech.get("browser"),
                    "language": tech.get("lang"),
                    "device_type": tech.get("device", {}).get("type"),
                }
            )
    return out


def write_layout_b(src: Path, dst: Path) -> Path:
    """Every file of `src` rewritten in layout B, same names and modification times."""
    for path in src.rglob("*.json"):
        lines = []
        for line in path.read_text().splitlines():
            e = json.loads(line)
            src_, tech = e.get("source", {}), e.get("technical", {})
            b = {
                "anonymous_id": key_of(e["user_id"]),
                "ts": _us(e["event_time"]) // 1000,
                "url": e["page"]["current"],
                "ctx": {"site": src_.get("site"), "v": src_.get("api_version")},
                "ua": {
                    "name": tech.get("browser"),
                    "lang": tech.get("lang"),
                    "device": tech.get("device", {}).get("type"),
                },
            }
            if "action" in e:
                b["type"] = e["action"]
            lines.append(json.dumps(b, ensure_ascii=False))
        out = dst / path.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")
        st = path.stat()
        os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
    return dst


def expected(events: list[dict], watermark: int, *, string_keys: bool) -> dict[str, list]:
    """Sessions and page views emitted once the watermark is `watermark`, as sorted rows
    (timestamps in µs), with layout B's keys and session ids when `string_keys`."""
    if string_keys:
        events = [{**e, "user_id": key_of(e["user_id"])} for e in events]
    ref = reference_advance(
        [],
        events,
        gap_us=GAP_US,
        close_actions=("browser_close",),
        watermark_before=None,
        watermark_after=watermark,
    )
    # The reference writes session ids as the product does (string users escaped).
    out = {"sessions": ref["sessions"], "page_views": ref["page_views"]}
    return {k: sorted(rows, key=_row_key) for k, rows in out.items()}


def _row_key(r: dict) -> tuple:
    return (r["user_id"], r.get("start_time", r.get("event_time")), r.get("page", ""))


def actual(table) -> list[dict]:
    """An output table as sorted rows comparable with `expected` (timestamps in µs)."""
    rows = []
    for r in table.to_pylist():
        r = {k: ((v - _EPOCH) // _US if isinstance(v, datetime) else v) for k, v in r.items()}
        if isinstance(r.get("session_date"), str):  # read back from the directory name
            r["session_date"] = date.fromisoformat(r["session_date"])
        rows.append(r)
    return sorted(rows, key=_row_key)
