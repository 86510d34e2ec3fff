"""`sessionize generate --identity-data --web-data` holds every case the users step
distinguishes, counted by plain loops over the written events: logins mid-visit, one user
on two devices, logouts, a shared device (two user ids on one anonymous id), a return
after a TTL of an hour and a direct visit after a campaign one within and beyond a lookback
of an hour (the short TTL and lookback that docs/concepts/identity.md suggests for a few
hours of data)."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from tests.helpers import generate

GAP_S = 600  # the generator's and the sessions' gap: a visit ends after 10 idle minutes
HOUR_S = 3600  # the TTL and the lookback the cases are counted against


def _visits(root: Path) -> dict[str, list[list[dict]]]:
    """Per anonymous id, its events cut into visits by the gap, in time order."""
    by_device: dict[str, list[tuple[float, dict]]] = defaultdict(list)
    for path in sorted(root.rglob("*.json*")):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            for line in f:
                e = json.loads(line)
                t = datetime.fromisoformat(e["event_time"]).timestamp()
                by_device[e["anonymous_id"]].append((t, {**e, "t": t}))
    out = {}
    for device, events in by_device.items():
        visits: list[list[dict]] = []
        for t, e in sorted(events, key=lambda x: x[0]):
            if not visits or t - visits[-1][-1]["t"] > GAP_S:
                visits.append([])
            visits[-1].append(e)
        out[device] = visits
    return out


def test_identity_data_holds_every_case_the_users_step_distinguishes(tmp_path):
    root = generate(
        tmp_path / "in",
        start=datetime(2026, 11, 1, tzinfo=UTC),
        hours=4,
        users=100,
        events_per_hour=1000,
        identity_data=True,
        web_data=True,
        invalid_rate=0.0,
        duplicate_rate=0.0,
    )
    cases: dict[str, int] = defaultdict(int)
    devices_of: dict[str, set[str]] = defaultdict(set)
    for device, visits in _visits(root).items():
        users = {e["user_id"] for v in visits for e in v if e.get("user_id")}
        cases["shared device"] += len(users) > 1
        for u in users:
            devices_of[u].add(device)
        last_campaign = None
        for i, visit in enumerate(visits):
            ids = [e.get("user_id") for e in visit]
            cases["login mid-visit"] += ids[0] is None and any(ids)
            cases["logout"] += any(a and not b for a, b in zip(ids, ids[1:], strict=False))
            start = visit[0]["t"]
            cases["back after the ttl"] += i > 0 and start - visits[i - 1][-1]["t"] > HOUR_S
            page = visit[0].get("page", {})
            direct = "?" not in (page.get("url") or "") and not page.get("referrer")
            if direct and last_campaign is not None:
                within = start - last_campaign <= HOUR_S
                cases["direct within the lookback" if within else "direct beyond it"] += 1
            if not direct:
                last_campaign = start
    cases["two devices"] = sum(len(d) > 1 for d in devices_of.values())
    names = ["login mid-visit", "two devices", "logout", "shared device", "back after the ttl",
             "direct within the lookback", "direct beyond it"]  # fmt: skip
    assert all(cases[n] > 0 for n in names), dict(cases)
