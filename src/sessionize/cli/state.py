"""`sessionize state inspect | export | migrate | repartition | import`: tools for the state
of a stopped job, found from its checkpoint (stream) or its output (batch)."""

from __future__ import annotations

import click

from sessionize.cli.params import count_option
from sessionize.redaction import redact_uri


def _job_options(f):
    f = click.option(
        "--job",
        help="Job name in the state (batch mode; default sessionize). With --checkpoint: "
        "a processor's follow-on step (JOB.NAME).",
    )(f)
    f = click.option(
        "--state",
        help="The job's state (default: the checkpoint's record, or OUTPUT/_state); needed "
        "when the checkpoint records it without its password.",
    )(f)
    f = click.option("--output", help="Output of a batch job.")(f)
    return click.option("--checkpoint", help="Checkpoint of a stream job.")(f)


def _locate(checkpoint, output, state, job):
    from sessionize.commands.statetools.job import locate

    if (checkpoint is None) == (output is None):
        raise click.UsageError("give --checkpoint (a stream) or --output (a batch job)")
    return locate(checkpoint, output, state, job)


@click.group()
def state() -> None:
    """Inspect, export, move and reshape the state of a stopped job."""


@state.command()
@_job_options
@count_option("--version", 0, "Committed version to read (default: the last).")
@click.option("--user", "user", help="Show this user's open sessions.")
@click.option("--key", "key", help="A processor's job: show this key's state rows and timer.")
def inspect(checkpoint, output, state, job, version, user, key) -> None:
    """Per partition and in total: versions kept, open users and sessions (a processor's
    job: keys, rows, next timer), the oldest open session, bytes, last commit time."""
    from rich.console import Console

    from sessionize.commands.statetools.inspect import (
        key_state,
        render,
        summarize,
        user_sessions,
    )

    sj = _locate(checkpoint, output, state, job)
    console = Console()
    if not console.is_terminal:
        console = Console(width=150)  # a file or a pipe gets whole lines
    if key is not None:
        rows = key_state(sj, key, version)
        if not rows.num_rows:
            click.echo(f"key {key} has no state")
        for row in rows.to_pylist():
            console.print(", ".join(f"{k}={v}" for k, v in row.items()), highlight=False)
        return
    if user is None:
        at, parts = summarize(sj, version)
        render(sj, at, parts, console)
        return
    rows = user_sessions(sj, user, version)
    if not rows.num_rows:
        click.echo(f"user {user} has no open session")
        return
    attributes = sj.mapping.attributes  # the job's kept attributes, as it recorded them
    for row in rows.to_pylist():
        console.print(
            f"{row['session_id']}: {row['start_time']:%Y-%m-%dT%H:%M:%S}Z .. "
            f"{row['end_time']:%H:%M:%S}, {row['event_count']} events, closes "
            f"{row['closed_at']:%Y-%m-%dT%H:%M:%S}Z ({row['end_reason']}), user expires "
            f"{row['expires_at']:%Y-%m-%dT%H:%M:%S}Z",
            highlight=False,
        )
        for e in row["pending_events"]:
            fields = " ".join(f"{k}={e[k]}" for k in attributes if e[k] is not None)
            console.print(
                f"    {e['event_time']:%Y-%m-%dT%H:%M:%S.%f}Z  {e['action']:<14} "
                f"{e['page']}  {fields}",
                highlight=False,
            )


@state.command()
@_job_options
@click.option("--to", "to", required=True, help="Parquet file to write.")
@count_option("--version", 0, "Committed version to export (default: the last).")
def export(checkpoint, output, state, job, to, version) -> None:
    """Write the open sessions (the columns of `sessions`, their expiry and pending events)
    as one Parquet file; a processor's job: its state rows, with each key's timer."""
    from sessionize.commands.statetools.inspect import export_state

    sj = _locate(checkpoint, output, state, job)
    at, rows = export_state(sj, to, version)
    what = "open sessions" if sj.processor is None else "state rows"
    click.echo(f"wrote {rows:,} {what} at version {at} to {redact_uri(to)}")


@state.command()
@_job_options
@click.option(
    "--to",
    "to",
    required=True,
    metavar="STATE_URI",
    help="Where the state goes: files, files:PATH, postgresql://, redis://, dynamodb://",
)
def migrate(checkpoint, output, state, job, to) -> None:
    """Copy the state at its last committed version into another store, verify it, and
    switch the checkpoint to it."""
    _move(checkpoint, output, state, job, to, None)


@state.command()
@_job_options
@click.option("--partitions", type=click.IntRange(1), required=True, help="New partition count.")
@click.option(
    "--to",
    "to",
    required=True,
    metavar="STATE_URI",
    help="Where the rewritten state goes (any of our stores; not the current one).",
)
def repartition(checkpoint, output, state, job, partitions, to) -> None:
    """Rewrite the state into M partitions (users rehashed as the engine places them),
    verify it, and switch the checkpoint to it with the new count."""
    _move(checkpoint, output, state, job, to, partitions)


def _move(checkpoint, output, state, job, to, partitions) -> None:
    from sessionize.commands.statetools.moves import move_state

    if (checkpoint is None) == (output is None):
        raise click.UsageError("give --checkpoint (a stream) or --output (a batch job)")
    result = move_state(
        to,
        checkpoint=checkpoint,
        output=output,
        state=state,
        job=job,
        partitions=partitions,
        on_line=click.echo,
    )
    if result is not None:
        click.echo(
            f"{result.users:,} open users at version {result.version} in {result.seconds:.1f}s"
        )


@state.command(name="import")
@click.option("--checkpoint", required=True, help="Checkpoint of a spark-* state stream.")
@click.option(
    "--to",
    "to",
    required=True,
    metavar="STATE_URI",
    help="Our store to move the state into (files, files:PATH, a server URI).",
)
@count_option("--partitions", 1, "Partitions of the new state (default: the checkpoint's).")
def import_(checkpoint, to, partitions) -> None:
    """Read Spark's own state at the last committed batch (Spark's state data source) into
    one of our stores, verify it, and switch the checkpoint to it."""
    from sessionize.commands.statetools.spark_import import import_spark_state

    result = import_spark_state(checkpoint, to, partitions=partitions, on_line=click.echo)
    if result is not None:
        click.echo(
            f"{result.users:,} open users at batch {result.version} in {result.seconds:.1f}s"
        )
