"""How long `sessionize rewind` takes against the number of batches it undoes.

One stream over small files (one file per micro-batch), then for each count K a copy of its
checkpoint and outputs rewound by K batches, timed in this process (Spark is not involved):

    .venv/bin/python benchmarks/rewind.py --hours 6 --files-per-hour 4 --undo 1 5 10 20 29
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from sessionize.commands.rewind import rewind
from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.generate.writer import GeneratorConfig, write_files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=int, default=6)
    ap.add_argument("--files-per-hour", type=int, default=4)
    ap.add_argument("--output-format", default="parquet")
    ap.add_argument("--undo", type=int, nargs="+", default=[1, 5, 10, 20])
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rewind-bench-"))
    cfg = GeneratorConfig(
        start=datetime(2026, 11, 1, tzinfo=UTC),
        hours=args.hours,
        users=40,
        events_per_hour=120,
        files_per_hour=args.files_per_hour,
        late_rate=0.01,
        seed=3,
    )
    write_files(cfg, str(root / "in"))
    opts = StreamOptions(
        input=str(root / "in"),
        output=str(root / "run" / "out"),
        checkpoint=str(root / "run" / "chk"),
        partitions=4,
        max_files_per_trigger=1,
        output_format=args.output_format,
    )
    t0 = time.perf_counter()
    last = run_stream(opts, on_batch=lambda _: None)[-1]["version"]
    print(f"stream: {last + 1} batches in {time.perf_counter() - t0:.0f}s")
    for k in args.undo:
        if k > last + 1:
            continue
        copy = root / f"undo-{k}"
        shutil.copytree(root / "run", copy)
        paths_file = copy / "chk" / "sessionize-paths.json"
        paths = json.loads(paths_file.read_text())
        paths_file.write_text(json.dumps({**paths, "output": str(copy / "out")}))
        t0 = time.perf_counter()
        rewind(str(copy / "chk"), last - k, say=lambda _: None)
        print(f"undo {k:3d} batches: {time.perf_counter() - t0:.2f}s")
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
