"""`sessionize maintain`: an output's upkeep (commands/maintain.py)."""

from __future__ import annotations

import click


@click.command()
@click.option("--output", required=True, help="Output of a stream or batch job.")
@click.option(
    "--checkpoint", default=None,
    help="Checkpoint of the stream writing --output: refuse while that stream runs.",
)  # fmt: skip
@click.option("--compact", is_flag=True, help="Delta: bin-pack the tables' small files.")
@click.option(
    "--vacuum-hours", type=click.IntRange(0), default=None,
    help="Delta: delete files that no table version of the last H hours uses.",
)  # fmt: skip
@click.option(
    "--move-output", metavar="NEW", default=None,
    help="Move the outputs (local) to NEW, a new or empty directory, and record NEW in "
    "--checkpoint: the one way a stream's outputs change place.",
)  # fmt: skip
def maintain(
    output: str, checkpoint: str | None, compact: bool, vacuum_hours: int | None,
    move_output: str | None,
):  # fmt: skip
    """Remove what interrupted runs left in an output; compact and vacuum Delta tables;
    or move the outputs. Refused while a driver writes the output."""
    from sessionize.commands.maintain import maintain as run_maintain

    if move_output is not None:
        if compact or vacuum_hours is not None:
            raise click.UsageError("--move-output goes alone, without --compact or --vacuum-hours")
        from sessionize.commands.move_output import move_output as run_move

        run_move(output, move_output, checkpoint=checkpoint, say=click.echo)
        return

    run_maintain(
        output, checkpoint=checkpoint, compact=compact, vacuum_hours=vacuum_hours,
        say=click.echo,
    )  # fmt: skip
