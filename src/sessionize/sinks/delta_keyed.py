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

from sessionize.errors import ConfigError
from sessionize.sinks.delta import DeltaSink


@dataclass(frozen=True)
class KeyedDeltaSink(DeltaSink):
    """Pickles as (root, job, the outputs' schemas and keys)."""

    # every output, in publish order (None: unknown, for the tools that only go back)
    schemas: tuple[tuple[str, pa.Schema | None], ...] = ()
    keys: tuple[tuple[str, tuple[str, ...]], ...] = ()  # the outputs replaced by key

    def invalidate_from(self, batch_id: int) -> list[int]:
        """As the Delta sink's, for the appended outputs; refused when an output is replaced
        by key (its rows of earlier batches are gone, so it cannot be set back). A sink made
        from a checkpoint's output names knows such an output by its table: no `batch_id`."""
        replaced = [name for name, _ in self.schemas if self._replaced(name)]
        if replaced:
            raise ConfigError(
                f"output(s) {', '.join(replaced)} are replaced by key and cannot be set back "
                f"to batch {batch_id - 1}; write the job to a new output instead"
            )
        return super().invalidate_from(batch_id)

    def published(self, name: str) -> list[int]:
        return [] if self._replaced(name) else super().published(name)

    def _replaced(self, name: str) -> bool:
        if name in dict(self.keys):
            return True
        dt = self.table(name)
        return dt is not None and "batch_id" not in [f.name for f in dt.schema().fields]

    def _appended_outputs(self) -> list[tuple[str, pa.Schema]]:
        replaced = dict(self.keys)
        return [(name, schema) for name, schema in self.schemas if name not in replaced]

    def _replaced_outputs(self) -> list[tuple[str, pa.Schema, pa.Schema, tuple[str, ...]]]:
        keys = dict(self.keys)
        return [(name, schema, pa.schema([schema.field(c) for c in keys[name]]), keys[name])
                for name, schema in self.schemas if name in keys]  # fmt: skip

    def _rebuilt_outputs(self) -> tuple[str, ...]:
        return ()  # refused instead: see invalidate_from

    def _partition_by(self, name: str) -> list[str] | None:
        return None
