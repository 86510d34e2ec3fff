"""Command line: `sessionize generate | stream | batch | demo`.

Every failure a user can cause or fix (a bad flag, no Java, an unreachable backend, a
checkpoint from other settings) ends in exactly one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

import click

from sessionize import failures
from sessionize.config import SessionRules, parse_duration, redact_uri
from sessionize.errors import ConfigError, SessionizeError


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_duration(value)
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)


class Hour(click.ParamType):
    """An hour like 2026-11-01T09 (UTC)."""

    name = "hour"

    def convert(self, value, param, ctx):
        if isinstance(value, datetime):
            return value
        for fmt in ("%Y-%m-%dT%H", "%Y-%m-%dT%H:%M", "%Y-%m-%d"):
            try:
                return datetime.strptime(value, fmt).replace(tzinfo=UTC)
            except ValueError:
                pass
        self.fail(f"'{value}' is not an hour; write it like 2026-11-01T09", param, ctx)


DURATION = Duration()
HOUR = Hour()


def rules_options(f):
    """--gap, --lateness, --close-actions: the semantics of DESIGN §3."""
    f = click.option(
        "--close-actions",
        default="browser_close",
        show_default=True,
        help="Comma-separated actions that end a session explicitly.",
    )(f)
    f = click.option(
        "--lateness",
        type=DURATION,
        default="10m",
        show_default=True,
        help="Allowed lateness: the watermark trails the max event time by this much.",
    )(f)
    f = click.option(
        "--gap",
        type=DURATION,
        default="10m",
        show_default=True,
        help="Inactivity that ends a session.",
    )(f)
    return f


def make_rules(gap: int, lateness: int, close_actions: str) -> SessionRules:
    actions = tuple(a.strip() for a in close_actions.split(",") if a.strip())
    return SessionRules(gap_us=gap, lateness_us=lateness, close_actions=actions)


def max_future_option(f):
    return click.option(
        "--max-future",
        type=DURATION,
        default="1d",
        show_default=True,
        help="Events more than this ahead of the clock at processing time are invalid.",
    )(f)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="sessionize")
@click.option("--debug", is_flag=True, help="Print the full trace of an unexpected error.")
def cli(debug: bool) -> None:
    """Sessionize website visits with PySpark, in streaming and batch, exactly once."""
    failures.DEBUG = debug


@cli.command()
@click.option("--output", help="Directory of the hourly tree to write.")
@click.option("--kafka", metavar="kafka://HOST:PORT/TOPIC", help="Publish to Kafka instead.")
@click.option("--kinesis", metavar="kinesis://STREAM?...", help="Publish to Kinesis instead.")
@click.option(
    "--rate",
    type=click.FloatRange(0, min_open=True),
    help="Lines published per second (default: as fast as the server takes them).",
)
@click.option(
    "--partitions",
    "--shards",
    "partitions",
    type=click.IntRange(1),
    help="Create the topic or stream with N partitions or shards if it is missing.",
)
@click.option("--start", type=HOUR, default="2026-11-01T00", show_default=True)
@click.option("--hours", type=click.IntRange(1), default=3, show_default=True)
@click.option("--users", type=click.IntRange(1), default=1000, show_default=True)
@click.option("--events-per-hour", type=click.IntRange(1), default=20000, show_default=True)
@click.option("--seed", type=int, default=42, show_default=True)
@click.option("--duplicate-rate", type=click.FloatRange(0, 1), default=0.01, show_default=True)
@click.option("--late-rate", type=click.FloatRange(0, 1), default=0.0, show_default=True)
@click.option("--invalid-rate", type=click.FloatRange(0, 1), default=0.0, show_default=True)
@click.option("--close-rate", type=click.FloatRange(0, 1), default=0.05, show_default=True)
@click.option("--files-per-hour", type=click.IntRange(1), default=1, show_default=True)
@click.option("--gzip", is_flag=True, help="Write .json.gz files.")
@click.option(
    "--gap",
    type=DURATION,
    default="10m",
    show_default=True,
    help="Session gap the think times are shaped around.",
)
@click.option(
    "--lateness",
    type=DURATION,
    default="10m",
    show_default=True,
    help="Allowed lateness the stream will use: late events miss it by more than this.",
)
def generate(
    output,
    kafka,
    kinesis,
    rate,
    partitions,
    start,
    hours,
    users,
    events_per_hour,
    seed,
    duplicate_rate,
    late_rate,
    invalid_rate,
    close_rate,
    files_per_hour,
    gzip,
    gap,
    lateness,
) -> None:
    """Write synthetic visit events, Hive-style by event hour, or publish them keyed by
    user_id in arrival order (each hour's files in turn, late files when they arrive)."""
    from sessionize.generator import GenerateSummary, GeneratorConfig, generate_events, write_files

    given = [o for o, v in (("--output", output), ("--kafka", kafka), ("--kinesis", kinesis)) if v]
    if len(given) != 1:
        got = " and ".join(given) or "none"
        raise click.UsageError(f"give exactly one of --output, --kafka, --kinesis (got {got})")
    if output and (rate is not None or partitions is not None):
        raise click.UsageError("--rate and --partitions/--shards go with --kafka or --kinesis")
    if gzip and not output:
        raise click.UsageError("--gzip goes with --output")

    cfg = GeneratorConfig(
        start=start,
        hours=hours,
        users=users,
        events_per_hour=events_per_hour,
        seed=seed,
        duplicate_rate=duplicate_rate,
        late_rate=late_rate,
        invalid_rate=invalid_rate,
        close_rate=close_rate,
        files_per_hour=files_per_hour,
        gzip=gzip,
        gap_us=gap,
        lateness_us=lateness,
    )
    if output:
        click.echo(f"wrote {write_files(cfg, output)}")
        return
    from sessionize.publish import publish_kafka, publish_kinesis

    summary = GenerateSummary()

    def lines():
        nonlocal summary
        for hour in generate_events(cfg):
            summary = summary + hour.summary
            for f in hour.files:
                yield from f.lines

    target = redact_uri(kafka or kinesis)
    if kafka:
        stats = publish_kafka(lines(), kafka, rate=rate, create_partitions=partitions)
    else:
        stats = publish_kinesis(lines(), kinesis, rate=rate, create_shards=partitions)
    counts = ", ".join(f"{k} {v:,}" for k, v in summary.as_dict().items() if k != "files")
    click.echo(
        f"published to {target} in {stats.seconds:.1f}s "
        f"({stats.per_second:,.0f} events/s): {counts}"
    )


@cli.command()
@click.option(
    "--input",
    "input_",
    required=True,
    help="Hourly JSON tree (recursive), kafka://HOST:PORT/TOPIC or kinesis://STREAM?...",
)
@click.option("--output", required=True, help="Output directory (any pyarrow filesystem URI).")
@click.option("--checkpoint", required=True, help="Checkpoint directory of this query.")
@click.option(
    "--state",
    default="files",
    show_default=True,
    help="files | files:PATH | postgresql://... | redis://... | dynamodb://...",
)
@rules_options
@click.option(
    "--partitions",
    type=click.IntRange(1),
    default=4,
    show_default=True,
    help="State partitions (fixed for the life of a checkpoint).",
)
@click.option("--max-files-per-trigger", type=click.IntRange(1), default=None)
@click.option(
    "--trigger",
    default="available-now",
    show_default=True,
    help="available-now (process what is there, then exit) or processing-time=30s.",
)
@click.option(
    "--job",
    default="sessionize",
    show_default=True,
    help="Job name: isolates jobs sharing one state store.",
)
@click.option(
    "--source-option",
    "source_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Option passed to the Kafka/Kinesis source (repeatable).",
)
@max_future_option
def stream(
    input_,
    output,
    checkpoint,
    state,
    gap,
    lateness,
    close_actions,
    partitions,
    max_files_per_trigger,
    trigger,
    job,
    source_options,
    max_future,
) -> None:
    """Sessionize a stream of visit events, exactly once, until the trigger ends."""
    from sessionize.stream import StreamOptions, parse_trigger, run_stream

    parse_trigger(trigger)  # reject a bad trigger before Spark starts
    opts = StreamOptions(
        input=input_,
        output=output,
        checkpoint=checkpoint,
        state=state,
        rules=make_rules(gap, lateness, close_actions),
        partitions=partitions,
        max_files_per_trigger=max_files_per_trigger,
        trigger=trigger,
        job=job,
        source_options=_key_values(source_options),
        max_future_us=max_future,
    )
    run_stream(opts, on_batch=click.echo)


@cli.command()
@click.option(
    "--input", "input_", required=True, help="Hourly JSON tree (event_date=/event_hour=)."
)
@click.option("--output", required=True, help="Output directory (same layout as the stream).")
@click.option(
    "--state",
    default="files",
    show_default=True,
    help="files (under OUTPUT/_state) | files:PATH | postgresql://... | redis://... | dynamodb://...",
)
@click.option("--from", "from_", type=HOUR, required=True, help="First hour, e.g. 2026-11-01T09.")
@click.option("--to", "to", type=HOUR, default=None, help="Last hour (inclusive; default: --from).")
@rules_options
@click.option(
    "--partitions",
    type=click.IntRange(1),
    default=4,
    show_default=True,
    help="State partitions (fixed for the life of a state).",
)
@click.option("--job", default="sessionize", show_default=True)
@max_future_option
def batch(
    input_, output, state, from_, to, gap, lateness, close_actions, partitions, job, max_future
):
    """Sessionize hour by hour; rerunning an earlier hour reprocesses from it."""
    from sessionize.batch import BatchOptions, run_batch

    opts = BatchOptions(
        input=input_,
        output=output,
        start=from_,
        end=to or from_,
        state=state,
        rules=make_rules(gap, lateness, close_actions),
        partitions=partitions,
        job=job,
        max_future_us=max_future,
    )
    run_batch(opts, on_hour=click.echo)


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
def demo(workdir, hours, users, events_per_hour) -> None:
    """Generate a few hours of visits and sessionize them with the files state store."""
    from sessionize.demo import run_demo

    run_demo(workdir, hours=hours, users=users, events_per_hour=events_per_hour)


def _key_values(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--source-option '{pair}': write it as KEY=VALUE")
        out[key] = value
    return out


def main(argv: list[str] | None = None) -> None:
    """Entry point: one clear line on stderr and exit code 2 for every failure."""
    failures.DEBUG = False
    with failures.StderrLog():
        _run(argv)


def _run(argv: list[str] | None) -> None:
    try:
        cli.main(args=argv, prog_name="sessionize", standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("sessionize: interrupted; run the same command again to resume", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        hint = f" (see sessionize {exc.ctx.info_name} --help)" if exc.ctx else ""
        click.echo(f"sessionize: error: {exc.format_message()}{hint}", err=True)
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except SessionizeError as exc:
        failures.report(str(exc), exc)
        sys.exit(2)
    except Exception as exc:  # from Spark, a backend or a bug: still one line, trace kept
        failures.report(failures.describe(exc), exc, unexpected=True)
        sys.exit(2)
