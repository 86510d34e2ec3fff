"""Command line: `sessionize generate | stream | batch | demo | report | status | history |
rewind | maintain | state | jvm-archive`.

Every failure a user can cause or fix (a bad flag, no Java, an unreachable backend, a
checkpoint from other settings) ends in exactly one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import click

from sessionize.cli import failures, generate, maintain, params, reprocess
from sessionize.cli.fields import given_settings, mapping_options, pop_mapping
from sessionize.cli.hours_bar import HoursBar
from sessionize.cli.params import DURATION, HOUR, count_option, make_rules, rules_options
from sessionize.errors import ConfigError


def max_future_option(f):
    return click.option(
        "--max-future",
        type=DURATION,
        default="1d",
        show_default=True,
        help="Events more than this ahead of the clock at processing time are invalid.",
    )(f)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from sessionize import __version__, spark_version

    click.echo(f"sessionize {__version__} ({spark_version.describe()})")
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show sessionize's version and the PySpark it runs on, then exit.",
)
@click.option("--debug", is_flag=True, help="Print the full trace of an unexpected error.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Sessionize website visits with PySpark, in streaming and batch, exactly once."""
    failures.DEBUG = debug
    failures.COMMAND = ctx.invoked_subcommand


_JOB_OPTIONS = (
    (
        "--state",
        {
            "default": "files",
            "show_default": True,
            "help": "files (under the checkpoint, or OUTPUT/_state in batch) | files:PATH | "
            "postgresql://... | redis://... | dynamodb://... | spark-rocksdb | spark-hdfs (stream)",
        },
    ),
    (
        "--progress-log",
        {
            "metavar": "PATH",
            "default": None,
            "help": (
                "JSON line per batch (default: CHECKPOINT/progress.jsonl, OUTPUT/_progress.jsonl)."
            ),
        },
    ),
    (
        "--partitions",
        {
            "type": click.IntRange(1),
            "default": 4,
            "show_default": True,
            "help": "State partitions (fixed for the life of a state).",
        },
    ),
    (
        "--job",
        {
            "default": "sessionize",
            "show_default": True,
            "help": "Job name: isolates jobs sharing one state store.",
        },
    ),
    (
        "--output-format",
        {
            "type": click.Choice(["parquet", "delta"]),
            "default": "parquet",
            "show_default": True,
            "help": "Hive-partitioned Parquet directories, or Delta Lake tables.",
        },
    ),
)


def job_options(f):
    """--state, the session rules, --partitions and --job: what a state is built with."""
    for name, settings in reversed(_JOB_OPTIONS):
        f = click.option(name, **settings)(f)
    return rules_options(f)


def input_format_option(f):
    return click.option(
        "--input-format",
        type=click.Choice(["json", "parquet"]),
        default="json",
        show_default=True,
        help="Files of the input tree: JSON lines, or Parquet (typed columns at the fields).",
    )(f)


def spark_options(f):
    """--master, --remote and --conf: the user's Spark settings (over spark-submit's and
    ours)."""
    f = click.option(
        "--remote",
        metavar="sc://HOST:PORT",
        help="Run through a Spark Connect server instead of a Spark driver in this process.",
    )(f)
    f = click.option(
        "--conf",
        "spark_conf",
        multiple=True,
        metavar="KEY=VALUE",
        help="Spark setting (repeatable), e.g. --conf spark.executor.memory=4g.",
    )(f)
    return click.option(
        "--master", help="Spark master URL (default: local[*], or spark-submit's)."
    )(f)


def job_settings(
    state,
    gap,
    lateness,
    close_actions,
    max_duration,
    timezone,
    split_at_midnight,
    user_ttl,
    attribution_lookback,
    revise_within,
    partitions,
    job,
    progress_log,
    output_format,
    master,
    spark_conf,
    remote,
    **same,
) -> dict:
    """The options of `job_options` and `spark_options` as StreamOptions/BatchOptions fields,
    and the command's options named as their field (`same`)."""
    return {
        "state": state,
        "rules": make_rules(
            gap,
            lateness,
            close_actions,
            max_duration,
            timezone,
            split_at_midnight,
            user_ttl,
            attribution_lookback,
            revise_within,
        ),
        "partitions": partitions,
        "job": job,
        "progress_log": progress_log,
        "output_format": output_format,
        "master": master,
        "remote": remote,
        "spark_conf": _key_values(spark_conf, "--conf"),
        **same,
    }


