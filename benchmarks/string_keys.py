"""Throughput with string user keys against integer keys, on the same events.

    .venv/bin/python benchmarks/string_keys.py [--users 10000 --hours 2 --events-per-hour 25000]

Generates the input once, then writes a copy whose `user_id` is a JSON string (`"u-123"`,
everything else byte for byte the same), and runs the `store` engine with `files` state on
each in a fresh process (one micro-batch per hour), timing only the work. Prints events/s
of both and their ratio, measured in this run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path

from bench_common import (
    add_input_args,
    add_run_args,
    bench_root,
    input_config,
    run_fresh,
    warm_spark,
    write_input,
)

_USER = re.compile(rb'^\{"user_id": (-?\d+)', re.MULTILINE)


def write_string_copy(src: Path, dst: Path) -> None:
    """The same files with the user id as a string; lines without one are kept as they are."""
    for path in src.rglob("*.json"):
        out = dst / path.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(_USER.sub(rb'{"user_id": "u-\1"', path.read_bytes()))
        st = path.stat()
        os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))


def run_contender(name: str, inp: str, work: str, partitions: int) -> dict:
    """Inside the fresh process: one stream over the input, timed from first read to last
    commit."""
    from sessionize.commands.stream import StreamOptions, run_stream
    from sessionize.mapping import EventMapping

    spark = warm_spark(name, partitions)
    t0 = time.perf_counter()
    opts = StreamOptions(
        input=inp,
        output=f"{work}/out",
        checkpoint=f"{work}/chk",
        partitions=partitions,
        max_files_per_trigger=2,
        mapping=EventMapping(user_type=name),
    )
    records = run_stream(opts, spark, on_batch=lambda _: None)
    return {
        "name": name,
        "events": sum(r["batch"]["records"] for r in records),
        "sessions": records[-1]["totals"]["sessions_out"],
        "invalid": records[-1]["totals"]["invalid"],
        "seconds": time.perf_counter() - t0,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_input_args(ap)
    ap.set_defaults(users=10000, hours=2, events_per_hour=25_000)
    add_run_args(ap)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(run_contender(args.run, args.input, args.work, args.partitions)))
        return
    with bench_root() as root:
        write_input(input_config(args), str(root / "long"))
        write_string_copy(root / "long", root / "string")
        results = {}
        for name in ("long", "string"):
            results[name] = run_fresh(
                __file__, name, str(root / name), str(root / f"work-{name}"), args.partitions
            )
        for r in results.values():
            print(
                f"{r['name']:<8} keys: {r['events']:,} lines, {r['invalid']:,} invalid, "
                f"{r['sessions']:,} sessions, "
                f"{r['seconds']:.1f}s, {r['events'] / r['seconds']:,.0f} events/s"
            )
        ratio = (results["string"]["events"] / results["string"]["seconds"]) / (
            results["long"]["events"] / results["long"]["seconds"]
        )
        # The generator's invalid lines include string user ids: valid with string keys.
        print(f"string/long throughput ratio: {ratio:.2f}")


if __name__ == "__main__":
    main()
