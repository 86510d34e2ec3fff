"""Parquet outputs on an object store (`s3://`), published by commit files instead of rename.

Layout under the output root:

    ROOT/_staging/NAME/batch_id=N/...                        task output (staging.py)
    ROOT/NAME/batch_id=N/[session_date=D/]part-P-A.parquet   data of publish attempt A
    ROOT/NAME/_commits/batch_id=N/K.json                     commit K of batch N: its files

An object store has no rename, and copying a batch into place is neither atomic nor instant.
So `publish` copies the staged files (server-side) under names of its own attempt, then makes
them the batch's content by creating the batch's next commit file with a conditional PUT
(`If-None-Match: *`): of two writers of the same commit, one fails instead of both winning.
Files of older attempts and of attempts that never committed are deleted afterwards.

`read_committed` (and `published`) follow the commit files, so they see every batch whole or
not at all. A plain listing of `ROOT/NAME` (e.g. `spark.read.parquet`) sees the same rows
only while no publish runs: during a publish it can see part of the batch being copied in,
and while a batch is republished (or after a crash in its publish, until it is published
again) that batch's rows partially or twice.

A revising job's `session_revisions` and `page_view_revisions` (`--revise-within`) are
appended outputs like the others: the docs' current-sessions query over the committed
files of `sessions` and `session_revisions` gives the current sessions.
"""

from __future__ import annotations

import importlib.util
import json
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from sessionize import faults
from sessionize.errors import ConfigError, SinkError
from sessionize.fs import listing, without_options
from sessionize.objectstore import ObjectStoreUri
from sessionize.sinks import staging
from sessionize.sinks.base import Capabilities, RootedSink, sink_errors
from sessionize.sinks.outputs import Outputs, session_outputs

COMMITS = "_commits"