@cli.command()
@click.option(
    "--input",
    "input_",
    required=True,
    help="Hourly tree (recursive), kafka://HOST:PORT/TOPIC or kinesis://STREAM?...",
)
@click.option(
    "--output",
    required=True,
    help="Output directory (any pyarrow filesystem URI), postgresql://USER@HOST/DB?schema=S "
    "or kafka://HOST:PORT/PREFIX topics.",
)
@click.option("--checkpoint", required=True, help="Checkpoint directory of this query.")
@job_options
@spark_options
@count_option(
    "--max-files-per-trigger",
    1,
    "Files of a file input per micro-batch, in modification-time order (default: all).",
)
@click.option(
    "--trigger",
    default="available-now",
    show_default=True,
    help="available-now (process what is there, then exit) or processing-time=30s.",
)
@params.metrics_options
@count_option(
    "--compact-every",
    1,
    "Local Parquet outputs: after every N-th batch, before the next one starts, move "
    "the published batches into files of about 128 MB per session_date (per publish day "
    "for the other outputs) under OUTPUT/_compacted/; OUTPUT/NAME then shows them and the "
    "other batches (default: never; a stopped job: `sessionize maintain --compact`).",
    metavar="N",
)
@click.option(
    "--source-option",
    "source_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Option passed to the Kafka/Kinesis source (repeatable).",
)
@click.option(
    "--open-sessions",
    is_flag=True,
    default=False,
    help="Also keep `open_sessions`: the sessions not yet emitted, replaced by user each batch "
    "(Delta, PostgreSQL or Kafka outputs; the store engine).",
)
@max_future_option
@mapping_options
@input_format_option
def stream(input_, source_options, max_future, input_format, **options) -> None:
    """Sessionize a stream of visit events, exactly once, until the trigger ends."""
    from sessionize.commands.stream import StreamOptions, run_stream

    params.check_metrics_host(options["metrics_port"])

    mapping = pop_mapping(options)
    opts = StreamOptions(
        input=input_,
        source_options=_key_values(source_options, "--source-option"),
        max_future_us=max_future,
        mapping=replace(mapping, input_format=input_format),
        explicit=given_settings(),
        **job_settings(**options),
    )
    run_stream(opts, on_batch=click.echo)


@cli.command()
@click.option("--input", "input_", required=True, help="Hourly tree (event_date=/event_hour=).")
@click.option(
    "--output",
    required=True,
    help="Output directory (same layout as the stream), postgresql://USER@HOST/DB?schema=S "
    "or kafka://HOST:PORT/PREFIX?staging=DIR.",
)
@click.option("--from", "from_", type=HOUR, required=True, help="First hour, e.g. 2026-11-01T09.")
@click.option("--to", "to", type=HOUR, help="Last hour (inclusive; default: --from).")
@click.option(
    "--input-timezone",
    default="UTC",
    show_default=True,
    metavar="ZONE",
    help="The IANA zone whose wall hours name the hour folders (and --from, --to).",
)
@job_options
@spark_options
@max_future_option
@mapping_options
@input_format_option
def batch(input_, from_, to, max_future, input_format, **options):
    """Sessionize hour by hour; rerunning an earlier hour reprocesses from it."""
    from sessionize.commands.batch import BatchOptions, run_batch

    mapping = pop_mapping(options)
    opts = BatchOptions(
        input=input_,
        start=from_,
        end=to or from_,
        max_future_us=max_future,
        mapping=replace(mapping, input_format=input_format),
        explicit=given_settings(extra=("input_timezone",)),
        **job_settings(**options),
    )
    if not sys.stdout.isatty():
        run_batch(opts, on_hour=click.echo)
        return
    with HoursBar() as bar:
        run_batch(opts, on_hour=bar.line, on_start=bar.start)


@cli.command()
@click.option(
    "--workdir",
    default="sessionize-demo",
    show_default=True,
    help="Where the demo writes its input, output and checkpoint (recreated).",
)
@click.option("--hours", type=click.IntRange(1), default=3, show_default=True)
@click.option("--users", type=click.IntRange(1), default=2000, show_default=True)
@click.option("--events-per-hour", type=click.IntRange(1), default=20000, show_default=True)
@spark_options
def demo(workdir, spark_conf, **settings) -> None:
    """Generate a few hours of visits and sessionize them with the files state store."""
    from sessionize.commands.demo import run_demo

    run_demo(workdir, spark_conf=_key_values(spark_conf, "--conf"), **settings)


@cli.command()
@click.option("--checkpoint", help="Checkpoint of a stream job.")
@click.option("--output", help="Output of a batch job (instead of --checkpoint).")
@click.option("--input", "input_", help="Input (default: the last run's).")
@click.option(
    "--source-option",
    "source_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Option of the Kafka/Kinesis source, to reach the broker (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object, for scripts.")
