"""`sessionize demo`: generate a few hours of visits, stream them to sessions, summarize,
and write the HTML report."""

from __future__ import annotations

import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

import click
import numpy as np

from sessionize.commands.stream import StreamOptions, run_stream
from sessionize.config import SessionRules
from sessionize.content import SessionContent, parse_conversion
from sessionize.errors import ConfigError
from sessionize.generate.writer import GeneratorConfig, write_files
from sessionize.mapping import NEWEST_COLUMNS, EventMapping
from sessionize.report import build_report
from sessionize.report.traffic import load_traffic

# The traffic options that read the generator's web data (docs/reference/inputs.md).
WEB_FIELDS = {"url": "page.url", "referrer": "page.referrer", "user_agent": "technical.user_agent"}
WEB_PING, WEB_CONVERSION = "ping", "purchase=purchase,value=order.value"


def web_mapping() -> EventMapping:
    """The event mapping that reads the web data of `generate --web-data` into the traffic,
    engagement, conversion and bot columns of `sessions`.

    Example:
        >>> web_mapping().url
        'page.url'
    """
    carried = SessionContent(ping_action=WEB_PING, conversions=(parse_conversion(WEB_CONVERSION),))
    return EventMapping(
        url=WEB_FIELDS["url"],
        referrer=WEB_FIELDS["referrer"],
        user_agent=WEB_FIELDS["user_agent"],
        session_columns=NEWEST_COLUMNS,
        content=carried,
    )


def run_demo(
    workdir: str,
    *,
    hours: int,
    users: int,
    events_per_hour: int,
    master: str | None = None,
    spark_conf: dict[str, str] | None = None,
    remote: str | None = None,
) -> dict:
    root = Path(workdir).absolute()
    _clear(root)
    mapping = web_mapping()
    cfg = GeneratorConfig(
        start=datetime(2026, 11, 1, tzinfo=UTC),
        hours=hours,
        users=users,
        events_per_hour=events_per_hour,
        seed=7,
        duplicate_rate=0.01,
        late_rate=0.002,
        invalid_rate=0.001,
        close_rate=0.1,
        files_per_hour=4,
        web_data=True,
    )
    click.echo(f"generating {hours} hours of visits of {users:,} users into {root}/input")
    generated = write_files(cfg, str(root / "input"))
    opts = StreamOptions(
        input=str(root / "input"),
        output=str(root / "output"),
        checkpoint=str(root / "checkpoint"),
        state="files",
        rules=SessionRules(),
        mapping=mapping,
        partitions=4,
        max_files_per_trigger=2,
        master=master,
        spark_conf=spark_conf or {},
        remote=remote,
    )
    click.echo("streaming with the files state store, 2 files per micro-batch:")
    t0 = time.perf_counter()
    records = run_stream(opts, on_batch=click.echo)
    elapsed = time.perf_counter() - t0
    last = records[-1]
    t = last["totals"]
    summary = {
        "lines read": t["records"],
        "invalid": t["invalid"],
        "events in": t["events_in"],
        "late": t["late"],
        "duplicates dropped": t["duplicates"],
        "sessions": t["sessions_out"],
        "open sessions left": last["batch"]["open_sessions"],
        "lines/s in batches": round(t["records"] / sum(r["duration_s"] for r in records)),
        "wall seconds": round(elapsed),
    }
    click.echo("")
    click.echo(f"generated: {generated}")
    click.echo("summary of the stream:")
    for key, value in summary.items():
        click.echo(f"  {key:<21} {value:>12,}")
    click.echo(f"outputs: {opts.output}/{{sessions,page_views,late_events,invalid_events}}")
    _echo_traffic(opts.output)
    report = build_report(opts.output, str(root / "report.html"), checkpoint=opts.checkpoint)
    click.echo(f"report: {report.path} (open it in a browser)")
    return summary


# What a demo writes in its --workdir: the only entries it deletes there before a new run.
_DEMO_ENTRIES = {"input", "output", "checkpoint", "report.html"}


def _clear(root: Path) -> None:
    """Recreate a demo's workdir; a directory holding anything a demo did not write (a
    mistyped `--workdir .` or `~`) is refused, never deleted."""
    if root.exists() and not root.is_dir():
        raise ConfigError(f"--workdir {root} is not a directory: give a new one")
    found = set(os.listdir(root)) if root.is_dir() else set()
    foreign = sorted(found - _DEMO_ENTRIES)
    if foreign:
        raise ConfigError(
            f"--workdir {root} holds {', '.join(foreign[:3])}{', ...' * (len(foreign) > 3)}, "
            "which a demo did not write: give a new or empty directory (a demo deletes the "
            "input, output and checkpoint of its workdir before it runs)"
        )
    for name in sorted(found):
        path = root / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def _echo_traffic(output: str) -> None:
    """Sessions by channel, bounce rate and purchases, where the sessions carry them."""
    traffic = load_traffic(output)
    if traffic.channels is None or traffic.rates is None:
        return
    total = sum(traffic.channels.values)
    shares = ", ".join(
        f"{label} {n / total:.0%}"
        for label, n in zip(traffic.channels.labels, traffic.channels.values, strict=True)
    )
    bounced = float(np.nansum(traffic.rates.bounce_rate * traffic.rates.sessions))
    click.echo(f"sessions by channel: {shares}")
    click.echo(f"bounce rate: {bounced / traffic.rates.sessions.sum():.0%}")
    if traffic.bots is not None:
        click.echo(f"bot sessions: {traffic.bots.as_dict().get('bot', 0):,}")
    if traffic.conversions is not None:
        for name in traffic.conversions.names:
            count = sum(traffic.conversions.counts[name])
            value = sum(traffic.conversions.values[name])
            click.echo(f"{name}: {count:,} conversions worth {value:,.2f}")
