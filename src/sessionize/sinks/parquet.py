"""Batch-versioned Parquet outputs with atomic visibility, on a filesystem with rename.

Layout under the output root:

    ROOT/NAME/batch_id=N/[session_date=D/]part-PPPPP.parquet   published, visible
    ROOT/_staging/NAME/batch_id=N/...                          being written (staging.py)
    ROOT/_trash/NAME/...                                       replaced, being deleted
    ROOT/_compacted/NAME/...                                   compacted batches (compaction.py)

Tasks stage their rows outside the output directories; the driver publishes a batch with one
directory rename per output. Staged and replaced files never live under `ROOT/NAME`, so every
reader of that directory (Spark, pyarrow, and `**` globs in DuckDB or Polars) sees a batch
completely or not at all, and a re-executed batch replaces its directory instead of adding
rows. Partition columns (`batch_id`, `session_date`) live in the directory names (Hive style).
Object stores have no rename: `s3://` outputs use parquet_s3.py. After its first compaction
an output's batch directories are `ROOT/_batches/NAME/batch_id=N/` and `ROOT/NAME` is a
symlink to a view of them and the compacted files (views.py), switched after each publish.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from sessionize import faults
from sessionize.errors import ConfigError, SinkError
from sessionize.fs import delete_dir, exists, location_key, without_options
from sessionize.sinks import compaction, folding, staging, tree_move, views
from sessionize.sinks.base import Capabilities, RootedSink, sink_errors


@dataclass(frozen=True)
class ParquetSink(RootedSink):
    """Batch directories published by rename, on a local or HDFS-like filesystem."""

    capabilities = Capabilities(compacts=True, appends_revisions=True)

    @classmethod
    def check_place(cls, uri: str) -> None:
        """A local output whose move was cut short is refused (sinks/tree_move.py)."""
        tree_move.refuse_if_moving(location_key(uri))

    def committed(self, name: str) -> ds.Dataset | None:
        """The batch directories and the compacted files (compaction.py), each row once."""
        fs, base = self._fs()
        try:
            return compaction.committed_dataset(fs, base, name)
        except (FileNotFoundError, pa.ArrowInvalid):
            return None

    def _names(self) -> tuple[str, ...]:
        if any(spec.replaced for spec in self.outputs.specs):
            raise ConfigError(
                f"--output {without_options(self.root)}: a Parquet output cannot replace rows "
                "by key; use Delta (output_format='delta'), PostgreSQL, Kafka or Iceberg"
            )
        return self.outputs.names

    @staticmethod
    def batch_dir(base: str, name: str, batch_id: int) -> str:
        """Where batch `batch_id` of output `name` is published (views.py: `_batches`)."""
        return f"{views.batches_root(base, name)}/batch_id={batch_id}"

    def write_part(self, name: str, batch_id: int, partition: int, table: pa.Table) -> int:
        fs, base = self._fs()
        with sink_errors(f"staging batch {batch_id} of {name}"):  # views read `batch_id` inside
            return staging.stage(
                fs,
                base,
                name,
                batch_id,
                partition,
                table,
                with_batch_id=views.uses_views(base, name),
            )

    def publish(self, batch_id: int) -> None:
        """Per output, one rename; old contents go to trash.

        Between moving an old directory away and renaming the new one in, readers see
        neither version of this batch, never both.
        """
        fs, base = self._fs()
        opened = staging.attempt_open(fs, base, batch_id)
        for name in self._names():
            staged = staging.staged_dir(base, name, batch_id)
            final = self.batch_dir(base, name, batch_id)
            has_rows = exists(fs, staged)
            if has_rows or opened:  # else a finished publish repeated: nothing new to show
                compaction.remove_batches(fs, base, name, {batch_id})  # compacted, now replaced
                self._retire(fs, base, name, final)
                if has_rows:
                    if views.uses_views(base, name):  # staged before the output had views
                        views.with_batch_ids(staged, batch_id)
                    fs.create_dir(final.rsplit("/", 1)[0], recursive=True)
                    fs.move(staged, final)
            compaction.refresh_view(fs, base, name)  # the view switch: visible from here
            faults.pause_point(f"published-{name}", batch_id)
        staging.close_attempt(fs, base, batch_id)

    def check_retractable(self, batch_id: int, accept_hint: str = "") -> None:
        """Refuse to remove batches >= batch_id when some were folded with their revisions
        (folding.py): the rows they replaced are gone.

        Raises:
            SinkError: one line naming the earliest batch that can still be removed.
        """
        fs, base = self._fs()
        folding.check_unfolded(fs, base, batch_id, without_options(self.root))

    def invalidate_from(self, batch_id: int) -> list[int]:
        self.check_retractable(batch_id)
        fs, base = self._fs()
        retired = set()
        for name in self._names():
            for b in reversed(self.published(name)):
                if b >= batch_id:
                    self._retire(fs, base, name, self.batch_dir(base, name, b))
                    retired.add(b)
            # compacted batches are older than the directories: removed after them
            undone = compaction.read_manifest(fs, base, name).batches
            retired |= compaction.remove_batches(
                fs, base, name, {b for b in undone if b >= batch_id}
            )
            compaction.refresh_view(fs, base, name)  # one switch: the batches go together
        return sorted(retired)

    def rows_from(self, name: str, batch_id: int) -> int:
        fs, base = self._fs()
        if not any(b >= batch_id for b in self.published(name)):
            return 0
        data = compaction.committed_dataset(fs, base, name)
        return 0 if data is None else data.count_rows(filter=ds.field("batch_id") >= batch_id)

    def published(self, name: str) -> list[int]:
        fs, base = self._fs()
        dirs, manifest = compaction.committed(fs, base, name)
        return sorted(set(dirs) | manifest.batches)

    def committed_files(self, name: str) -> dict[str, list[str]]:
        """The files that hold output `name`'s committed rows, each row once:
        {"batches": files under `ROOT/NAME/batch_id=N/`, or `ROOT/_batches/NAME/batch_id=N/`
        once compacted (Hive-partitioned there),
        "compacted": files under `ROOT/_compacted/NAME/` (`batch_id` a column)}.

        >>> ParquetSink("out").committed_files("sessions")["compacted"][:1]  # doctest: +SKIP
        ['out/_compacted/sessions/session_date=2026-11-01/part-00000003-0000-1a2b3c4d.parquet']
        """
        fs, base = self._fs()
        return compaction.committed_files(fs, base, name)

    def compact(
        self, upto: int | None = None, target_mb: float = compaction.TARGET_MB
    ) -> dict[str, dict[str, int]]:
        """Rewrite the published batches <= `upto` (default: all) of every output into
        compacted files of about `target_mb` (compaction.py); {output: what was done}."""
        fs, base = self._fs()
        done, names = {}, self._names()
        if folding.has_revisions(fs, base):  # a revising job's: revisions folded in
            done = folding.fold(fs, base, upto=upto, target_mb=target_mb)
            names = tuple(n for n in names if n not in done)
        for name in names:
            done[name] = compaction.compact(fs, base, name, upto=upto, target_mb=target_mb)
        return done

    @staticmethod
    def _retire(fs: pafs.FileSystem, base: str, name: str, path: str) -> None:
        if not exists(fs, path):
            return
        trash = f"{base}/{staging.TRASH}/{name}"
        fs.create_dir(trash, recursive=True)
        target = f"{trash}/{path.rsplit('/', 1)[1]}-{uuid.uuid4().hex}"
        try:
            fs.move(path, target)
        except OSError as exc:
            raise SinkError(f"could not retire {path}: {exc}") from exc
        delete_dir(fs, target)