def status(checkpoint, output, input_, source_options, as_json) -> None:
    """Is a driver running, what did it commit last, how far is the input ahead."""
    import json

    from sessionize.commands.status import batch_status, describe, stream_status

    if (checkpoint is None) == (output is None):
        raise click.UsageError("give --checkpoint (a stream) or --output (a batch job)")
    if checkpoint:
        options = _key_values(source_options, "--source-option")
        result = stream_status(checkpoint, input=input_, source_options=options)
    else:
        result = batch_status(output)
    click.echo(json.dumps(result, indent=2) if as_json else "\n".join(describe(result)))


@cli.command()
@params.job_output_options(
    "Checkpoint of a stream job: its progress log is CHECKPOINT/progress.jsonl."
)
@click.option(
    "--progress-log",
    help="Progress log to plot (default: CHECKPOINT/progress.jsonl, else OUTPUT/_progress.jsonl).",
)
@click.option("--to", "to", required=True, help="HTML file to write (one self-contained page).")
@click.option(
    "--with-bots",
    is_flag=True,
    help="Count bots' sessions in the session charts (left out by default).",
)
def report(output, checkpoint, progress_log, to, with_bots) -> None:
    """Write an HTML report with plots of the sessions, late and invalid events, and the
    job's progress; it opens offline in any browser."""
    from sessionize.report import build_report

    result = build_report(
        output, to, checkpoint=checkpoint, progress_log=progress_log, with_bots=with_bots
    )
    if result.progress_missing:
        click.echo(f"note: {result.progress_missing}; the progress plots say so", err=True)
    left_out = f", {result.bots_left_out:,} bot sessions left out" if result.bots_left_out else ""
    click.echo(
        f"wrote {result.path} ({result.bytes / 1e3:,.0f} kB, {result.sessions:,} sessions"
        f"{left_out}, {result.seconds:.1f}s)"
    )


@cli.command("jvm-archive")
@click.option("--remove", is_flag=True, help="Delete the recorded archives instead.")
def jvm_archive(remove: bool) -> None:
    """Record the classes a Spark driver loads into an archive that later sessions map
    (about a minute, about 175 MB under ~/.cache/sessionize): every command then starts
    2-4 s sooner."""
    from sessionize.commands import jvm_archive as archive

    if remove:
        archive.remove(say=click.echo)
    else:
        archive.record(say=click.echo)


cli.add_command(generate.generate)
cli.add_command(reprocess.history)
cli.add_command(reprocess.rewind)
cli.add_command(maintain.maintain)


def _key_values(pairs: tuple[str, ...], flag: str) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} '{pair}': write it as KEY=VALUE")
        out[key] = value
    return out


def main(argv: list[str] | None = None) -> None:
    """Entry point: one clear line on stderr and exit code 2 for every failure."""
    import warnings

    from sessionize.errors import MappingWarning

    # The run prints these as lines of its own: Python's copy would repeat them.
    warnings.filterwarnings("ignore", category=MappingWarning)
    failures.DEBUG, failures.COMMAND = False, None
    with failures.StderrLog():
        _run(argv)


def _run(argv: list[str] | None) -> None:
    code = failures.reported(lambda: _command(argv))
    if code:
        sys.exit(code)


def _command(argv: list[str] | None) -> None:
    """The command, with click's own outcomes turned into the ones `failures.reported`
    answers (Ctrl-C) or lets pass (an exit code)."""
    try:
        cli.main(args=argv, prog_name="sessionize", standalone_mode=False)
    except click.exceptions.Abort:
        raise KeyboardInterrupt from None
    except click.UsageError as exc:
        hint = f" (see sessionize {exc.ctx.info_name} --help)" if exc.ctx else ""
        click.echo(f"sessionize: error: {exc.format_message()}{hint}", err=True)
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


def _add_state_tools() -> None:
    from sessionize.cli.state import state

    cli.add_command(state)


def _spell_defaults(command: click.Command) -> None:
    """Give every option without a default the value it gets when left out (a flag: False,
    any other: None, which click reads as no value): click keeps a private sentinel there,
    which the generated reference (mkdocs-click) printed as `Sentinel.UNSET`."""
    # `--help` too: click makes it once per command, on first use, and keeps it.
    helper = command.get_help_option(click.Context(command, help_option_names=["-h", "--help"]))
    for param in [*command.params, *([helper] if helper else [])]:
        if isinstance(param, click.Option) and "UNSET" in repr(param.default):
            param.default = False if param.is_flag and not param.multiple else None
    for sub in getattr(command, "commands", {}).values():
        _spell_defaults(sub)


_add_state_tools()
_spell_defaults(cli)
