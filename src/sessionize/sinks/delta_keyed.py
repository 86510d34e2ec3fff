"""A stateful processor's outputs as Delta Lake tables: the Delta sink's commits with the
processor's declared outputs in place of the session outputs.

    ROOT/NAME/_delta_log/...         a table per output, created from its declared schema
    ROOT/_staging/NAME/batch_id=N/   task output of batch N, outside the tables

An appended output gets column `batch_id` and one commit per batch that overwrites
`batch_id = N` and records the job's transaction (as `delta.py`). An output replaced by key
has no `batch_id`: tasks also stage the keys they wrote or deleted (`NAME_keys`), and the
publish replaces every such key's rows by the batch's in one MERGE by the declared key
(`delta_replaced.py`), committed before the appended outputs; a replayed batch deletes and
inserts the same rows again, so the table ends the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from sessionize import faults
from sessionize.errors import ConfigError
from sessionize.fs import without_options
from sessionize.sinks import staging
from sessionize.sinks.base import sink_errors
from sessionize.sinks.delta import DeltaSink
from sessionize.sinks.delta_replaced import replace_by_key
from sessionize.sinks.replaced import keys_name


@dataclass(frozen=True)
class KeyedDeltaSink(DeltaSink):
    """Pickles as (root, job, the outputs' schemas and keys)."""

    # every output, in publish order (None: unknown, for the tools that only go back)
    schemas: tuple[tuple[str, pa.Schema | None], ...] = ()
    keys: tuple[tuple[str, tuple[str, ...]], ...] = ()  # the outputs replaced by key

    def write_keys(self, name: str, batch_id: int, partition: int, keys: pa.Table) -> int:
        """Stage the keys a task wrote or deleted in output `name` (replaced by key)."""
        return self.write_part(keys_name(name), batch_id, partition, keys)

    def publish(self, batch_id: int) -> None:
        """Replaced outputs by one MERGE each, then one commit per appended output."""
        fs, base = self._fs()
        replaced = dict(self.keys)
        with sink_errors(f"publishing batch {batch_id} to Delta tables under "
                         f"{without_options(self.root)}"):  # fmt: skip
            opened = staging.attempt_open(fs, base, batch_id)
            for name, schema in self.schemas:
                if name not in replaced:
                    continue
                key = replaced[name]
                rows = staging.read_staged(fs, base, name, batch_id, schema)
                keys = staging.read_staged(fs, base, keys_name(name), batch_id,
                                           pa.schema([schema.field(c) for c in key]))  # fmt: skip
                replace_by_key(self, name, batch_id, keys.drop_columns(["batch_id"]),
                               rows.drop_columns(["batch_id"]), replay=opened, key=key)  # fmt: skip
                faults.pause_point(f"published-{name}", batch_id)
            for name, schema in self.schemas:
                if name in replaced:
                    continue
                rows = staging.read_staged(fs, base, name, batch_id, schema)
                self._commit(name, batch_id, rows, replay=opened or rows.num_rows > 0)
                faults.pause_point(f"published-{name}", batch_id)
            staging.close_attempt(fs, base, batch_id)

    def invalidate_from(self, batch_id: int) -> list[int]:
        """As the Delta sink's, for the appended outputs; refused when an output is replaced
        by key (its rows of earlier batches are gone, so it cannot be set back). A sink made
        from a checkpoint's output names knows such an output by its table: no `batch_id`."""
        from deltalake import CommitProperties, Transaction

        replaced = [name for name, _ in self.schemas if self._replaced(name)]
        if replaced:
            raise ConfigError(
                f"output(s) {', '.join(replaced)} are replaced by key and cannot be set back "
                f"to batch {batch_id - 1}; write the job to a new output instead"
            )
        retired: set[int] = set()
        with sink_errors(f"removing batches from {batch_id} under {without_options(self.root)}"):
            for name, _ in self.schemas:
                found = [b for b in self.published(name) if b >= batch_id]
                if found:
                    props = CommitProperties(
                        app_transactions=[Transaction(self.job, batch_id - 1)],
                        custom_metadata={"sessionize.retired_from": str(batch_id)},
                    )
                    self.table(name).delete(f"batch_id >= {batch_id}", commit_properties=props)
                    retired |= set(found)
        return sorted(retired)

    def published(self, name: str) -> list[int]:
        return [] if self._replaced(name) else super().published(name)

    def _replaced(self, name: str) -> bool:
        if name in dict(self.keys):
            return True
        dt = self.table(name)
        return dt is not None and "batch_id" not in [f.name for f in dt.schema().fields]

    def _partition_by(self, name: str) -> list[str] | None:
        return None
