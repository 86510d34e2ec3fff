"""Task output staged outside the tables: `ROOT/_staging/NAME/batch_id=N/[col=v/]part-P.parquet`.

Each task writes one file per output and partition value with a deterministic name, so a
retried task overwrites its own file. Nothing under `ROOT/NAME` changes until the driver
publishes, so no reader of an output ever lists a staged file.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sessionize.fs import delete_dir, exists, listing
from sessionize.schema import OUTPUT_PARTITIONS, OUTPUTS
from sessionize.sinks.replaced import keys_name

if TYPE_CHECKING:
    from sessionize.sinks.outputs import OutputSpec

STAGING = "_staging"
TRASH = "_trash"


def staged_dir(base: str, name: str, batch_id: int) -> str:
    return f"{base}/{STAGING}/{name}/batch_id={batch_id}"


def stage(
    fs: pafs.FileSystem,
    base: str,
    name: str,
    batch_id: int,
    partition: int,
    table: pa.Table,
    with_batch_id: bool = False,
) -> int:
    """Stage one task's rows; `with_batch_id`: also as a column in the files (the view
    layout of local Parquet, views.py, reads it there). Returns the rows staged."""
    if table.num_rows == 0:
        return 0
    if with_batch_id:
        table = table.append_column("batch_id", pa.array([batch_id] * table.num_rows, pa.int64()))
    staging = staged_dir(base, name, batch_id)
    parts = OUTPUT_PARTITIONS.get(name, ())
    groups = split_by(table, parts) if parts else [("", table)]
    local = isinstance(fs, pafs.LocalFileSystem)
    for subdir, rows in groups:
        directory = f"{staging}/{subdir}" if subdir else staging
        final = f"{directory}/part-{partition:05d}.parquet"
        rows = rows.drop_columns(list(parts))
        if local:  # a local file appears complete or not at all: write aside, rename in
            fs.create_dir(directory, recursive=True)
            tmp = f"{directory}/.part-{partition:05d}-{uuid.uuid4().hex}.tmp"
            pq.write_table(rows, tmp, filesystem=fs)
            fs.move(tmp, final)
        else:  # an object PUT is atomic already
            pq.write_table(rows, final, filesystem=fs)
    return table.num_rows


def staged_files(fs: pafs.FileSystem, base: str, name: str, batch_id: int) -> list[str]:
    return sorted(
        i.path
        for i in listing(fs, staged_dir(base, name, batch_id), recursive=True)
        if i.type == pafs.FileType.File and i.path.endswith(".parquet")
    )


def read_replacement(
    fs: pafs.FileSystem, base: str, spec: OutputSpec, batch_id: int
) -> tuple[pa.Table, pa.Table]:
    """The staged (keys, rows) of an output replaced by key, without `batch_id`: the keys
    the batch touched and the rows they hold now."""
    rows = read_staged(fs, base, spec.name, batch_id, spec.schema)
    keys = read_staged(fs, base, keys_name(spec.name), batch_id, spec.key_schema())
    return keys.drop_columns(["batch_id"]), rows.drop_columns(["batch_id"])


def read_staged(
    fs: pafs.FileSystem, base: str, name: str, batch_id: int, schema: pa.Schema | None = None
) -> pa.Table:
    """The staged rows of one output with its partition columns and `batch_id` restored;
    `schema` is the output's (default: that of the default event mapping)."""
    schema = schema or OUTPUTS[name]
    files = staged_files(fs, base, name, batch_id)
    parts = OUTPUT_PARTITIONS.get(name, ())
    if files:
        part_schema = pa.schema([schema.field(p) for p in parts])
        dataset = ds.dataset(
            files,
            filesystem=fs,
            format="parquet",
            partitioning=ds.partitioning(part_schema, flavor="hive") if parts else None,
            partition_base_dir=staged_dir(base, name, batch_id),
        )
        table = dataset.to_table(columns=schema.names)
    else:
        table = schema.empty_table()
    table = table.cast(schema)
    return table.append_column("batch_id", pa.array([batch_id] * table.num_rows, pa.int64()))


def clear(fs: pafs.FileSystem, base: str, batch_id: int) -> None:
    """Drop what any output (the job's own names) staged for `batch_id`."""
    names = set(OUTPUTS)
    names |= {
        i.base_name for i in listing(fs, f"{base}/{STAGING}") if i.type == pafs.FileType.Directory
    }
    for name in sorted(names - {"_open"}):
        delete_dir(fs, staged_dir(base, name, batch_id))


# An attempt of a batch is "open" from clear_staging until its publish has finished. A publish
# with nothing staged for an output then means "this batch has no rows there" (old rows go),
# while a publish repeated after a finished one (nothing staged, no open attempt) changes
# nothing: retrying a publish is safe at any step.
def _marker(base: str, batch_id: int) -> str:
    return f"{base}/{STAGING}/_open/batch_id={batch_id}"


def open_attempt(fs: pafs.FileSystem, base: str, batch_id: int) -> None:
    clear(fs, base, batch_id)
    marker = _marker(base, batch_id)
    fs.create_dir(marker.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(marker) as f:
        f.write(b"")


def attempt_open(fs: pafs.FileSystem, base: str, batch_id: int) -> bool:
    return exists(fs, _marker(base, batch_id))


def close_attempt(fs: pafs.FileSystem, base: str, batch_id: int) -> None:
    """After a publish: drop the staged files, then the marker (last)."""
    clear(fs, base, batch_id)
    if attempt_open(fs, base, batch_id):
        fs.delete_file(_marker(base, batch_id))


def split_by(table: pa.Table, columns: tuple[str, ...]) -> list[tuple[str, pa.Table]]:
    """Group rows by partition column values -> [('col=value', rows)]."""
    (col,) = columns  # one partition level is all the outputs use
    out = []
    for v in pc.unique(table[col]).to_pylist():
        rows = table.filter(pc.equal(table[col], pa.scalar(v, table.schema.field(col).type)))
        out.append((f"{col}={v}", rows))
    return out
