"""What identity stitching and the users step cost a session job: `--anonymous-field`
(both keyed steps) against the same job keyed by the anonymous id without it, with and
without the traffic columns, alternating, in one run.

    .venv/bin/python benchmarks/identity_speed.py [--hours 3 --users 20000
        --events-per-hour 100000 --repeats 3]

One input of `generate --identity-data --web-data` (an anonymous id on every event, the
user id only while the visitor is logged in; URLs, referrers and user agents; the
throughput benchmark's mix of duplicates, invalid lines and closes), one Spark session,
then `sessionize batch` (the store engine, `files` state, local Parquet, 2 partitions) over
every hour, four jobs per turn, each into a new output:

- without identity: `--user-field anonymous_id --user-type string`: sessions per anonymous
  id, the user id not read (the events without one would be invalid with it as the key);
- with identity: `--anonymous-field anonymous_id --user-type string` (the user id read as
  `user_id`, `--user-ttl` 400 days): the same sessions, plus `user_id`,
  `stitched_user_id`, `session_number` and `is_new_user` on them, the identity rows in
  the state, the `identities` change log, and the users step (its own state per stitched
  user, the sessions handed to it in files, the `users` change log);
- the same two with the traffic columns (`--content`: the URL, referrer and user agent
  read, sessions of schema 3): with identity the sessions also carry the attributed
  channel and source and the users rows their channels, landing page and last non-direct
  source.

Wall seconds and CPU seconds (the driver, its JVM and Python workers, from /proc) per run
and the ratios of the best runs; the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pyarrow.dataset as ds
from bench_common import alternate_batch_jobs, input_config, warm_spark, write_input

from sessionize.config import SessionRules
from sessionize.content import SessionContent
from sessionize.mapping import EventMapping

DAY_US = 86_400_000_000
# The fields of `generate --web-data`, read as `--url-field` etc. (schema 3's columns).
CONTENT = {
    "url": "page.url",
    "referrer": "page.referrer",
    "user_agent": "technical.user_agent",
    "session_columns": 3,
    "content": SessionContent(),
}
PLAIN = {"session_columns": 1}
IDENTITY = SessionRules(user_ttl_us=400 * DAY_US)
JOBS = {
    "without identity": (EventMapping(user="anonymous_id", user_type="string", **PLAIN), None),
    "with identity": (
        EventMapping(anonymous="anonymous_id", user_type="string", **PLAIN),
        IDENTITY,
    ),
    "content, without identity": (
        EventMapping(user="anonymous_id", user_type="string", **CONTENT),
        None,
    ),
    "content, with identity": (
        EventMapping(anonymous="anonymous_id", user_type="string", **CONTENT),
        IDENTITY,
    ),
}
# (numerator, denominator) of each ratio printed.
RATIOS = (
    ("with identity", "without identity"),
    ("content, with identity", "content, without identity"),
    ("content, with identity", "without identity"),
)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=int, default=3)
    ap.add_argument("--users", type=int, default=20_000)
    ap.add_argument("--events-per-hour", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sessionize-identity-speed-"))
    try:
        print(f"load before: {load()}", flush=True)
        cfg = replace(input_config(args), identity_data=True, web_data=True)
        write_input(cfg, str(root / "in"))
        spark = warm_spark("identity", 2)
        sessions: dict[str, int] = {}
        users: dict[str, int] = {}

        def counted(name: str, out: Path, wall_s: float, cpu_s: float) -> None:
            sessions[name] = ds.dataset(out / "sessions", partitioning="hive").count_rows()
            if (out / "users").exists():  # the users step ran
                users[name] = ds.dataset(out / "users", partitioning="hive").count_rows()
            print(f"  {name}: {wall_s:.1f} s wall, {cpu_s:.1f} s CPU (load {load()})", flush=True)

        jobs = {
            name: {"mapping": mapping, "rules": rules or SessionRules()}
            for name, (mapping, rules) in JOBS.items()
        }
        wall, cpu, lines = alternate_batch_jobs(
            spark, root, args.hours, jobs, args.repeats, after=counted
        )
        for name in JOBS:
            print(
                f"{name}: "
                + ", ".join(f"{s:.1f}" for s in wall[name])
                + " s wall; "
                + ", ".join(f"{s:.1f}" for s in cpu[name])
                + f" s CPU; {sessions[name]:,} sessions"
                + (f", {users[name]:,} users rows" if name in users else "")
            )
        for what, measured in (("wall", wall), ("CPU", cpu)):
            best = {name: min(times) for name, times in measured.items()}
            for top, bottom in RATIOS:
                print(
                    f"{what}: {top} / {bottom}: {best[top] / best[bottom]:.3f}x (best of "
                    f"{args.repeats}: {best[top]:.1f} / {best[bottom]:.1f} s)"
                )
        print(f"{lines:,} lines per run, {args.hours} hours")
        print(f"load after: {load()}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
