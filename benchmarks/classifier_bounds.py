"""What a hostile user agent or referrer host costs the session classifiers, against an
ordinary one: bot detection (`logic.bots.is_bot`) and the channel's site lists
(`logic.channel.is_kind`), in one process, no Spark.

    .venv/bin/python benchmarks/classifier_bounds.py [--ordinary 2000 --hostile 100 --repeats 5]

For each classifier: the CPU time per ordinary distinct value (a batch of `--ordinary`
values), then what `--hostile` distinct hostile values (1 MB user agents, hosts of 40,000
labels) add to that batch, per hostile value, and their ratio: how many ordinary values one
hostile value costs (a batch's fixed cost, such as compiling the regular expressions, is
in neither; a figure near 0, or below, is within the noise of the ordinary batch). For
comparison, CrawlerDetect's own matcher (Python's `re`) on a 2 KB user agent. Caches are
emptied before each measure; the best of `--repeats` is kept.
"""

from __future__ import annotations

import argparse
import time

import pyarrow as pa

from sessionize.logic import bots, channel

BROWSER = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/{n}.0.0.0 Safari/537.36"
)
HOSTILE_AGENTS = {
    "1 MB of 'a'": "a" * (1 << 20),
    "1 MB of 'a '": "a " * (1 << 19),
    "1 MB of a browser's agent": (BROWSER * 10_000)[: 1 << 20],
}
HOSTILE_HOSTS = {
    "'a.' x 40,000 + google.com": "a." * 40_000 + "google.com",
    "'a.' x 120 + google.com (252 chars)": "a." * 120 + "google.com",
}


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        bots._judged.clear()
        channel._listed.cache_clear()
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ordinary", type=int, default=2000)
    parser.add_argument("--hostile", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n, k, r = args.ordinary, args.hostile, args.repeats

    agents = [BROWSER.format(n=i) for i in range(n)]
    ordinary = best(lambda: bots.is_bot(pa.array(agents)), r)
    per = ordinary / n
    print(f"bots: {per * 1e6:.1f} us per ordinary user agent ({n} distinct in a batch)")
    for name, ua in HOSTILE_AGENTS.items():
        batch = pa.array([*agents, *(f"{i} {ua}" for i in range(k))])
        each = (best(lambda batch=batch: bots.is_bot(batch), r) - ordinary) / k
        print(f"  {name}: {each * 1e3:.3f} ms each, {each / per:.1f} ordinary agents")

    from crawlerdetect import CrawlerDetect

    start = time.process_time()
    CrawlerDetect().is_crawler("a" * 2048)
    library = time.process_time() - start
    print(
        f"  CrawlerDetect's own matcher, 2 KB of 'a': {library * 1e3:.0f} ms, "
        f"{library / per:.0f} ordinary agents"
    )

    hosts = [f"www{i}.example{i % 97}.com" for i in range(n)]

    def kinds(sources):
        return [channel.is_kind(s, k) for s in sources for k in ("search", "social")]

    ordinary = best(lambda: kinds(hosts), r)
    per = ordinary / n
    print(f"channel lists: {per * 1e6:.1f} us per ordinary host ({n} distinct)")
    for name, host in HOSTILE_HOSTS.items():
        batch = [*hosts, *(f"b{i}{host}" for i in range(k))]
        each = (best(lambda batch=batch: kinds(batch), r) - ordinary) / k
        print(f"  {name}: {each * 1e6:.1f} us each, {each / per:.1f} ordinary hosts")


if __name__ == "__main__":
    main()
