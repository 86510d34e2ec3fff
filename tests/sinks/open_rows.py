"""Batches of an output replaced by user (`open_sessions`) for sink tests, and a process that
publishes one of them: `python -m tests.sinks.open_rows KIND ROOT BATCH`. Crash tests stop it
at a pause point (SESSIONIZE_PAUSE_AT) and kill it.

Batch 0 touches users 1 and 2 (open sessions `a` and `b`); batch 1 touches users 2 and 3:
`b` is emitted to `sessions` (user 2 has nothing open left), user 3 opens `c`.
"""

from __future__ import annotations

import sys

import pyarrow as pa

from sessionize.schema import layout
from sessionize.sinks.base import Sink
from sessionize.sinks.registry import open_sink
from tests.sinks.rows import T0, sessions

BATCHES = {0: ({1: "a", 2: "b"}, []), 1: ({2: None, 3: "c"}, ["b"])}  # touched, emitted
OPEN_AFTER = {0: {1: "a", 2: "b"}, 1: {1: "a", 3: "c"}}


def open_sink_of(kind: str, root: str) -> Sink:
    fmt = "delta" if kind.startswith("delta") else "parquet"
    return open_sink(root, fmt, job="job-a", open_sessions=True)


def open_rows(users: dict[int, str]) -> pa.Table:
    lay = layout()
    rows = sessions(list(users.values())).set_column(1, "user_id", pa.array(list(users)))
    rows = rows.append_column("expires_at", pa.array([T0] * rows.num_rows, rows["closed_at"].type))
    return rows.cast(lay.open_sessions.remove(lay.open_sessions.get_field_index("updated_batch")))


def stage_open(sink: Sink, batch_id: int) -> None:
    touched, emitted = BATCHES[batch_id]
    opened = {u: s for u, s in touched.items() if s is not None}
    for part, users in enumerate(([min(touched)], [max(touched)])):  # one user per task
        mine = {u: s for u, s in opened.items() if u in users}
        rows = open_rows(mine)
        tagged = rows.append_column("updated_batch", pa.array([batch_id] * rows.num_rows))
        keys = pa.table({"user_id": pa.array(users, pa.int64())})
        sink.write_replaced("open_sessions", batch_id, part, keys, tagged)
    sink.write_part("sessions", batch_id, 0, sessions(emitted, first_user=2))


def publish(sink: Sink, batch_id: int) -> None:
    sink.clear_staging(batch_id)
    stage_open(sink, batch_id)
    sink.publish(batch_id)


if __name__ == "__main__":
    publish(open_sink_of(sys.argv[1], sys.argv[2]), int(sys.argv[3]))
