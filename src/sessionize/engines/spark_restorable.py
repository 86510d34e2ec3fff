"""The Spark-managed state engine's backward half (engines/restorable.py): Spark's state
store versions in the checkpoint (`state/0/P/V.*`; batch B reads version B and commits B+1)
and the engine's batch records (`sessionize-batches/B.json`)."""

from __future__ import annotations

from typing_extensions import override

from sessionize.engines.restorable import RestorableState
from sessionize.engines.spark_logs import spark_state_versions, truncate_spark_state
from sessionize.engines.spark_state import BatchRecords
from sessionize.errors import ConfigError
from sessionize.fs import delete_dir, resolve_fs


class SparkRestorable(RestorableState):
    """A checkpoint of the `spark-rocksdb` / `spark-hdfs` engine."""

    def __init__(self, checkpoint: str):
        self.checkpoint = checkpoint

    @classmethod
    @override
    def at(
        cls, checkpoint: str, settings: dict, recorded_uri: str | None, given: str | None
    ) -> SparkRestorable:
        return cls(checkpoint)  # the state is in the checkpoint

    @override
    def floors(self) -> dict[str, int]:
        oldest = [v[0] - 1 for v in spark_state_versions(self.checkpoint).values() if v]
        return {"Spark's state store": max(oldest)} if oldest else {}

    @override
    def restorable(self, batches: set[int]) -> set[int]:
        return batches  # Spark keeps every version from its floor on

    @override
    def record(self, batch: int) -> dict | None:
        return BatchRecords(self.checkpoint).read(batch)

    @override
    def describe_drop(self, to_batch: int) -> str:
        versions = spark_state_versions(self.checkpoint)
        newest = max((v[-1] for v in versions.values() if v), default=None)
        if newest is None or newest <= to_batch + 1:
            return "no Spark state version"
        return f"Spark's state versions {to_batch + 2}..{newest} of {len(versions)} partitions"

    @override
    def truncate_after(self, to_batch: int) -> None:
        if to_batch == -1:
            fs, base = resolve_fs(self.checkpoint)
            delete_dir(fs, f"{base}/state")
        else:
            truncate_spark_state(self.checkpoint, to_batch + 1)
        BatchRecords(self.checkpoint).drop_after(to_batch)

    @override
    def check_readable(self, what: str) -> None:
        raise ConfigError(
            f"{what} keeps its state in Spark's state store; read it with Spark's state "
            "data source, or move it into ours with `sessionize state import`"
        )

    @override
    def check_importable(self, what: str) -> None:
        return None
