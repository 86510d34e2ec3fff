"""Batch-versioned Parquet outputs with atomic visibility.

Layout of each output (`sessions`, `page_views`, `late_events`, `invalid_events`):

    OUTPUT/NAME/batch_id=N/[session_date=D/]part-PPPPP.parquet   published, visible
    OUTPUT/NAME/_staging/batch_id=N/...                          being written
    OUTPUT/NAME/_trash/...                                       replaced, being deleted

Tasks write their rows under `_staging` (one file per Spark partition and date, with a
deterministic name, so a retried task overwrites its own file). The driver then publishes
the batch with one directory rename per output. Spark and pyarrow.dataset skip names
starting with `_`, so readers see a batch completely or not at all, and a re-executed
batch replaces its directory instead of adding rows. Partition columns (`batch_id`,
`session_date`) live in the directory names (Hive style): read with
`spark.read.parquet(OUTPUT/NAME)` or `pyarrow.dataset.dataset(OUTPUT/NAME, partitioning="hive")`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sessionize.errors import SinkError
from sessionize.fs import delete_dir, exists, resolve_fs
from sessionize.schema import OUTPUT_PARTITIONS, OUTPUTS


@dataclass(frozen=True)
class ParquetSink:
    """Pickles as its root URI; executors open their own filesystem handle."""

    root: str

    def _fs(self) -> tuple[pafs.FileSystem, str]:
        return resolve_fs(self.root)

    @staticmethod
    def batch_dir(name: str, batch_id: int) -> str:
        return f"{name}/batch_id={batch_id}"

    def write_part(self, name: str, batch_id: int, partition: int, table: pa.Table) -> int:
        """Stage one task's rows of output `name`; returns the rows written."""
        if table.num_rows == 0:
            return 0
        fs, base = self._fs()
        staging = f"{base}/{name}/_staging/batch_id={batch_id}"
        parts = OUTPUT_PARTITIONS.get(name, ())
        groups = _split_by(table, parts) if parts else [("", table)]
        for subdir, rows in groups:
            directory = f"{staging}/{subdir}" if subdir else staging
            fs.create_dir(directory, recursive=True)
            final = f"{directory}/part-{partition:05d}.parquet"
            tmp = f"{directory}/.part-{partition:05d}-{uuid.uuid4().hex}.tmp"
            pq.write_table(rows.drop_columns(list(parts)), tmp, filesystem=fs)
            fs.move(tmp, final)
        return table.num_rows

    def clear_staging(self, batch_id: int) -> None:
        """Drop what an earlier, failed attempt of this batch staged."""
        fs, base = self._fs()
        for name in OUTPUTS:
            delete_dir(fs, f"{base}/{name}/_staging/batch_id={batch_id}")

    def publish(self, batch_id: int) -> None:
        """Make the staged batch visible: per output, one rename; old contents go to trash.

        Between moving an old directory away and renaming the new one in, readers see
        neither version of this batch, never both.
        """
        fs, base = self._fs()
        for name in OUTPUTS:
            staged = f"{base}/{name}/_staging/batch_id={batch_id}"
            final = f"{base}/{self.batch_dir(name, batch_id)}"
            self._retire(fs, base, name, final)
            if exists(fs, staged):
                fs.move(staged, final)

    def invalidate_from(self, batch_id: int) -> list[int]:
        """Retire every published batch >= batch_id (reprocessing); returns their ids."""
        fs, base = self._fs()
        retired = set()
        for name in OUTPUTS:
            for b in self.published(name):
                if b >= batch_id:
                    self._retire(fs, base, name, f"{base}/{self.batch_dir(name, b)}")
                    retired.add(b)
        return sorted(retired)

    def published(self, name: str) -> list[int]:
        fs, base = self._fs()
        sel = pafs.FileSelector(f"{base}/{name}", allow_not_found=True)
        ids = []
        for info in fs.get_file_info(sel):
            if info.type == pafs.FileType.Directory and info.base_name.startswith("batch_id="):
                ids.append(int(info.base_name.split("=", 1)[1]))
        return sorted(ids)

    @staticmethod
    def _retire(fs: pafs.FileSystem, base: str, name: str, path: str) -> None:
        if not exists(fs, path):
            return
        trash = f"{base}/{name}/_trash"
        fs.create_dir(trash, recursive=True)
        target = f"{trash}/{path.rsplit('/', 1)[1]}-{uuid.uuid4().hex}"
        try:
            fs.move(path, target)
        except OSError as exc:
            raise SinkError(f"could not retire {path}: {exc}") from exc
        delete_dir(fs, target)


def _split_by(table: pa.Table, columns: tuple[str, ...]) -> list[tuple[str, pa.Table]]:
    """Group rows by partition column values -> [('col=value/...', rows)]."""
    (col,) = columns  # one partition level is all the outputs use
    values = pc.unique(table[col])
    out = []
    for v in values.to_pylist():
        rows = table.filter(pc.equal(table[col], pa.scalar(v, table.schema.field(col).type)))
        out.append((f"{col}={v}", rows))
    return out
