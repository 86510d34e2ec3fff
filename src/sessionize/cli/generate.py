"""`sessionize generate`: synthetic visit events, as files or published to Kafka or Kinesis
(the generator: sessionize/generate/)."""

from __future__ import annotations

import click

from sessionize.cli.params import DURATION, HOUR
from sessionize.redaction import redact_uri


@click.command()
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
    "--rule-data",
    is_flag=True,
    help="Add data for the session rules: 2.5 h visits, visits across local midnights, "
    "utm.campaign changing mid-visit, a per-event gap_s (without it, the data is unchanged).",
)
@click.option(
    "--web-data",
    is_flag=True,
    help="Add what a web tracker sends: page.url with UTM parameters and gclids, "
    "page.referrer, technical.user_agent (a few percent bots), page pings (action ping) and "
    "purchases (action purchase, order.value); without it, the data is unchanged.",
)
@click.option(
    "--identity-data",
    is_flag=True,
    help="Key events by an anonymous id (anonymous_id: a device, some shared, some users "
    "on two) and send user_id (a string) only while logged in: logins mid-visit, "
    "remembered, logouts; with --web-data also campaign and direct visits to attribute; "
    "without it, the data is unchanged.",
)
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
def generate(output, kafka, kinesis, rate, partitions, gap, lateness, **config) -> None:
    """Write synthetic visit events, Hive-style by event hour, or publish them keyed by
    user_id in arrival order (each hour's files in turn, late files when they arrive)."""
    from sessionize.generate.writer import (
        GenerateSummary,
        GeneratorConfig,
        generate_events,
        write_files,
    )

    given = [o for o, v in (("--output", output), ("--kafka", kafka), ("--kinesis", kinesis)) if v]
    if len(given) != 1:
        got = " and ".join(given) or "none"
        raise click.UsageError(f"give exactly one of --output, --kafka, --kinesis (got {got})")
    if output and (rate is not None or partitions is not None):
        raise click.UsageError("--rate and --partitions/--shards go with --kafka or --kinesis")
    if config["gzip"] and not output:
        raise click.UsageError("--gzip goes with --output")

    cfg = GeneratorConfig(**config, gap_us=gap, lateness_us=lateness)
    if output:
        click.echo(f"wrote {write_files(cfg, output)}")
        return
    from sessionize.generate.publish import publish_kafka, publish_kinesis

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