@dataclass(frozen=True)
class ManifestParquetSink(RootedSink):
    """Batch files published by commit files, on an object store (`s3://`)."""

    # `session_revisions` and `page_view_revisions` are appended outputs like the others:
    # published by their commit files, retired with them. Not compacted (no rename), so
    # there is nothing to fold revisions into.
    capabilities = Capabilities(appends_revisions=True)

    @classmethod
    def check_place(cls, uri: str) -> None:
        """Its owner record, lease and commit files are conditional PUTs (boto3)."""
        if importlib.util.find_spec("boto3") is None:
            raise ConfigError(
                "--output s3://: outputs on s3:// need the s3 extra (conditional writes: the "
                "owner record, the lease, Parquet's commit files): pip install 'sessionize[s3]'"
            )

    def committed(self, name: str) -> ds.Dataset | None:
        try:
            data = committed_dataset(self.root, name, self.outputs)
        except (FileNotFoundError, pa.ArrowInvalid):
            return None
        return data if data.files else None

    def _store(self) -> ObjectStoreUri:
        store = ObjectStoreUri.parse(self.root)
        if store is None:
            raise ConfigError(f"{self.root} is not an s3:// URI")
        return store

    def publish(self, batch_id: int) -> None:
        fs, base = self._fs()
        with sink_errors(f"publishing batch {batch_id} under {without_options(self.root)}"):
            opened = staging.attempt_open(fs, base, batch_id)
            for name in self.outputs.names:
                staged_root = staging.staged_dir(base, name, batch_id)
                staged = staging.staged_files(fs, base, name, batch_id)
                last = self._commits(fs, base, name, batch_id).get(batch_id)
                if not staged and (last is None or not last[1] or not opened):
                    continue  # nothing to remove, or a finished publish repeated
                attempt = uuid.uuid4().hex[:12]
                files = []
                for src in staged:
                    rel = src[len(staged_root) + 1 :].removesuffix(".parquet")
                    dest = f"batch_id={batch_id}/{rel}-{attempt}.parquet"
                    fs.copy_file(src, f"{base}/{name}/{dest}")
                    files.append(dest)
                version = 0 if last is None else last[0] + 1
                self._commit(name, batch_id, version, files)
                self._drop_uncommitted(fs, base, name, batch_id, set(files))
                faults.pause_point(f"published-{name}", batch_id)
            staging.close_attempt(fs, base, batch_id)

    def invalidate_from(self, batch_id: int) -> list[int]:
        fs, base = self._fs()
        retired = set()
        with sink_errors(f"removing batches from {batch_id} under {without_options(self.root)}"):
            for name in self.outputs.names:
                commits = self._commits(fs, base, name)
                for b, (version, files) in sorted(commits.items(), reverse=True):
                    if b >= batch_id and files:
                        self._commit(name, b, version + 1, [])
                        self._drop_uncommitted(fs, base, name, b, set())
                        retired.add(b)
        return sorted(retired)

    def rows_from(self, name: str, batch_id: int) -> int:
        fs, base = self._fs()
        batches = self._commits(fs, base, name)
        files = [
            f"{base}/{name}/{f}" for b, (_, fl) in batches.items() if b >= batch_id for f in fl
        ]
        if not files:
            return 0
        return ds.dataset(files, filesystem=fs, format="parquet").count_rows()

    def published(self, name: str) -> list[int]:
        fs, base = self._fs()
        return sorted(b for b, (_, f) in self._commits(fs, base, name).items() if f)

    def committed_files(self, name: str) -> list[str]:
        """Full paths (bucket/key) of the files of every committed batch of output `name`."""
        fs, base = self._fs()
        batches = self._commits(fs, base, name)
        return [f"{base}/{name}/{f}" for b in sorted(batches) for f in batches[b][1]]

    # -- commit files ----------------------------------------------------------------------
    def _commits(
        self, fs: pafs.FileSystem, base: str, name: str, batch_id: int | None = None
    ) -> dict[int, tuple[int, list[str]]]:
        """{batch: (latest commit version, its files)} of one output, or of one of its batches
        (a publish lists only its own batch, so its cost does not grow with the output)."""
        where = f"{base}/{name}/{COMMITS}"
        if batch_id is not None:
            where += f"/batch_id={batch_id}"
        latest: dict[int, tuple[int, str]] = {}
        for info in listing(fs, where, recursive=True):
            if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
                continue
            batch = int(info.path.rsplit("/", 2)[1].split("=", 1)[1])
            version = int(info.base_name.removesuffix(".json"))
            if batch not in latest or version > latest[batch][0]:
                latest[batch] = (version, info.path)
        batches = {}
        for batch, (version, path) in latest.items():
            with fs.open_input_stream(path) as f:
                batches[batch] = (version, json.loads(f.read())["files"])
        return batches

    def _commit(self, name: str, batch_id: int, version: int, files: list[str]) -> None:
        body = json.dumps({"batch_id": batch_id, "files": files}).encode()
        rel = f"{name}/{COMMITS}/batch_id={batch_id}/{version:08d}.json"
        if not self._store().put_if_absent(rel, body):
            raise SinkError(
                f"batch {batch_id} of {name} was committed by another writer at the same "
                "time: run one job per output"
            )

    @staticmethod
    def _drop_uncommitted(
        fs: pafs.FileSystem, base: str, name: str, batch_id: int, keep: set[str]
    ) -> None:
        prefix = f"{base}/{name}/"
        for info in listing(fs, f"{base}/{name}/batch_id={batch_id}", recursive=True):
            if info.type == pafs.FileType.File and info.path[len(prefix) :] not in keep:
                fs.delete_file(info.path)


def read_committed(root: str, name: str) -> pa.Table:
    """Every committed batch of output `name` (Parquet on s3://), with its partition columns."""
    return committed_dataset(root, name).to_table()


def committed_dataset(root: str, name: str, outputs: Outputs | None = None) -> ds.Dataset:
    """The files of every committed batch of output `name` (Parquet on s3://) as a dataset;
    `outputs` says its partition columns (default: the session outputs')."""
    outputs = outputs or session_outputs()
    sink = ManifestParquetSink(root, outputs=outputs)
    fs, base = sink._fs()
    parts = [pa.field("batch_id", pa.int64())]
    if name in outputs:
        spec = outputs.spec(name)
        parts += [spec.schema.field(p) for p in spec.partition_by if spec.schema is not None]
    dataset = ds.dataset(
        sink.committed_files(name),
        filesystem=fs,
        format="parquet",
        partitioning=ds.partitioning(pa.schema(parts), flavor="hive"),
        partition_base_dir=f"{base}/{name}",
    )
    return dataset
