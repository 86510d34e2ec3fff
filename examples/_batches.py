"""Shared by the examples: run a processor on Spark over a directory of micro-batch files,
or in memory over files or a built-in sample; print what it wrote."""

from __future__ import annotations

import argparse

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq

from sessionize import stateful
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


def arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("files", nargs="*", help="in memory: one micro-batch per file")
    parser.add_argument("--input", help="on Spark: a directory of JSON-lines files, streamed")
    parser.add_argument("--output", help="where the outputs go (Parquet, one dir per output)")
    parser.add_argument("--checkpoint", help="the stream's checkpoint")
    parser.add_argument("--state", default="files",
                        help="files (under the checkpoint) or a server URI")  # fmt: skip
    parser.add_argument("--partitions", type=int, default=4, help="state partitions")
    parser.add_argument("--files-per-trigger", type=int, default=4,
                        help="input files per micro-batch")  # fmt: skip
    args = parser.parse_args()
    if args.input and not (args.output and args.checkpoint):
        parser.error("--input needs --output and --checkpoint")
    return args


def main(
    description: str, processor: stateful.Processor, sample: list[pa.Table],
    schema: pa.Schema, ddl: str, lateness: str = "0s",
) -> None:  # fmt: skip
    """The example's command line: with --input, a stream on Spark with the state in the
    store; otherwise a run in memory over the files given, or the sample."""
    args = arguments(description)
    if not args.input:
        show(stateful.run_local(processor, read_batches(args.files, schema) if args.files
                                else sample))  # fmt: skip
        return
    from sessionize.spark_session import get_spark

    spark = get_spark(type(processor).__name__, shuffle_partitions=args.partitions)
    rows = (
        spark.readStream.schema(ddl).option("maxFilesPerTrigger", args.files_per_trigger)
        .json(args.input)
    )  # fmt: skip
    run = stateful.start(
        rows, processor, output=args.output, checkpoint=args.checkpoint, state=args.state,
        partitions=args.partitions, lateness=lateness, on_batch=print,
    )  # fmt: skip
    run.wait()


def show(run: LocalRun) -> None:
    for name in sorted(run.outputs):
        rows = run.output(name)
        print(f"{name}: {rows.num_rows} row(s)")
        for row in rows.to_pylist():
            print("  ", row)
    if run.counters:
        print("counters:", run.counters)
