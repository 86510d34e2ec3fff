"""What the users step keeps in each state store: bytes per stitched user, per backend.

    .venv/bin/python benchmarks/users_state.py [--users 100000 1000000]
        [--backends files postgres redis dynamodb] [--partitions 8] [--content off on]

A session job with `--anonymous-field` runs a second keyed step per batch over the
sessions it emits: `logic/users.py`'s `UsersProcessor`, store job `JOB.users`, keyed by
`stitched_user_id`, one state row per stitched user until `--user-ttl` after their last
event (docs/concepts/identity.md). This builds that state as the engine does, without
Spark: `--users` anonymous ids (`d` and a number), each with one visit of one to three
events in the first hour, 30% of them logged in with a user id of their own (`u` and a
number), so that there are as many stitched users as anonymous ids; the session
processor's step (in memory) emits every session at a watermark an hour after the last
event, and those sessions go through the keyed core's `step` and the `UsersProcessor` the
session processor declares as its follow-on, placed over `--partitions` partitions as
Spark's `repartition(N, stitched_user_id)` places them, into each store, one commit per
partition (as a job of that size runs: a million keys in one Redis commit outlasts its
client's 60 s timeout).

`--content off`: sessions of schema 1 (no traffic columns): a users row is
`stitched_user_id`, `first_session_start`, `last_session_start`, `sessions`, `events` and
`last_event` (the TTL's clock). `--content on`: the URL, referrer and user agent read,
sessions of schema 3 (a mix of campaign, click-id, search, social, referral and direct
visits): the row also carries `page_views`, `engaged_sessions`, `first_channel`,
`first_landing_page`, `last_channel` and the last non-direct session's channel, source,
medium, campaign and start (null for a user who only came direct).

Bytes as each store holds them, by identity_state.py's rules (files on disk with a
snapshot per version; PostgreSQL's tables and indexes after `VACUUM FULL`; Redis's
`MEMORY USAGE`; DynamoDB's item-size rule), after the store's maintenance keeping 1
version. Remote stores use the local servers (`source .services/env.sh`); each run gets
its own schema, key prefix or table and removes it afterwards.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from identity_state import DAY, HOUR, T0, where

from sessionize.config import SessionRules
from sessionize.content import SessionContent
from sessionize.core.declared import declared
from sessionize.core.keys import store_keys
from sessionize.core.partitioner import spark_partitions
from sessionize.core.step import step
from sessionize.logic.processor import SessionProcessor
from sessionize.mapping import EventMapping
from sessionize.schema import layout
from sessionize.state.base import StateBackend
from sessionize.state.registry import open_backend

JOB = "bench"
CONTENT = {
    "url": "page.url",
    "referrer": "page.referrer",
    "user_agent": "technical.user_agent",
    "session_columns": 3,
    "content": SessionContent(),
}
# Landing URLs and referrers of the visits (`{p}` a page, `{n}` a number): campaigns, a
# Google click id, plain pages (direct, or with one of the referrers).
URLS = (
    "https://shop.example/p{p}?utm_source=google&utm_medium=cpc&utm_campaign=winter%20sale",
    "https://shop.example/p{p}?utm_source=newsletter&utm_medium=email&utm_campaign=w{n}",
    "https://shop.example/p{p}?gclid=Cj0K{n}",
    "https://shop.example/p{p}",
    "https://shop.example/p{p}",
    "https://shop.example/p{p}",
)
REFERRERS = (None, None, "https://www.google.com/", "https://t.co/x", "https://blog{n}.example/")
AGENT = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/12{n}.0 Safari/537.36"


@dataclass
class Measured:
    bytes: int
    keys: int  # store keys holding a row
    build_s: float  # every partition's step, store reads and commits included
    measure_s: float


def events(n: int, content: bool) -> pa.Table:
    """One visit per anonymous id (one to three events a minute apart) in the first hour,
    30% of them logged in, each with a user id of its own."""
    rng = np.random.default_rng(7)
    visit_events = rng.integers(1, 4, n)
    visit = np.repeat(np.arange(n), visit_events)
    step_in_visit = np.arange(len(visit)) - np.repeat(
        np.cumsum(visit_events) - visit_events, visit_events
    )
    start = T0 + rng.integers(0, HOUR - 10 * 60_000_000, n)
    m = len(visit)
    page = rng.integers(0, 200, m)
    logged_in = rng.random(n) < 0.3
    cols = {
        "user_id": pa.array(np.char.add("d", visit.astype(str))),
        "event_time": pa.array(
            start[visit] + step_in_visit * 60_000_000, pa.timestamp("us", tz="UTC")
        ),
        "page": pa.array(np.char.add("/p", page.astype(str))),
        "action": pa.array(["view"] * m),
        "site": pa.array(["shop.example"] * m),
        "api_version": pa.array(["v3"] * m),
        "browser": pa.array(np.char.add("Firefox ", rng.integers(50, 60, m).astype(str))),
        "language": pa.array(["en"] * m),
        "device_type": pa.array(np.where(rng.random(m) < 0.3, "mobile", "desktop")),
        "sent_user_id": pa.array(np.char.add("u", visit.astype(str)), mask=~logged_in[visit]),
    }
    if content:
        kind = rng.integers(0, len(URLS), n)[visit]
        ref = rng.integers(0, len(REFERRERS), n)[visit]
        number = (visit % 97).astype(str)
        urls = [URLS[k].format(p=p, n=x) for k, p, x in zip(kind, page, number, strict=True)]
        refs = [
            None if REFERRERS[r] is None or URLS[k].find("?") >= 0 else REFERRERS[r].format(n=x)
            for r, k, x in zip(ref, kind, number, strict=True)
        ]
        cols["url"] = pa.array(urls)
        cols["referrer"] = pa.array(refs, pa.string())
        cols["user_agent"] = pa.array([AGENT.format(n=x) for x in visit % 10])
    return pa.table(cols)


def processor(content: bool) -> SessionProcessor:
    mapping = EventMapping(
        anonymous="anonymous_id", user_type="string", **(CONTENT if content else {})
    )
    return SessionProcessor(SessionRules(user_ttl_us=400 * DAY), layout(mapping))


def emitted_sessions(p: SessionProcessor, rows: pa.Table) -> pa.Table:
    """The sessions the first step emits (in memory): all of them, the watermark an hour
    past the last event; they are what the engine hands to the users step."""
    result = step(
        p,
        declared(p).rows.empty(),
        rows,
        batch_id=0,
        partition=0,
        watermark_before=None,
        watermark_after=T0 + 2 * HOUR,
    )
    return result.outputs["sessions"]


def advance(backend: StateBackend, job: str, users, partition: int, rows: pa.Table) -> None:
    """Batch 0 of one partition of the users step, as engines/partition.py runs it."""
    d = declared(users)
    store = backend.open(job, partition, -1)
    keys = store_keys(rows.column(d.key)).unique()
    due = pa.array(store.expiring(T0 + 2 * HOUR), pa.int64())
    result = step(
        users,
        store.get_many(pa.concat_arrays([keys, due]).unique()),
        rows,
        batch_id=0,
        partition=partition,
        watermark_before=None,
        watermark_after=T0 + 2 * HOUR,
    )
    store.remove_many(result.removes)
    store.put_many(result.puts)
    store.commit(0, dict(store.meta))


def keys_at(backend: StateBackend, job: str, partitions: int) -> int:
    """The store keys with a row at version 0 (every row expires within 1,000 days)."""
    total = 0
    for partition in range(partitions):
        with backend.open(job, partition, 0) as store:
            total += len(store.expiring(T0 + 1000 * DAY))
    return total


def measure(uri: str, size_of, sessions: pa.Table, users, partitions: int) -> Measured:
    backend = open_backend(uri, declared(users).rows)
    backend.check()
    job = f"{JOB}.users"
    placed = spark_partitions(sessions.column(declared(users).key), partitions)
    t = time.perf_counter()
    for partition in range(partitions):
        advance(backend, job, users, partition, sessions.filter(pa.array(placed == partition)))
        backend.maintenance(job, partition, 1)
    build = time.perf_counter() - t
    t = time.perf_counter()
    size = size_of()
    measured = time.perf_counter() - t
    return Measured(size, keys_at(backend, job, partitions), build, measured)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, nargs="+", default=[100_000])
    ap.add_argument("--backends", nargs="+", default=["files", "postgres", "redis", "dynamodb"])
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--content", nargs="+", choices=["off", "on"], default=["off", "on"])
    args = ap.parse_args()
    print(f"load: {load()}", flush=True)
    head = (
        f"{'backend':<9} {'users':>8} {'content':<7} {'B/user':>8} {'keys':>8} "
        f"{'build s':>8} {'measure s':>9}  load"
    )
    for n in args.users:
        for content in args.content:
            p = processor(content == "on")
            users = p.follow_on.processor
            t = time.perf_counter()
            sessions = emitted_sessions(p, events(n, content == "on"))
            stitched = pc.count_distinct(sessions.column("stitched_user_id")).as_py()
            print(
                f"{n:,} anonymous ids, content {content}: {sessions.num_rows:,} sessions of "
                f"{stitched:,} stitched users ({time.perf_counter() - t:.1f} s, first step)",
                flush=True,
            )
            print(head)
            print("-" * len(head), flush=True)
            for name in args.backends:
                place = where(name)
                if place is None:
                    continue
                uri, size_of, clean, *newest = place
                try:
                    m = measure(uri, size_of, sessions, users, args.partitions)
                    latest = newest[0]() / stitched if newest else None
                finally:
                    clean()
                print(
                    f"{name:<9} {stitched:>8} {content:<7} {m.bytes / stitched:>8.1f} "
                    f"{m.keys:>8} {m.build_s:>8.1f} {m.measure_s:>9.1f}  {load()}",
                    flush=True,
                )
                if latest is not None:
                    print(f"{'':<9} {'':>8} {'':<7} {latest:>8.1f}  (newest entries only)")
    print(f"load: {load()}")


if __name__ == "__main__":
    main()
