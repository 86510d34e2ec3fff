"""A processor with a follow-on (`stateful.FollowOn`), for the chained step's tests: visits
numbered per device by the first step (keyed by `device`) and per user by the follow-on
(keyed by `user`, another key, so a user's visits come from several partitions of the first
step), with a plain loop as the reference. Run as a module it is a stream on Spark
(examples/_batches.py), for the kill -9 test."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from sessionize import stateful

TS = pa.timestamp("us", tz="UTC")
EVENTS = pa.schema([("device", pa.int64()), ("user", pa.string()), ("t", TS)])
VISITS = pa.schema([*EVENTS, ("device_seq", pa.int64())])
NUMBERED = pa.schema([*VISITS, ("user_seq", pa.int64())])
USERS = pa.schema([("user", pa.string()), ("visits", pa.int64())])


def _numbered(
    state: pa.Table, rows: pa.Table, key: str, count: str, order: list[str], seq: str
) -> tuple[pa.Table, pa.Table]:
    """`rows` in (key, *order) order with `seq` = the key's stored `count` + its rank in
    the batch; and the keys' new counts."""
    rows = rows.sort_by([(key, "ascending"), *((c, "ascending") for c in order)])
    before = dict(zip(state[key].to_pylist(), state[count].to_pylist(), strict=True))
    seen: dict = {}
    numbers = []
    for k in rows[key].to_pylist():
        seen[k] = seen.get(k, before.get(k, 0)) + 1
        numbers.append(seen[k])
    counts = pa.table(
        {key: pa.array(list(seen), state.schema.field(key).type), count: list(seen.values())}
    )
    return rows.append_column(seq, pa.array(numbers, pa.int64())), counts


class Users(stateful.Processor):
    """The follow-on: each visit numbered per user in (time, device) order; a row per user
    seen in the batch with their visits so far."""

    key = "user"
    state_schema = USERS
    outputs = {"visits": NUMBERED, "users": USERS}

    def process(self, state, rows, ctx):
        numbered, counts = _numbered(state, rows, "user", "visits", ["t", "device"], "user_seq")
        return stateful.Update(
            state=counts,
            outputs={"visits": numbered.select(NUMBERED.names), "users": counts},
            counters={"users_seen": counts.num_rows},
        )


class Devices(stateful.Processor):
    """The first step: each visit numbered per device in time order, handed to `Users`."""

    key = "device"
    event_time = "t"
    state_schema = pa.schema([("device", pa.int64()), ("seen", pa.int64())])
    outputs = {"visits": VISITS}
    follow_on = stateful.FollowOn("visits", Users(), job="users")

    def process(self, state, rows, ctx):
        numbered, counts = _numbered(state, rows, "device", "seen", ["t"], "device_seq")
        return stateful.Update(
            state=counts,
            outputs={"visits": numbered.select(VISITS.names)},
            counters={"visits": numbered.num_rows},
        )


def reference(batches: list[list[dict]]) -> tuple[list[set], list[set]]:
    """The plain loop: per batch, the events in (time, device) order numbered per device
    and per user; the users of the batch with their visits so far. Returns the visits and
    the users of each batch as sets of tuples."""
    device: dict[int, int] = {}
    user: dict[str, int] = {}
    visits, users = [], []
    for batch in batches:
        got = set()
        for e in sorted(batch, key=lambda e: (e["t"], e["device"])):
            device[e["device"]] = device.get(e["device"], 0) + 1
            user[e["user"]] = user.get(e["user"], 0) + 1
            got.add((e["device"], e["user"], e["t"], device[e["device"]], user[e["user"]]))
        visits.append(got)
        users.append({(u, user[u]) for u in {e["user"] for e in batch}})
    return visits, users


def per_batch(table: pa.Table, columns: list[str], batches: int) -> list[set]:
    """An output's rows as a set of tuples per batch (times as µs)."""
    got: list[set] = [set() for _ in range(batches)]
    cols = [
        table[c].cast(TS).cast(pa.int64()) if pa.types.is_timestamp(table[c].type) else table[c]
        for c in columns
    ]
    for b, *row in zip(table["batch_id"].to_pylist(), *(c.to_pylist() for c in cols), strict=True):
        got[b].add(tuple(row))
    return got


def table_of(batch: list[dict]) -> pa.Table:
    return pa.table(
        {
            "device": pa.array([e["device"] for e in batch], pa.int64()),
            "user": pa.array([e["user"] for e in batch], pa.string()),
            "t": pc.cast(pa.array([e["t"] for e in batch], pa.int64()), TS),
        }
    )


def main() -> None:
    from examples import _batches

    _batches.main(__doc__.splitlines()[0], Devices(), [], EVENTS, EVENTS)


if __name__ == "__main__":
    main()
