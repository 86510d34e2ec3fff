"""Outputs replaced by key (`open_sessions`): what the sinks that support them share.

A task stages two things for such an output and batch: its new rows, and the keys it
touched (`keys_name(NAME)`: the output's key columns, `user_id` for `open_sessions`).
Publishing replaces, for every touched key, all the output's rows of that key by the key's
new rows (none: the key leaves the output). Staged like the appended outputs, so a retried
task overwrites its own files.
"""

from __future__ import annotations

import pyarrow as pa

from sessionize.errors import ConfigError
from sessionize.schema import OPEN_SESSIONS, Layout

KEY = "user_id"
REPLACED = (OPEN_SESSIONS, "identities")  # the session outputs replaced by key (with identity)


def keys_name(name: str) -> str:
    """The staged name of the keys a batch touched in output `name`."""
    return f"{name}_keys"


def key_table(keys: pa.Array, lay: Layout) -> pa.Table:
    return pa.table({KEY: pa.array(keys, lay.user_type)})


def key_schema(lay: Layout) -> pa.Schema:
    return pa.schema([pa.field(KEY, lay.user_type, nullable=False)])


def refuse(problem: str, instead: str) -> ConfigError:
    """The one line for an output or engine that cannot keep a replaced output."""
    return ConfigError(f"--open-sessions: {problem}; {instead}")
