"""Shared by the examples: run a processor on Spark over a directory of micro-batch files,
or in memory over files or a built-in sample; print what it wrote."""

from __future__ import annotations

import argparse

import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq

from sessionize import stateful
from sessionize.cli import failures
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
    parser.add_argument("--input", help="on Spark: a directory of JSON-lines files, "
                        "kafka://HOST:PORT/TOPIC or kinesis://STREAM, streamed")  # fmt: skip
    parser.add_argument("--output", help="where the outputs go (Parquet, one dir per output)")
    parser.add_argument("--checkpoint", help="the stream's checkpoint")
    parser.add_argument("--state", default="files",
                        help="files (under the checkpoint) or a server URI")  # fmt: skip
    parser.add_argument("--partitions", type=int, default=4, help="state partitions")
    parser.add_argument("--files-per-trigger", type=int,
                        help="a directory's files per micro-batch (default 4)")  # fmt: skip
    parser.add_argument("--source-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a source option (docs/reference/inputs.md), repeatable")  # fmt: skip
    args = parser.parse_args()
    if args.input and not (args.output and args.checkpoint):
        parser.error("--input needs --output and --checkpoint")
    args.options = {}
    for pair in args.source_option:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            parser.error(f"--source-option '{pair}': write it as KEY=VALUE")
        args.options[key] = value
    if args.input and not args.input.startswith(("kafka://", "kinesis://")):
        args.options.setdefault("maxFilesPerTrigger", str(args.files_per_trigger or 4))
    elif args.files_per_trigger is not None:
        parser.error("--files-per-trigger is for a directory; Kafka and Kinesis take "
                     "--source-option maxRecordsPerTrigger=N")  # fmt: skip
    return args


def main(
    description: str, processor: stateful.Processor, sample: list[pa.Table],
    schema: pa.Schema, source_schema: pa.Schema, lateness: str = "0s",
) -> None:  # fmt: skip
    """The example's command line: with --input, a stream on Spark with the state in the
    store, its records read by `stateful.source` with `source_schema` (a record that does
    not fit goes to the output `invalid`); otherwise a run in memory over the files given,
    or the sample."""
    args = arguments(description)
    if not args.input:
        show(stateful.run_local(processor, read_batches(args.files, schema) if args.files
                                else sample))  # fmt: skip
        return
    # As the `sessionize` command does: what Spark's JVM and workers print goes to a log
    # file, so that a failure is one line on stderr (the log is kept when it holds a trace).
    failures.COMMAND = "stream"  # what to do after a failure: run it again to resume
    with failures.StderrLog():
        code = failures.reported(lambda: _stream(args, processor, source_schema, lateness))
    if code:
        raise SystemExit(code)


def _stream(args: argparse.Namespace, processor: stateful.Processor, source_schema: pa.Schema,
            lateness: str) -> None:  # fmt: skip
    """The stream on Spark, until its trigger ends it."""
    from sessionize.spark_session import get_spark

    spark = get_spark(type(processor).__name__, shuffle_partitions=args.partitions)
    rows = stateful.source(spark, args.input, source_schema, options=args.options)
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
