"""Compaction of local Parquet outputs: many small batch files into few large ones.

Layout under the output root (next to the batch directories of parquet.py):

    ROOT/_batches/NAME/batch_id=N/[session_date=D/]part-P...  batches not compacted (ROOT/NAME
                                                             before the first compaction)
    ROOT/_compacted/NAME/[session_date=D/]part-G-K.parquet   compacted rows, `batch_id` inside
    ROOT/_compacted/NAME/part-DAY-G-K.parquet                outputs without session_date: one
                                                             group per publish day
    ROOT/_compacted/NAME/_manifest/GGGGGGGG.json             generation G: files, batches

A generation's manifest names its files and, per file, the batches it holds; the newest
manifest is the truth, and a batch it holds is read from the compacted files even while its
old directory is still there. Compaction writes the new files (unreferenced, so invisible),
then the next manifest (one rename: the switch), then removes the batch directories it now
covers and the files and manifests no generation needs. Killed anywhere, the next
compaction or `sessionize maintain` finishes or discards that work; readers that follow
`committed_files` (list the batch directories first, then read the manifest) see every
batch once. Plain readers of `ROOT/NAME` read a view (views.py) of the compacted files and
the other batches: an output with a manifest is converted to views before `finish` removes
a batch directory, and each compaction ends with a new view. Removing batches (rewind,
reprocessing, a batch published again) rewrites the compacted files that hold them without
their rows, as a new generation.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sessionize import faults
from sessionize.fs import delete_dir, exists, listing
from sessionize.schema import OUTPUT_PARTITIONS, OUTPUTS
from sessionize.sinks import views
from sessionize.sinks.views import batches_root

COMPACTED = "_compacted"
MANIFESTS = "_manifest"
TARGET_MB = 128


@dataclass
class Manifest:
    """One generation of an output's compacted files: {file (relative): its batches}, and
    `folded`: every batch up to it is in this generation, including those whose rows were
    all replaced by revisions (folding.py); -1 when the output was never folded."""

    generation: int = 0
    files: dict[str, list[int]] = field(default_factory=dict)
    folded: int = -1

    @property
    def batches(self) -> set[int]:
        return {b for held in self.files.values() for b in held} | set(range(self.folded + 1))


def compacted_dir(base: str, name: str) -> str:
    return f"{base}/{COMPACTED}/{name}"


def read_manifest(fs: pafs.FileSystem, base: str, name: str) -> Manifest:
    """The newest generation (empty before the first compaction)."""
    where = f"{compacted_dir(base, name)}/{MANIFESTS}"
    for _ in range(3):  # a manifest replaced between listing and reading: list again
        names = sorted(i.base_name for i in listing(fs, where) if i.base_name.endswith(".json"))
        if not names:
            return Manifest()
        try:
            with fs.open_input_stream(f"{where}/{names[-1]}") as f:
                body = json.loads(f.read())
        except FileNotFoundError:
            continue
        files = {k: list(v) for k, v in body["files"].items()}
        return Manifest(body["generation"], files, body.get("folded", -1))
    raise FileNotFoundError(f"{where}: manifests kept changing while read")


def batch_dirs(fs: pafs.FileSystem, base: str, name: str) -> list[int]:
    return sorted(
        int(i.base_name.split("=", 1)[1])
        for i in listing(fs, batches_root(base, name))
        if i.type == pafs.FileType.Directory and i.base_name.startswith("batch_id=")
    )


def committed(fs: pafs.FileSystem, base: str, name: str) -> tuple[list[int], Manifest]:
    """(batches read from their directories, the manifest): the directories are listed
    before the manifest is read, so a compaction finishing in between hides no batch."""
    dirs = batch_dirs(fs, base, name)
    manifest = read_manifest(fs, base, name)
    return [b for b in dirs if b not in manifest.batches], manifest


def committed_files(fs: pafs.FileSystem, base: str, name: str) -> dict[str, list[str]]:
    """{"batches": files of the batch directories, "compacted": compacted files}: full paths
    of the rows a reader should read, each row once."""
    dirs, manifest = committed(fs, base, name)
    files, root = [], batches_root(base, name)
    for b in dirs:
        files += sorted(
            i.path
            for i in listing(fs, f"{root}/batch_id={b}", recursive=True)
            if i.type == pafs.FileType.File and i.path.endswith(".parquet")
        )
    where = compacted_dir(base, name)
    return {"batches": files, "compacted": [f"{where}/{f}" for f in sorted(manifest.files)]}


def committed_dataset(fs: pafs.FileSystem, base: str, name: str) -> ds.Dataset | None:
    """Every committed row of output `name` once, `batch_id` and the partition column as
    columns; None when the output holds no batch."""
    files = committed_files(fs, base, name)
    parts = OUTPUT_PARTITIONS.get(name, ())
    datasets = []
    if files["batches"]:
        fields = [pa.field("batch_id", pa.int64())] + [OUTPUTS[name].field(p) for p in parts]
        datasets.append(
            ds.dataset(
                files["batches"],
                filesystem=fs,
                format="parquet",
                partitioning=ds.partitioning(pa.schema(fields), flavor="hive"),
                partition_base_dir=batches_root(base, name),
            )
        )
    if files["compacted"]:
        datasets.append(_compacted_dataset(fs, base, name, files["compacted"]))
    if not datasets:
        return None
    if len(datasets) == 1:
        return datasets[0]
    schema = datasets[1].schema  # the compacted files' column order
    return ds.dataset(
        [
            ds.dataset(
                d.files,
                filesystem=fs,
                format="parquet",
                schema=schema,
                partitioning=d.partitioning,
                partition_base_dir=_base_of(d, base, name),
            )
            for d in datasets
        ]
    )


def _base_of(data: ds.FileSystemDataset, base: str, name: str) -> str:
    if f"/{COMPACTED}/" in data.files[0]:
        return compacted_dir(base, name)
    return batches_root(base, name)


def _compacted_dataset(
    fs: pafs.FileSystem, base: str, name: str, files: list[str]
) -> ds.FileSystemDataset:
    parts = OUTPUT_PARTITIONS.get(name, ())
    partitioning = None
    if parts:
        partitioning = ds.partitioning(
            pa.schema([OUTPUTS[name].field(p) for p in parts]), flavor="hive"
        )
    return ds.dataset(
        files,
        filesystem=fs,
        format="parquet",
        partitioning=partitioning,
        partition_base_dir=compacted_dir(base, name),
    )


def compact(
    fs: pafs.FileSystem,
    base: str,
    name: str,
    *,
    upto: int | None = None,
    target_mb: float = TARGET_MB,
) -> dict[str, int]:
    """Move the batches <= `upto` (default: all) that still have their own directory into
    compacted files; small compacted files of the same group are rewritten with them. The
    output's first compaction turns it into the view layout (views.py); each one ends with
    a new view. Returns {"batches": compacted now, "files_in": read, "files_out": written}."""
    finish(fs, base, name)
    dirs, _ = committed(fs, base, name)
    try:
        done = _compact(fs, base, name, [b for b in dirs if upto is None or b <= upto], target_mb)
    finally:
        # The rows read and sorted are freed, but Arrow's allocator keeps the pages for
        # reuse: a driver compacting between batches would hold its largest compaction's
        # working set for the life of the stream.
        pa.default_memory_pool().release_unused()
    refresh_view(fs, base, name)
    return done


def view_files(fs: pafs.FileSystem, base: str, name: str) -> dict[str, tuple[str, int | None]]:
    """What the next view of output `name` holds (views.py): {its path there: (the file,
    its batch)}, the compacted files of the newest generation (batch None: many) and the
    files of the other batches."""
    dirs, manifest = committed(fs, base, name)
    where = compacted_dir(base, name)
    files: dict[str, tuple[str, int | None]] = {
        rel: (f"{where}/{rel}", None) for rel in manifest.files
    }
    root = batches_root(base, name)
    for b in dirs:
        start = len(f"{root}/batch_id={b}/")
        for info in _files_under(fs, f"{root}/batch_id={b}"):
            if not info.path.endswith(".parquet"):
                continue
            folder, _, file = info.path[start:].rpartition("/")
            files[f"{folder}/b{b:08d}-{file}".lstrip("/")] = (info.path, b)
    return files


def refresh_view(fs: pafs.FileSystem, base: str, name: str) -> None:
    """A new view of output `name` (if it has the view layout), the others deleted; an
    output without it loses what an interrupted conversion left."""
    if not _local(fs):
        return
    if views.uses_views(base, name):
        views.refresh(base, name, view_files(fs, base, name))
    else:
        views.discard(base, name)


def _local(fs: pafs.FileSystem) -> bool:
    """Views are symlinks and hard links: on the local filesystem only."""
    return isinstance(fs, pafs.LocalFileSystem)


def _compact(
    fs: pafs.FileSystem, base: str, name: str, todo: list[int], target_mb: float
) -> dict[str, int]:
    manifest = read_manifest(fs, base, name)
    if not todo:
        return {"batches": 0, "files_in": 0, "files_out": 0}
    root = batches_root(base, name)
    target = int(target_mb * 1024 * 1024)
    where = compacted_dir(base, name)
    new_rows = _batch_rows(fs, base, name, todo)
    # only the groups the new rows go to: an old session date's last file stays as it is
    touched = _groups(name, new_rows)
    sizes = {
        f: fs.get_file_info(f"{where}/{f}").size
        for f in manifest.files
        if _group_of(name, f) in touched
    }
    small = {f for f, size in sizes.items() if size < target // 2}
    old_rows = _compacted_rows(fs, base, name, sorted(small))
    batch_files = [i for b in todo for i in _files_under(fs, f"{root}/batch_id={b}")]
    files_in = len(small) + len(batch_files)
    bytes_in = sum(sizes[f] for f in small) + sum(i.size for i in batch_files)
    tables = [t for t in (old_rows, new_rows) if t is not None]
    if not tables:
        return {"batches": 0, "files_in": 0, "files_out": 0}
    rows = pa.concat_tables(tables, promote_options="default")
    per_row = max(1, bytes_in // max(1, rows.num_rows))
    generation = manifest.generation + 1
    written = _write_groups(fs, where, name, rows, generation, max(1, target // per_row))
    files = {f: held for f, held in manifest.files.items() if f not in small}
    files.update(written)
    faults.pause_point(f"compacted-files-{name}", generation)
    _write_manifest(fs, base, name, Manifest(generation, files, manifest.folded))
    faults.pause_point(f"compacted-manifest-{name}", generation)
    finish(fs, base, name)
    return {"batches": len(todo), "files_in": files_in, "files_out": len(written)}


def _groups(name: str, rows: pa.Table | None) -> set[str]:
    """The groups (`session_date=D`, or the publish day) that `rows` fall into."""
    if rows is None:
        return set()
    parts = OUTPUT_PARTITIONS.get(name, ())
    if parts:
        return {f"{parts[0]}={v}" for v in pc.unique(rows[parts[0]]).to_pylist()}
    return set(pc.unique(rows["_day"]).to_pylist())


def _group_of(name: str, rel: str) -> str:
    """A compacted file's group, from its name (see `_write_groups`)."""
    if OUTPUT_PARTITIONS.get(name):
        return rel.split("/", 1)[0]
    return rel.rsplit("/", 1)[-1].split("-")[1]


