"""Throughput of the stream over a Kafka topic next to the same events as files.

    source .services/env.sh   # SESSIONIZE_TEST_KAFKA (services/start.sh kafka)
    .venv/bin/python benchmarks/kafka_throughput.py [--users 20000 --hours 5
        --events-per-hour 100000 --topic-partitions 4]

Generates the events once (as `sessionize generate` does) and writes them as files, then
publishes the same lines, in arrival order and keyed by user, to a new topic and reports the
publish rate. Each contender then runs `run_stream` with the files state in a fresh process
(no JVM or cache carries over), timing only the work, from the first read to the last commit:

- `files`: the files source over the hourly tree;
- `kafka`: the Kafka source over the topic (one Spark task per Kafka partition);
- `files-read`, `kafka-read` (with --only): the source alone, rows counted, no engine.

With `--repeat N` the contenders run N times in turns and the fastest run of each counts,
which damps the noise of a machine shared with other work.

Both inputs are read in one micro-batch (Trigger.AvailableNow without limits), so the engine
does the same work on the same events; only the source differs. Prints events/s of each and
the ratio of kafka to files, measured in this run. The topic is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
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

CONTENDERS = ("files", "kafka", "files-read", "kafka-read")
DEFAULT = ("files", "kafka")


def run_contender(name: str, inp: str, work: str, partitions: int) -> dict:
    """Inside the fresh process: run one contender, return its timing."""
    from sessionize.commands.stream import StreamOptions, run_stream
    from sessionize.sources.registry import open_stream

    spark = warm_spark(name, partitions)
    opts = StreamOptions(
        input=inp, output=f"{work}/out", checkpoint=f"{work}/chk", partitions=partitions
    )
    t0 = time.perf_counter()
    if name.endswith("-read"):
        counts: list[int] = []
        query = (
            open_stream(spark, opts.input, opts.input_options())
            .writeStream.foreachBatch(lambda df, _: counts.append(df.count()))
            .option("checkpointLocation", opts.checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        events, batches = sum(counts), len(counts)
    else:
        records = run_stream(opts, spark, on_batch=lambda _: None)
        events, batches = sum(r["batch"]["records"] for r in records), len(records)
    return {
        "name": name,
        "events": events,
        "batches": batches,
        "seconds": time.perf_counter() - t0,
    }


def _delete_topic(uri: str) -> None:
    from confluent_kafka.admin import AdminClient

    from sessionize.sources.uri import parse_kafka_uri

    address = parse_kafka_uri(uri)
    admin = AdminClient({"bootstrap.servers": address.bootstrap, "log_level": 4})
    try:
        admin.delete_topics([address.topic])[address.topic].result(60)
    except Exception as e:  # keep the results; say what is left behind
        print(f"could not delete topic {address.topic}: {e}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_input_args(ap)
    ap.add_argument("--topic-partitions", type=int, default=4)
    ap.add_argument("--kafka", default=os.environ.get("SESSIONIZE_TEST_KAFKA"))
    ap.add_argument("--only", nargs="*", default=list(DEFAULT), choices=CONTENDERS)
    ap.add_argument("--repeat", type=int, default=1, help="runs per contender; the best counts")
    add_run_args(ap)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(run_contender(args.run, args.input, args.work, args.partitions)))
        return
    if not args.kafka:
        raise SystemExit(
            "no broker: pass --kafka kafka://HOST:PORT or run services/start.sh kafka and "
            "source .services/env.sh"
        )

    with bench_root("sessionize-kafka-bench-") as root:
        _compare(args, root)


def _compare(args: argparse.Namespace, root: Path) -> None:
    """Generate, publish, run every contender, print the rates; the topic goes at the end."""
    from sessionize.generate.publish import publish_kafka
    from sessionize.generate.writer import generate_events

    topic = f"{args.kafka.rstrip('/')}/bench-{os.getpid()}-{int(time.time())}"
    created = False
    try:
        cfg = input_config(args)
        write_input(cfg, str(root / "input"))
        # The same lines in the same arrival order, materialized so that only sending is timed.
        lines = [line for hour in generate_events(cfg) for f in hour.files for line in f.lines]
        created = True  # from here on, the topic may exist
        stats = publish_kafka(lines, topic, create_partitions=args.topic_partitions)
        del lines
        print(
            f"published {stats.records:,} lines to {args.topic_partitions} partitions in "
            f"{stats.seconds:.1f}s: {stats.per_second:,.0f} events/s"
        )
        inputs = {"files": str(root / "input"), "kafka": topic}
        best: dict[str, dict] = {}  # the fastest of --repeat runs, taken in turns
        for name in [n for _ in range(args.repeat) for n in args.only]:
            work = root / name
            inp = inputs[name.split("-")[0]]
            result = run_fresh(__file__, name, inp, str(work), args.partitions)
            if name not in best or result["seconds"] < best[name]["seconds"]:
                best[name] = result
            shutil.rmtree(work, ignore_errors=True)
        results = list(best.values())
        rate = {r["name"]: r["events"] / r["seconds"] for r in results}
        print(f"{'contender':<12}{'events':>11}{'batches':>9}{'seconds':>9}{'events/s':>11}")
        for r in results:
            print(
                f"{r['name']:<12}{r['events']:>11,}{r['batches']:>9}{r['seconds']:>9.1f}"
                f"{rate[r['name']]:>11,.0f}"
            )
        for a, b in (("kafka", "files"), ("kafka-read", "files-read")):
            if a in rate and b in rate:
                print(f"{a} / {b}: {rate[a] / rate[b]:.2f}")
    finally:
        if created:
            _delete_topic(topic)


if __name__ == "__main__":
    main()
