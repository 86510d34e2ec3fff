"""`sessionize maintain`: an output's upkeep (commands/maintain.py)."""

from __future__ import annotations

import click

from sessionize.cli.params import count_option, job_output_options


@click.command()
@job_output_options("Checkpoint of the stream writing --output: refuse while that stream runs.")
@click.option(
    "--compact",
    is_flag=True,
    help="Parquet (local): move every published batch into files of about --target-file-mb "
    "per session_date (per publish day for the other outputs) under OUT/_compacted/, "
    "folding session_revisions into sessions and page_view_revisions into page_views "
    "(--revise-within; folded batches cannot be rewound); Delta: bin-pack the tables' "
    "small files.",
)
@click.option(
    "--target-file-mb",
    type=click.FloatRange(1),
    default=128.0,
    metavar="MB",
    show_default=True,
    help="Parquet: the size of the files --compact writes.",
)
@count_option(
    "--vacuum-hours", 0, "Delta: delete files that no table version of the last H hours uses."
)
@click.option(
    "--move-output",
    metavar="NEW",
    help="Move the outputs (local) to NEW, a new or empty directory, and record NEW in "
    "--checkpoint: the one way a stream's outputs change place.",
)
def maintain(
    output: str,
    checkpoint: str | None,
    compact: bool,
    target_file_mb: float,
    vacuum_hours: int | None,
    move_output: str | None,
):
    """Remove what interrupted runs left in an output; compact its Parquet batches or Delta
    tables; vacuum Delta tables; or move the outputs. Refused while a driver writes the
    output."""
    from sessionize.commands.maintain import maintain as run_maintain

    if move_output is not None:
        if compact or vacuum_hours is not None:
            raise click.UsageError("--move-output goes alone, without --compact or --vacuum-hours")
        from sessionize.commands.move_output import move_output as run_move

        run_move(output, move_output, checkpoint=checkpoint, say=click.echo)
        return

    run_maintain(
        output,
        checkpoint=checkpoint,
        compact=compact,
        vacuum_hours=vacuum_hours,
        target_file_mb=target_file_mb,
        say=click.echo,
    )