def remove_batches(fs: pafs.FileSystem, base: str, name: str, batches: set[int]) -> set[int]:
    """Take `batches` out of the compacted files (a new generation whose rewritten files hold
    every other row); returns those of them that were compacted."""
    manifest = read_manifest(fs, base, name)
    gone = manifest.batches & batches
    if not gone:
        return set()
    touched = sorted(f for f, held in manifest.files.items() if set(held) & gone)
    rows = _compacted_rows(fs, base, name, touched)
    assert rows is not None
    keep = pc.invert(pc.is_in(rows["batch_id"], pa.array(sorted(gone), pa.int64())))
    rows = rows.filter(keep)
    generation = manifest.generation + 1
    files = {f: held for f, held in manifest.files.items() if f not in touched}
    if rows.num_rows:
        files.update(
            _write_groups(
                fs, compacted_dir(base, name), name, rows, generation, max(1, rows.num_rows)
            )
        )
    _write_manifest(fs, base, name, Manifest(generation, files, manifest.folded))
    finish(fs, base, name)
    return gone


def finish(fs: pafs.FileSystem, base: str, name: str) -> dict[str, int]:
    """Complete or discard an interrupted compaction: remove the batch directories the
    newest manifest covers, then the compacted files and manifests it does not name. An
    output with a manifest gets the view layout first (views.py): a plain reader of
    `ROOT/NAME` then finds the covered batches in the compacted files."""
    manifest = read_manifest(fs, base, name)
    if manifest.generation and _local(fs) and not views.uses_views(base, name):
        views.convert(base, name, view_files(fs, base, name))
    covered = [b for b in batch_dirs(fs, base, name) if b in manifest.batches]
    # all renamed out first, then deleted: a glob reader's listing goes stale once, briefly
    root = batches_root(base, name)
    retired = [_retire_dir(fs, base, name, f"{root}/batch_id={b}") for b in covered]
    for path in retired:
        delete_dir(fs, path)
    done = {"covered_dirs": len(covered), "unreferenced_files": 0}
    where = compacted_dir(base, name)
    keep = set(manifest.files) | {f"{MANIFESTS}/{manifest.generation:08d}.json"}
    for info in _files_under(fs, where):
        if info.path[len(where) + 1 :] not in keep:
            fs.delete_file(info.path)
            done["unreferenced_files"] += info.base_name.endswith(".parquet")
    return done


