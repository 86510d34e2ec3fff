"""`sessionize state import`: move a checkpoint off Spark's state store (`spark-rocksdb`,
`spark-hdfs`) into one of ours, without replaying.

Spark's state at its last committed batch B is read with Spark's `statestore` data source
(read-only; the checkpoint is never written by it): the open events of every user, kept by
the `spark` engine as a ListState (RocksDB) or as one Arrow IPC value (HDFS-backed). They
are the `store` engine's state rows. Users are placed into partitions as the `store`
engine places them, written as version B, verified, and the job record of B is built from
Spark's logs: the watermark and max event time from the commit log's next-batch watermark,
the totals from the engine's batch record. Then the checkpoint switches to the new state,
and Spark's state of the stateful operator moves aside to `CHECKPOINT/spark-state/`
(Spark refuses a query that lost a stateful operator while that operator's state is in
place; the content is kept).

Spark emits a session one batch after the store engine would (see engines/spark_state.py):
its state at B may still hold sessions whose `closed_at` is before B's watermark. The
store engine's next batch expires them first thing, so they are written once, by batch
B + 1, as Spark would have.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sessionize.commands.options import recorded_state
from sessionize.commands.statetools.contents import USER, canonical
from sessionize.commands.statetools.copy import (
    CopyResult,
    check_target,
    partition_meta,
    place_rows,
    verify,
)
from sessionize.commands.statetools.job import StateJob, locate
from sessionize.commands.statetools.switch import already_switched, switch_checkpoint
from sessionize.engines.checkpoint import last_committed_batch
from sessionize.engines.placement import user_partitions
from sessionize.engines.sessions import state_settings
from sessionize.engines.spark_state import BatchRecords
from sessionize.errors import StateError
from sessionize.faults import pause_point
from sessionize.fs import resolve_fs
from sessionize.redaction import redact_uri
from sessionize.schema import STATE_EXPIRY, STATE_USER_KEY, TS
from sessionize.spark_arrow import arrow_of, frame_of
from sessionize.spark_session import get_spark
from sessionize.state import EMPTY_VERSION

# Where Spark's own state goes once the checkpoint runs on ours.
SPARK_STATE_KEPT = "spark-state"


def import_spark_state(
    checkpoint: str,
    to: str,
    *,
    partitions: int | None = None,
    spark: SparkSession | None = None,
    on_line: Callable[[str], None] = print,
) -> CopyResult | None:
    """Read Spark's state of `checkpoint` at its last committed batch into `to` (a `--state`
    value), verify it and switch the checkpoint to it."""
    if already_switched(checkpoint, to, partitions):
        retire_spark_state(checkpoint)
        on_line(f"checkpoint {checkpoint} already runs on state {redact_uri(to)}: nothing to do")
        return None
    sj = locate(checkpoint, None)
    assert sj.engine is not None  # a stream's
    sj.engine.check_importable(sj.what)
    count = partitions or sj.partitions
    with sj.lease():
        batch = last_committed_batch(checkpoint)
        if batch is None:
            raise StateError(f"checkpoint {checkpoint} has no committed batch: nothing to import")
        target = sj.open(sj.resolve(to))
        record = job_record(sj, batch)
        check_target(target, sj.job, batch, record)
        t0 = time.perf_counter()
        spark = spark or get_spark("sessionize-state-import", shuffle_partitions=count)
        rows = read_spark_state(spark, sj, batch)
        on_line(
            f"read {len(pc.unique(rows[USER])):,} open users from Spark's "
            f"{sj.state} state at batch {batch}"
        )
        assign = functools.partial(user_partitions, spark)
        tables = place_rows([rows], count, assign, sj.layout)
        for p, part in enumerate(tables):
            with target.open(sj.job, p, EMPTY_VERSION) as tx:
                tx.put_many(part)
                tx.commit(batch, partition_meta(part, sj.rules, sj.layout))
            pause_point("state-copy-partition", p)
        copied = verify(target, sj.job, batch, tables, sj.layout)
        settings = state_settings(sj.session_rules, count, sj.session_mapping)
        target.write_job_settings(sj.job, settings)
        target.write_job_record(sj.job, batch, record)
        pause_point("before-switch", batch)
        switch_checkpoint(checkpoint, recorded_state(to), count)
        retire_spark_state(checkpoint)
        on_line(
            f"checkpoint {checkpoint} switched to state {recorded_state(to)}: "
            f"continue with `sessionize stream --state {redact_uri(to)} --partitions "
            f"{count}` (Spark's state is kept, unused, in {checkpoint}/"
            f"{SPARK_STATE_KEPT})"
        )
        return CopyResult(batch, copied, time.perf_counter() - t0)


def retire_spark_state(checkpoint: str) -> None:
    """Move Spark's state of the stateful operator aside, once the checkpoint has switched:
    Spark refuses a query without that operator while its state is in place. Content is
    kept as it was; a rerun of the import completes a move a crash interrupted."""
    fs, base = resolve_fs(checkpoint)
    operator = f"{base}/state/0"
    if fs.get_file_info(f"{operator}/_metadata").type == pafs.FileType.NotFound:
        return
    fs.create_dir(f"{base}/{SPARK_STATE_KEPT}", recursive=True)
    fs.move(operator, f"{base}/{SPARK_STATE_KEPT}/0")


def read_spark_state(spark: SparkSession, sj: StateJob, batch: int) -> pa.Table:
    """The open events in Spark's state at `batch`, as the job's stored rows."""
    shape = sj.layout
    reader = spark.read.format("statestore").option("batchId", batch)
    if sj.state == "spark-rocksdb":
        df = reader.option("stateVarName", "open_events").load(sj.checkpoint)
        table = arrow_of(df.selectExpr("key.key AS user_id", "list_element.*"))
        if table.num_rows:
            table = table.append_column("event_time", table["event_us"].cast(TS))
            table = table.append_column(STATE_EXPIRY, table["expires_us"].cast(TS))
    else:
        df = reader.load(sj.checkpoint)
        blobs = arrow_of(df.selectExpr("value.groupState.open_events AS b"))["b"].to_pylist()
        parts = [pa.ipc.open_stream(pa.py_buffer(b)).read_all() for b in blobs if b]
        table = pa.concat_tables(parts) if parts else pa.table({})
    if not table.num_rows:
        return shape.stored.empty_table()
    table = table.select(shape.state.names).cast(shape.state)
    if shape.string_keys:
        table = _with_user_keys(spark, table)
    return canonical(table, shape)


def _with_user_keys(spark: SparkSession, rows: pa.Table) -> pa.Table:
    """String ids: each row's store key, hashed by Spark as the engine hashes it."""
    users = pa.table({USER: pc.unique(rows[USER])})
    keyed = arrow_of(frame_of(spark, users).select(USER, F.xxhash64(USER).alias(STATE_USER_KEY)))
    return rows.join(keyed, USER)


def job_record(sj: StateJob, batch: int) -> dict:
    """The store engine's record of `batch`, from Spark's logs: the watermark after it
    (Spark's watermark for the next batch), the max event time it implies, the totals."""
    fs, base = resolve_fs(str(sj.checkpoint))
    with fs.open_input_stream(f"{base}/commits/{batch}") as f:
        lines = f.read().decode().splitlines()
    next_ms = int(json.loads(lines[1]).get("nextBatchWatermarkMs", 0)) if len(lines) > 1 else 0
    watermark = next_ms * 1000 if next_ms > 0 else None
    spark_record = BatchRecords(str(sj.checkpoint)).read(batch) or {}
    return {
        "version": batch,
        "previous": batch - 1,
        "watermark": watermark,
        "max_event_time": None if watermark is None else watermark + sj.session_rules.lateness_us,
        "batch": spark_record.get("batch", {}),
        "totals": spark_record.get("totals", {}),
        "imported_from": sj.state,
    }
