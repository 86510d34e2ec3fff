"""What a job writes, as every sink takes it: each output's name, columns, and whether it is
appended per batch or replaced by key (docs/design.md, "Sinks").

A session job declares the session outputs of its event mapping (`session_outputs`); a
processor's job its processor's declared outputs, its late output and `invalid`
(engines/keyed.py). A sink never asks which kind of job it serves: it writes the outputs
it is given, a table or a topic per output, keyed as they say.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from sessionize.base_schema import (
    PAGE_VIEW_REVISIONS,
    SESSION_REVISIONS,
    STITCHED_USER_ID,
    USERS_OUTPUT,
)
from sessionize.mapping import EventMapping
from sessionize.schema import OPEN_SESSIONS, OUTPUT_PARTITIONS, layout


@dataclass(frozen=True)
class OutputSpec:
    """One output.

    Args:
        name: the output's name: its directory, table or topic suffix.
        schema: its columns (None: known by name only, for the tools that go back).
        key: the columns that identify a row of an output replaced by key; () for an
            output appended per batch.
        partition_by: the columns whose values partition it (a directory level or an
            Iceberg partition).
        record_key: the column that keys its Kafka records when it is not the job's
            (`users`, a change log of stitched users, by `stitched_user_id`).
    """

    name: str
    schema: pa.Schema | None = None
    key: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    record_key: str | None = None

    @property
    def replaced(self) -> bool:
        return bool(self.key)

    def key_schema(self) -> pa.Schema:
        """The columns of the keys a task stages for an output replaced by key."""
        assert self.schema is not None, self.name
        return pa.schema([self.schema.field(c).with_nullable(False) for c in self.key])


@dataclass(frozen=True)
class Outputs:
    """A job's outputs, in publish order (replaced by key first, then appended).

    Args:
        specs: the outputs this job writes.
        record_key: the job's key column (`user_id` for sessions, a processor's `key`):
            what keys a record written to Kafka, where an output has it.
        rebuilt: outputs replaced by key that the engine rebuilds from its state once
            batches are removed (sessions' `open_sessions`): a removal of batches empties
            them, whether or not this run writes them. Any other output replaced by key
            cannot be set back, and a removal of batches is refused.

    >>> session_outputs().names
    ('sessions', 'page_views', 'late_events', 'invalid_events')
    """

    specs: tuple[OutputSpec, ...]
    record_key: str | None = None
    rebuilt: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.specs)

    @property
    def appended(self) -> tuple[OutputSpec, ...]:
        return tuple(s for s in self.specs if not s.replaced)

    @property
    def replaced(self) -> tuple[OutputSpec, ...]:
        return tuple(s for s in self.specs if s.replaced)

    def spec(self, name: str) -> OutputSpec:
        for s in self.specs:
            if s.name == name:
                return s
        raise KeyError(name)

    def schema(self, name: str) -> pa.Schema | None:
        return self.spec(name).schema

    def record_key_of(self, name: str) -> str | None:
        """The column that keys output `name`'s Kafka records: its own, else the job's."""
        return self.spec(name).record_key or self.record_key

    def __contains__(self, name: object) -> bool:
        return name in self.names


def named(names: tuple[str, ...] | list[str], record_key: str | None = None) -> Outputs:
    """Outputs known by name only (a checkpoint's record of them), appended."""
    return Outputs(tuple(OutputSpec(n) for n in names), record_key)


IDENTITIES = "identities"


def session_outputs(
    mapping: EventMapping | None = None,
    open_sessions: bool = False,
    keeps_current: bool = False,
    revise: bool = False,
) -> Outputs:
    """The session outputs of `mapping`: `open_sessions` (replaced by the key, `user_id` or
    with identity `anonymous_id`, when kept) first, then the appended ones, `sessions`
    partitioned by `session_date`. With identity and a sink that `keeps_current` tables,
    `identities` is replaced by `anonymous_id` too (one row per anonymous id) and `users` by
    `stitched_user_id`, both rebuilt like `open_sessions` once batches are removed;
    elsewhere they are appended (change logs; `users`' Kafka records keyed by
    `stitched_user_id`). With `revise` (`--revise-within`), `session_revisions` and
    `page_view_revisions` follow `page_views`, appended (each batch's revised and retracted
    sessions; docs/concepts/revisions.md)."""
    lay = layout(mapping)
    current = lay.identity and keeps_current
    specs = [
        OutputSpec(
            name,
            schema,
            partition_by=OUTPUT_PARTITIONS.get(name, ()),
            record_key=STITCHED_USER_ID if name == USERS_OUTPUT else None,
        )
        for name, schema in lay.outputs.items()
        if not (current and name == IDENTITIES)
    ]
    if revise:
        at = 1 + next(i for i, s in enumerate(specs) if s.name == "page_views")
        specs[at:at] = [
            OutputSpec(SESSION_REVISIONS, lay.session_revisions),
            OutputSpec(PAGE_VIEW_REVISIONS, lay.page_views),
        ]
    rebuilt: tuple[str, ...] = (OPEN_SESSIONS,)
    if current:  # `users` too: one row per stitched user, kept like `identities`
        specs = [s for s in specs if s.name != USERS_OUTPUT]
        specs.insert(0, OutputSpec(USERS_OUTPUT, lay.users, key=(STITCHED_USER_ID,)))
        specs.insert(0, OutputSpec(IDENTITIES, lay.identities, key=(lay.key_name,)))
        rebuilt = (OPEN_SESSIONS, IDENTITIES, USERS_OUTPUT)
    if open_sessions:
        specs.insert(0, OutputSpec(OPEN_SESSIONS, lay.open_sessions, key=(lay.key_name,)))
    return Outputs(tuple(specs), record_key=lay.key_name, rebuilt=rebuilt)