def _retire_dir(fs: pafs.FileSystem, base: str, name: str, path: str) -> str:
    """Out of the output directory with one rename (as parquet.py retires); its place in
    the trash, to delete."""
    trash = f"{base}/_trash/{name}"
    fs.create_dir(trash, recursive=True)
    target = f"{trash}/{path.rsplit('/', 1)[1]}-{uuid.uuid4().hex}"
    fs.move(path, target)
    return target


def _files_under(fs: pafs.FileSystem, where: str) -> list[pafs.FileInfo]:
    return [i for i in listing(fs, where, recursive=True) if i.type == pafs.FileType.File]


def _batch_rows(fs: pafs.FileSystem, base: str, name: str, batches: list[int]) -> pa.Table | None:
    """The batches' rows with `batch_id` (and the partition column) as columns, and each
    batch's publish day (`_day`, the day its directory was published) for grouping."""
    parts = OUTPUT_PARTITIONS.get(name, ())
    fields = [pa.field("batch_id", pa.int64())] + [OUTPUTS[name].field(p) for p in parts]
    tables = []
    for b in batches:
        path = f"{batches_root(base, name)}/batch_id={b}"
        files = sorted(i.path for i in _files_under(fs, path) if i.path.endswith(".parquet"))
        if not files:
            continue
        data = ds.dataset(
            files,
            filesystem=fs,
            format="parquet",
            partitioning=ds.partitioning(pa.schema(fields), flavor="hive"),
            partition_base_dir=batches_root(base, name),
        )
        table = data.to_table()
        day = _day(fs.get_file_info(path).mtime)
        tables.append(table.append_column("_day", pa.array([day] * table.num_rows)))
    return pa.concat_tables(tables, promote_options="default") if tables else None


