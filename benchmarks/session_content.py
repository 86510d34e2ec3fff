"""What carrying the traffic source, channel, engagement, conversions and `is_bot` costs
the session logic: `logic.advance` over the same events, today's `sessions` columns (schema
1) against schema 2 and schema 3 (GA4's channels, page views and `events`, parsed user
agents, click ids, sources kept across splits) with every option on, alternating, in one
process (pure, no Spark).

    .venv/bin/python benchmarks/session_content.py [--events 200000 --users 8000 --repeats 4]
    .venv/bin/python benchmarks/session_content.py --job [--hours 2 --users 6000
        --events-per-hour 100000 --repeats 3]

Prints each one's CPU seconds per repeat (the first one warms the caches: CrawlerDetect's
regexes, the referrer lists, ua-parser's rules) and the ratio of the best times.

`--job` measures what the content columns cost a whole session job instead: one input of
`generate --web-data` (the throughput benchmark's mix, with URLs, referrers, user agents,
pings and purchases), one Spark session, then `sessionize batch` (the store engine, files
state, local Parquet) over every hour with a plain mapping (schema 1: no URL, referrer or
user agent read), with schema 1 reading and carrying those fields (what the input costs
before any column is computed from it) and with schema 3 (GA4's channels, page views and
`events`, user agents, click ids, pings, a conversion counted without its value: a value
path sends every line to the exact parse, docs/design.md "Events"), alternating, each into
a new output; wall
seconds and CPU seconds (the driver, its JVM and Python workers, from /proc) per run and
the ratio of the best runs.
"""

from __future__ import annotations

import argparse
import random
import time

import pyarrow as pa

from sessionize.config import SessionRules
from sessionize.content import Conversion, SessionContent
from sessionize.logic import advance
from sessionize.mapping import EventMapping
from sessionize.schema import layout

T0 = 1_793_491_200_000_000  # 2026-11-01T00:00Z
HOUR = 3_600_000_000
URLS = (
    "https://shop.example/{p}?utm_source=google&utm_medium=cpc&utm_campaign=w%20s",
    "https://shop.example/{p}",
    "https://shop.example/{p}?gclid=abc{n}",
    "https://shop.example/{p}?utm_source=newsletter&utm_medium=email",
)
REFERRERS = (None, "https://www.google.com/search?q=x", "https://t.co/a", "https://b{n}.example/")
AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/1{n}.0 Safari/537.36",
    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
)
CONTENT = SessionContent(
    ping_action="ping", conversions=(Conversion("purchase", "purchase", "order.total"),)
)
OFF = EventMapping()
ON = EventMapping(
    url="page.url",
    referrer="page.referrer",
    user_agent="technical.ua",
    last=(("previous", "page.previous"),),
    session_columns=2,
    content=CONTENT,
)
SCHEMA_3 = EventMapping(
    url="page.url",
    referrer="page.referrer",
    user_agent="technical.ua",
    last=(("previous", "page.previous"),),
    session_columns=3,
    content=CONTENT,
)


def events(n: int, users: int) -> list[dict]:
    rng = random.Random(1)
    out = []
    for _ in range(n):
        k = rng.randrange(100)
        out.append(
            {
                "user_id": rng.randrange(users),
                "event_time": T0 + rng.randrange(HOUR),
                "page": f"p{k}",
                "action": "purchase" if k < 3 else "ping" if k < 30 else "view",
                "url": rng.choice(URLS).format(p=k, n=k % 7),
                "referrer": (rng.choice(REFERRERS) or "").format(n=k % 50) or None,
                "user_agent": AGENTS[k % 50 == 0].format(n=k % 30),
                "previous": f"p{k}" if k % 2 else None,
                "purchase_value_json": str(k) if k < 3 else None,
            }
        )
    return out


WEB_FIELDS = {"url": "page.url", "referrer": "page.referrer", "user_agent": "technical.user_agent"}


def job(args: argparse.Namespace) -> None:
    """The session job with and without the content columns (see the module doc)."""
    import shutil
    import tempfile
    from dataclasses import replace
    from pathlib import Path

    from bench_common import alternate_batch_jobs, input_config, warm_spark, write_input

    root = Path(tempfile.mkdtemp(prefix="sessionize-content-"))
    try:
        cfg = replace(input_config(args), web_data=True)
        write_input(cfg, str(root / "in"))
        spark = warm_spark("content", 2)
        content = SessionContent(
            ping_action="ping", conversions=(Conversion("purchase", "purchase"),)
        )
        mappings = {
            "plain (schema 1)": EventMapping(session_columns=1),
            "schema 1 reading the fields": EventMapping(**WEB_FIELDS, session_columns=1),
            "schema 3": EventMapping(**WEB_FIELDS, session_columns=3, content=content),
        }
        jobs = {name: {"mapping": mapping} for name, mapping in mappings.items()}
        seconds, cpu, events = alternate_batch_jobs(spark, root, args.hours, jobs, args.repeats)
        for name in mappings:
            print(
                f"{name}: "
                + ", ".join(f"{s:.1f}" for s in seconds[name])
                + " s wall; "
                + ", ".join(f"{s:.1f}" for s in cpu[name])
                + " s CPU"
            )
        for what, measured in (("wall", seconds), ("CPU", cpu)):
            best = {name: min(times) for name, times in measured.items()}
            print(
                f"{what}: schema 3 / plain: {best['schema 3'] / best['plain (schema 1)']:.3f}x, "
                f"schema 3 / schema 1 reading the fields: "
                f"{best['schema 3'] / best['schema 1 reading the fields']:.3f}x "
                f"({events:,} lines per run, {args.hours} hours)"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--users", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--job", action="store_true", help="time whole batch jobs instead")
    parser.add_argument("--hours", type=int, default=2)
    parser.add_argument("--events-per-hour", type=int, default=100_000)
    args = parser.parse_args()
    if args.job:
        job(args)
        return
    rows = events(args.events, args.users)
    tables = {}
    runs = (("schema 1", OFF), ("every option on", ON), ("schema 3", SCHEMA_3))
    for name, mapping in runs:
        lay = layout(mapping)
        table = pa.Table.from_pylist(
            [{c: r.get(c) for c in lay.event.names} for r in rows], lay.event
        )
        tables[name] = (lay, table)
    seconds: dict[str, list[float]] = {name: [] for name in tables}
    for _ in range(args.repeats):
        for name, (lay, table) in tables.items():
            start = time.process_time()
            advance(
                lay.state.empty_table(),
                table,
                rules=SessionRules(),
                watermark_before=None,
                watermark_after=T0 + 10 * HOUR,
                layout=lay,
            )
            seconds[name].append(time.process_time() - start)
    for name, times in seconds.items():
        print(f"{name}: " + ", ".join(f"{s:.3f}" for s in times) + " CPU s")
    best = {name: min(times) for name, times in seconds.items()}
    print(
        f"every option on / schema 1: {best['every option on'] / best['schema 1']:.2f}x, "
        f"schema 3 / schema 1: {best['schema 3'] / best['schema 1']:.2f}x "
        f"({args.events:,} events)"
    )


if __name__ == "__main__":
    main()
