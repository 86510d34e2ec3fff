"""A process that compacts a local Parquet output: `python -m tests.sinks.compact_proc ROOT UPTO`.
Crash tests stop it at a pause point (SESSIONIZE_PAUSE_AT) and kill it."""

from __future__ import annotations

import sys

from sessionize.sinks.parquet import ParquetSink

if __name__ == "__main__":
    ParquetSink(sys.argv[1]).compact(upto=int(sys.argv[2]))