def _day(mtime: dt.datetime | None) -> str:
    return (mtime or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).strftime("%Y%m%d")


def _compacted_rows(fs: pafs.FileSystem, base: str, name: str, files: list[str]) -> pa.Table | None:
    if not files:
        return None
    where = compacted_dir(base, name)
    tables = []
    for f in files:  # one file at a time: the day is in its name
        table = _compacted_dataset(fs, base, name, [f"{where}/{f}"]).to_table()
        day = "" if OUTPUT_PARTITIONS.get(name) else _group_of(name, f)
        tables.append(table.append_column("_day", pa.array([day] * table.num_rows)))
    return pa.concat_tables(tables, promote_options="default")


def _write_groups(
    fs: pafs.FileSystem, where: str, name: str, rows: pa.Table, generation: int, rows_per_file: int
) -> dict[str, list[int]]:
    """Rows in files of about `rows_per_file` rows per session_date (or publish day), in
    batch order (so a file's `batch_id` statistics are narrow); {relative file: batches}."""
    parts = OUTPUT_PARTITIONS.get(name, ())
    key = parts[0] if parts else "_day"
    rows = rows.sort_by([(key, "ascending"), ("batch_id", "ascending")])
    written: dict[str, list[int]] = {}
    for value in pc.unique(rows[key]).to_pylist():
        group = rows.filter(pc.equal(rows[key], pa.scalar(value, rows.schema.field(key).type)))
        group = group.drop_columns([c for c in ("_day", *parts) if c in group.column_names])
        for k, start in enumerate(range(0, group.num_rows, rows_per_file)):
            chunk = group.slice(start, rows_per_file)
            tag = uuid.uuid4().hex[:8]
            rel = (
                f"{key}={value}/part-{generation:08d}-{k:04d}-{tag}.parquet"
                if parts
                else f"part-{value}-{generation:08d}-{k:04d}-{tag}.parquet"
            )
            fs.create_dir(f"{where}/{rel}".rsplit("/", 1)[0], recursive=True)
            pq.write_table(chunk, f"{where}/{rel}", filesystem=fs)
            written[rel] = sorted(set(chunk["batch_id"].to_pylist()))
    return written


def _write_manifest(fs: pafs.FileSystem, base: str, name: str, manifest: Manifest) -> None:
    """The switch to a generation: written aside, then renamed into place (atomic)."""
    where = f"{compacted_dir(base, name)}/{MANIFESTS}"
    fs.create_dir(where, recursive=True)
    held = {"generation": manifest.generation, "files": manifest.files}
    if manifest.folded >= 0:
        held["folded"] = manifest.folded
    body = json.dumps(held).encode()
    final = f"{where}/{manifest.generation:08d}.json"
    if exists(fs, final):
        raise FileExistsError(f"{final}: another compaction of {name} ran at the same time")
    tmp = f"{where}/.{uuid.uuid4().hex}.tmp"
    with fs.open_output_stream(tmp) as f:
        f.write(body)
    fs.move(tmp, final)
