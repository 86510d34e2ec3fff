"""The four outputs as Delta Lake tables (delta-rs, no JVM), local or on `s3://`.

    ROOT/NAME/_delta_log/...         a Delta table per output, column `batch_id` added
    ROOT/_staging/NAME/batch_id=N/   task output of batch N (staging.py), outside the tables

Tasks cannot commit to a Delta table concurrently, so they stage Parquet as the Parquet sink
does; the driver's `publish` reads a batch's staged rows and commits them to each table in one
`write_deltalake` call: an overwrite of `batch_id = N` (a replayed batch replaces its rows,
never adds to them) that records the transaction (app id = job, version = N). Every table
version holds whole batches only. A `publish` called again with nothing newly staged (a
retried driver step) sees that transaction and commits nothing.

For readers: `sessions` is partitioned by `session_date` (the usual filter), the other tables
are not partitioned (they are small; a partition per batch would make many small files).
Each file holds one batch until compaction, so `batch_id` filters skip files by their
statistics. With `--open-sessions` the table `open_sessions` (no `batch_id`: rows carry
`updated_batch`) is replaced by user in one MERGE per batch, committed before the others
(`delta_replaced.py`). With `--revise-within`, `sessions` and `page_views` are kept
current by `session_id` (`delta_revised.py`). No deletion vectors, column mapping or other
table features are used (reader version 1, writer version 2), so Spark's Delta, DuckDB
`delta_scan`, Polars and Trino read them. `compact_and_vacuum` is the maintenance step.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa
import pyarrow.dataset as ds

from sessionize.errors import ConfigError
from sessionize.fs import without_options
from sessionize.objectstore import ObjectStoreUri
from sessionize.sinks import delta_revised as revised
from sessionize.sinks.base import Capabilities, RootedSink
from sessionize.sinks.base import sink_errors as _errors
from sessionize.sinks.delta_replaced import clear_replaced, replace_by_key
from sessionize.sinks.outputs import OutputSpec

# Kept with each table, for readers and for `compact_and_vacuum`.
TABLE_PROPERTIES = {
    "delta.deletedFileRetentionDuration": "interval 7 days",
    "delta.logRetentionDuration": "interval 30 days",
}


@dataclass(frozen=True)
class DeltaSink(RootedSink):
    """Tables are opened per call. An appended output's table is created from its schema
    plus `batch_id`; an output replaced by key has its declared columns only."""

    capabilities = Capabilities(replaces_by_key=True, keeps_current=True, upserts_revisions=True)
    table_properties: ClassVar[dict[str, str]] = TABLE_PROPERTIES  # of the tables it creates

    @classmethod
    def check_place(cls, uri: str) -> None:
        if "://" in uri and not uri.startswith(("s3://", "file://")):
            raise ConfigError(
                f"Delta outputs go to a local path or an s3:// URI, not {without_options(uri)}"
            )
        if uri.startswith("s3://") and importlib.util.find_spec("boto3") is None:
            raise ConfigError(
                "--output s3://: outputs on s3:// need the s3 extra (conditional writes: the "
                "owner record, the lease): pip install 'sessionize[s3]'"
            )

    def committed(self, name: str) -> ds.Dataset | None:
        dt = self.table(name)
        return None if dt is None else dt.to_pyarrow_dataset()

    # -- locations -------------------------------------------------------------------------
    def table_uri(self, name: str) -> str:
        s3 = ObjectStoreUri.parse(self.root)
        return s3.child(name) if s3 else f"{self._fs()[1]}/{name}"

    def storage_options(self) -> dict[str, str] | None:
        s3 = ObjectStoreUri.parse(self.root)
        return s3.storage_options() if s3 else None

    def table(self, name: str):  # -> DeltaTable | None
        from deltalake import DeltaTable

        uri, opts = self.table_uri(name), self.storage_options()
        if not DeltaTable.is_deltatable(uri, storage_options=opts):
            return None
        return DeltaTable(uri, storage_options=opts)

    # -- the Sink protocol -----------------------------------------------------------------
    def publish(self, batch_id: int) -> None:
        """Commit the staged batch to each table (one commit per table), then drop staging."""
        where = without_options(self.root)
        with _errors(f"publishing batch {batch_id} to Delta tables under {where}"):
            self._publish_tables(batch_id)

    def invalidate_from(self, batch_id: int) -> list[int]:
        """Delete batches >= batch_id: one commit per table that has any. The commit also sets
        the job's transaction version back to batch_id - 1, so that the table again takes
        the commits of those batches when they are recomputed (a publish of a batch the
        transaction version covers is skipped when nothing new was staged)."""
        from deltalake import CommitProperties, Transaction

        kept = [n for n in self.outputs.names if self._replaced(n) and n not in self._rebuilt]
        if kept:
            raise ConfigError(
                f"output(s) {', '.join(kept)} are replaced by key and cannot be set back "
                f"to batch {batch_id - 1}; write the job to a new output instead"
            )
        retired: set[int] = set()
        with _errors(f"removing batches from {batch_id} under {without_options(self.root)}"):
            retired |= revised.undo(self, batch_id)  # before: its side rows are undone
            for name in self.outputs.names:
                if self._replaced(name):
                    continue
                dt = self.table(name)
                if dt is None:
                    continue
                found = _batch_ids(dt, batch_id)
                if found:
                    props = CommitProperties(
                        app_transactions=[Transaction(self.job, batch_id - 1)],
                        custom_metadata={"sessionize.retired_from": str(batch_id)},
                    )
                    dt.delete(f"batch_id >= {batch_id}", commit_properties=props)
                    retired |= set(found)
            for name in self._rebuilt:
                clear_replaced(self, name)
        return sorted(retired)

    def replaced_as_of(self, name: str) -> int | None:
        dt = self.table(name)
        done = None if dt is None else dt.transaction_version(self.job)
        return None if done is None or done < 0 else done

    def rows_from(self, name: str, batch_id: int) -> int:
        from deltalake import QueryBuilder

        dt = self.table(name)
        if dt is None or self._replaced(name):
            return 0  # replaced by key: emptied and rebuilt, not removed by batch
        folded = revised.revising(self.outputs) and name == revised.SESSIONS
        written = revised.REVISED_BATCH if folded else "batch_id"  # a revision's too
        sql = f"SELECT count(*) AS n FROM t WHERE {written} >= {int(batch_id)}"
        rows = pa.table(QueryBuilder().register("t", dt).execute(sql).read_all())
        return int(rows["n"][0].as_py())

    def published(self, name: str) -> list[int]:
        if self._replaced(name):
            return []
        dt = self.table(name)
        return _batch_ids(dt, 0) if dt is not None else []

    # -- commits ---------------------------------------------------------------------------
    def _replace_table(
        self, spec: OutputSpec, batch_id: int, keys: pa.Table, rows: pa.Table, *, replay: bool
    ) -> None:
        replace_by_key(self, spec.name, batch_id, keys, rows, replay=replay, key=spec.key)

    def _append_table(
        self, spec: OutputSpec, batch_id: int, rows: pa.Table, *, replay: bool
    ) -> None:
        from deltalake import CommitProperties, Transaction, write_deltalake

        name = spec.name
        if revised.revising(self.outputs) and name in revised.FOLDED:
            if name == revised.SESSIONS:  # the four folded into sessions and page_views
                revised.publish(self, batch_id, replay=replay)
            return
        dt = self.table(name)
        if dt is not None and not replay:
            done = dt.transaction_version(self.job)
            if done is not None and done >= batch_id:
                return  # this batch's commit is in the table already and nothing new was staged
        props = CommitProperties(
            app_transactions=[Transaction(self.job, batch_id)],
            custom_metadata={"sessionize.batch_id": str(batch_id)},
        )
        write_deltalake(
            dt if dt is not None else self.table_uri(name),
            rows,
            mode="overwrite",
            predicate=f"batch_id = {batch_id}",
            partition_by=list(spec.partition_by) or None,
            configuration=TABLE_PROPERTIES if dt is None else None,
            storage_options=self.storage_options() if dt is None else None,
            commit_properties=props,
        )

    # -- the outputs ---------------------------------------------------------------------
    @property
    def _rebuilt(self) -> tuple[str, ...]:
        """The outputs replaced by key that removing batches empties for a rebuild (whether
        or not this run keeps them: a table left by an earlier run must not outlive them)."""
        return self.outputs.rebuilt

    def _replaced(self, name: str) -> bool:
        """Whether `name` is replaced by key: declared so, or known by name only (a sink
        made from a checkpoint's output names) and its table has no `batch_id`."""
        if name in self.outputs and self.outputs.spec(name).replaced:
            return True
        if name in self._rebuilt:
            return True
        known = name in self.outputs and self.outputs.schema(name) is not None
        if known:
            return False
        dt = self.table(name)
        return dt is not None and "batch_id" not in [f.name for f in dt.schema().fields]


def _batch_ids(dt, first: int) -> list[int]:
    """Batch ids >= first in a table, by delta-rs' own query engine: reading a table on S3
    through pyarrow's dataset layer while pyarrow's S3 filesystem is in use can abort the
    process at exit."""
    from deltalake import QueryBuilder

    sql = f"SELECT DISTINCT batch_id FROM t WHERE batch_id >= {int(first)} ORDER BY batch_id"
    rows = pa.table(QueryBuilder().register("t", dt).execute(sql).read_all())
    return rows["batch_id"].to_pylist()


def compact_and_vacuum(
    sink: DeltaSink, retention_hours: int | None = 168, *, compact: bool = True
) -> dict[str, dict]:
    """Bin-pack small files (one per task and batch), then delete files no version within
    `retention_hours` uses (None: no vacuum); readers of older versions lose them. The
    side tables of `--revise-within` too, where they are."""
    out = {}
    with _errors(f"compacting Delta tables under {without_options(sink.root)}"):
        for name in (*sink.outputs.names, *revised.SIDE_TABLES):
            dt = sink.table(name)
            if dt is None:
                continue
            out[name] = {"compaction": dt.optimize.compact() if compact else None}
            if retention_hours is not None:
                removed = dt.vacuum(
                    retention_hours=retention_hours,
                    dry_run=False,
                    enforce_retention_duration=retention_hours >= 168,
                )
                out[name]["vacuumed_files"] = len(removed)
    return out
