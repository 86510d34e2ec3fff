"""`sessionize history` and `sessionize rewind`: reprocessing a stream (README, "Reprocessing")."""

from __future__ import annotations

import click

_STATE_HELP = (
    "State URI with its secret, when the checkpoint records it without one "
    "(it must name the same store)."
)


@click.command()
@click.option("--checkpoint", required=True, help="Checkpoint of a stream job.")
@click.option("--state", help=_STATE_HELP)
def history(checkpoint: str, state: str | None) -> None:
    """One line per committed batch that can still be restored, then the oldest one and why."""
    from sessionize.commands.history import batch_history, history_lines, open_checkpoint

    ck = open_checkpoint(checkpoint, state)
    for line in history_lines(ck, batch_history(ck)):
        click.echo(line)


@click.command()
@click.option("--checkpoint", required=True, help="Checkpoint of a stream job.")
@click.option(
    "--to-batch",
    type=int,
    required=True,
    help="Last batch to keep (see `sessionize history`); -1 starts over from nothing.",
)
@click.option("--dry-run", is_flag=True, help="Print what would be undone; change nothing.")
@click.option("--state", help=_STATE_HELP)
@click.option(
    "--accept-duplicates",
    is_flag=True,
    help="Rewind over batches on a Kafka output: their records stay, the rerun repeats them.",
)
def rewind(
    checkpoint: str, to_batch: int, dry_run: bool, state: str | None, accept_duplicates: bool
) -> None:
    """Undo every batch after --to-batch: Spark's logs, the state and the outputs, together.
    The next `sessionize stream` with the same flags recomputes them."""
    from sessionize.commands.rewind import rewind as run_rewind

    run_rewind(
        checkpoint,
        to_batch,
        dry_run=dry_run,
        state=state,
        say=click.echo,
        accept_duplicates=accept_duplicates,
    )
