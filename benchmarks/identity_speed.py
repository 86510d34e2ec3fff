"""What identity stitching costs a session job: `--anonymous-field` against the same job
keyed by the anonymous id without it, alternating, in one run.

    .venv/bin/python benchmarks/identity_speed.py [--hours 3 --users 20000
        --events-per-hour 100000 --repeats 3]

One input of `generate --identity-data` (an anonymous id on every event, the user id only
while the visitor is logged in; the throughput benchmark's mix of duplicates, invalid lines
and closes), one Spark session, then `sessionize batch` (the store engine, `files` state,
local Parquet, 2 partitions) over every hour, twice per turn, each into a new output:

- without identity: `--user-field anonymous_id --user-type string`: sessions per anonymous
  id, the user id not read (the events without one would be invalid with it as the key);
- with identity: `--anonymous-field anonymous_id --user-type string` (the user id read as
  `user_id`, `--user-ttl` 400 days): the same sessions, plus `user_id` and
  `stitched_user_id` on them, the identity rows in the state and the `identities` change
  log.

Wall seconds and CPU seconds (the driver, its JVM and Python workers, from /proc) per run
and the ratio of the best runs; the load average before and after.
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
from sessionize.mapping import EventMapping

DAY_US = 86_400_000_000
JOBS = {
    "without identity": (
        EventMapping(user="anonymous_id", user_type="string"),
        SessionRules(),
    ),
    "with identity": (
        EventMapping(anonymous="anonymous_id", user_type="string"),
        SessionRules(user_ttl_us=400 * DAY_US),
    ),
}


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
        cfg = replace(input_config(args), identity_data=True)
        write_input(cfg, str(root / "in"))
        spark = warm_spark("identity", 2)
        sessions: dict[str, int] = {}

        def counted(name: str, out: Path, wall_s: float, cpu_s: float) -> None:
            sessions[name] = ds.dataset(out / "sessions", partitioning="hive").count_rows()
            print(f"  {name}: {wall_s:.1f} s wall, {cpu_s:.1f} s CPU (load {load()})", flush=True)

        jobs = {
            name: {"mapping": mapping, "rules": rules} for name, (mapping, rules) in JOBS.items()
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
            )
        for what, measured in (("wall", wall), ("CPU", cpu)):
            best = {name: min(times) for name, times in measured.items()}
            ratio = best["with identity"] / best["without identity"]
            print(
                f"{what}: with / without identity: {ratio:.3f}x (best of {args.repeats}: "
                f"{best['with identity']:.1f} / {best['without identity']:.1f} s; "
                f"{lines:,} lines per run, {args.hours} hours)"
            )
        print(f"load after: {load()}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
