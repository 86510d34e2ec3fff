"""Shared by the examples: read micro-batches from files, print a run's outputs."""

from __future__ import annotations

import argparse

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq

from sessionize.stateful import LocalRun


def read_batches(paths: list[str], schema: pa.Schema) -> list[pa.Table]:
    """One micro-batch per file: Parquet, or JSON lines read with `schema`'s types."""
    batches = []
    for path in paths:
        if path.endswith(".parquet"):
            batches.append(pq.read_table(path).select(schema.names).cast(schema))
        else:
            options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
            batches.append(pj.read_json(path, parse_options=options))
    return batches


def files_or_sample(description: str, sample: list[pa.Table], schema: pa.Schema) -> list[pa.Table]:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("files", nargs="*", help="one micro-batch per file (JSON lines, Parquet)")
    args = parser.parse_args()
    return read_batches(args.files, schema) if args.files else sample


def show(run: LocalRun) -> None:
    for name in sorted(run.outputs):
        rows = run.output(name)
        print(f"{name}: {rows.num_rows} row(s)")
        for row in rows.to_pylist():
            print("  ", row)
    if run.counters:
        print("counters:", run.counters)
