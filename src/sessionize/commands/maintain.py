"""`sessionize maintain`: an output's upkeep while no driver writes it.

It takes the output's lease (and, given `--checkpoint`, the stream's), so a job started
meanwhile is refused, and a running job makes it refuse with one line. Then it removes what
interrupted runs left (sinks/maintenance.py); it compacts local Parquet outputs' batches
(sinks/compaction.py) and Delta tables' small files, and vacuums the files no Delta table
version within the retention uses.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack

from sessionize.engines.checkpoint import checkpoint_lease, output_lease
from sessionize.errors import ConfigError
from sessionize.fs import is_dir, without_options
from sessionize.schema import OUTPUTS
from sessionize.sinks.base import StagedSink
from sessionize.sinks.compaction import TARGET_MB
from sessionize.sinks.delta import DeltaSink, compact_and_vacuum
from sessionize.sinks.maintenance import clean_leftovers
from sessionize.sinks.parquet import ParquetSink
from sessionize.sinks.registry import open_sink


def maintain(
    output: str,
    *,
    checkpoint: str | None = None,
    compact: bool = False,
    vacuum_hours: int | None = None,
    target_file_mb: float = TARGET_MB,
    say: Callable[[str], None] = print,
) -> dict:
    """Clean `output`; compact it (`compact`: local Parquet batches into files of about
    `target_file_mb`, or Delta tables' small files); vacuum Delta tables (`vacuum_hours`).

    Args:
        output: The output root (local path, file:// or s3://).
        checkpoint: The stream's checkpoint, leased too so that its driver cannot start.
        compact: Compact the output.
        vacuum_hours: Delta: delete files no table version of the last H hours uses.
        target_file_mb: Parquet: the compacted files' size.
        say: Where the one-line summaries go.

    Returns:
        What was done: {"format", "leftovers", and "tables" (Delta) or "compacted" (Parquet)}.

    Raises:
        ConfigError: a PostgreSQL output, no directory, `--vacuum-hours` on Parquet, or
            `--compact` on Parquet on s3:// or another non-local filesystem (not
            supported).
        LeaseHeld: a driver writes the output or runs the checkpoint.

    >>> maintain("out/", compact=True)  # doctest: +SKIP
    """
    nothing = open_sink(output).nothing_to_maintain()
    if nothing is not None:
        raise ConfigError(nothing)
    if not is_dir(output):
        raise ConfigError(f"--output {without_options(output)} is not a directory")
    with ExitStack() as held:
        held.enter_context(output_lease(output))
        if checkpoint:
            held.enter_context(checkpoint_lease(checkpoint))
        delta = any(DeltaSink(output, "maintain").table(name) for name in OUTPUTS)
        if vacuum_hours is not None and not delta:
            raise ConfigError(
                "--vacuum-hours applies to Delta outputs; "
                f"{without_options(output)} holds no Delta table"
            )
        sink = open_sink(output, "delta" if delta else "parquet", job="maintain")
        if compact and not delta and not sink.capabilities.compacts:
            raise ConfigError(
                f"--compact: {without_options(output)} is Parquet on an object store or a "
                "remote filesystem, which is not compacted; write it as Delta "
                "(--output-format delta) to compact it"
            )
        # A file sink, since it had something to maintain; only local Parquet compacts.
        assert isinstance(sink, StagedSink)
        report: dict = {"format": "delta" if delta else "parquet"}
        report["leftovers"] = left = clean_leftovers(sink)
        say(
            f"removed {left['trash']} retired batch directories, staged rows of "
            f"{left['staged_batches']} published batches, {left['uncommitted_files']} "
            "uncommitted files"
        )
        if delta and (compact or vacuum_hours is not None):
            assert isinstance(sink, DeltaSink)
            report["tables"] = tables = compact_and_vacuum(sink, vacuum_hours, compact=compact)
            for name, done in tables.items():
                say(f"{name}: {_describe(done)}")
        if compact and sink.capabilities.compacts:
            assert isinstance(sink, ParquetSink)
            report["compacted"] = done = sink.compact(target_mb=target_file_mb)
            for name, counts in done.items():
                say(
                    f"{name}: compacted {counts['batches']} batches, {counts['files_in']} "
                    f"files into {counts['files_out']}"
                )
    return report


def _describe(done: dict) -> str:
    parts = []
    if done.get("compaction") is not None:
        m = done["compaction"]
        parts.append(
            f"compacted {m.get('numFilesRemoved', 0)} files into {m.get('numFilesAdded', 0)}"
        )
    if "vacuumed_files" in done:
        parts.append(f"vacuumed {done['vacuumed_files']} files")
    return ", ".join(parts) or "nothing to do"
