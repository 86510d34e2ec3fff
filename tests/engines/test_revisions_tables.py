"""`--revise-within` on Delta, PostgreSQL and Iceberg (docs/concepts/revisions.md): `sessions` and
`page_views` kept current by `session_id`. After a file-by-file stream whose held-back
files revise and retract sessions, the tables equal `sessionize batch` over every event;
a kill -9 in a revising batch's publish (Delta: between its table commits; PostgreSQL:
once its transaction committed), then a restart, gives the uninterrupted run's tables; a
rewind sets them back to those of a run stopped at that batch (the superseded rows put
back), and a restart from there gives the uninterrupted run's again. Iceberg commits in
Delta's order and is killed at the same point, so the kill test stays on the other two;
its rewind test restarts from that kill.

Tables are read with each format's own client (psycopg, delta-rs, pyiceberg), never the
sink."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from sessionize.commands.stream import StreamOptions, run_stream
from tests.engines.revising import (
    FLUSH_USER,
    MAPPING,
    REVISING_BATCH,
    RULES,
    Postgres,
    batch_of_every_event,
    revising_args,
    revising_input,
)
from tests.helpers import cli_env, run_until_killed, sessionize

# What the upserts add, and what the batch run's rows carry instead.
BOOKKEEPING = {"batch_id", "revision", "revised_batch"}
TABLES = ("sessions", "page_views", "sessions_superseded", "page_views_superseded")
OUTPUTS = (*TABLES, "late_events", "invalid_events")


class Delta:
    """Local Delta tables, read by delta-rs' own query engine."""

    format = "delta"
    kill_point = "revised-sessions"  # `sessions` committed, `page_views` not yet

    def output(self, root: Path) -> str:
        return str(root / "out")

    def state(self, _root: Path) -> str:
        return "files"

    def rows(self, output: str, name: str) -> list[dict]:
        from deltalake import DeltaTable, QueryBuilder

        if not DeltaTable.is_deltatable(f"{output}/{name}"):
            return []  # not written yet (a side table before anything was superseded)
        table = QueryBuilder().register("t", DeltaTable(f"{output}/{name}"))
        return pa.table(table.execute("SELECT * FROM t").read_all()).to_pylist()

    def close(self) -> None:
        """tmp_path's."""


class Iceberg:
    """Iceberg tables in a SQLite catalog of their own, read by pyiceberg."""

    format = "parquet"  # the default: an iceberg:// output has its own
    kill_point = "revised-sessions"  # as Delta: `sessions` committed, `page_views` not yet

    def output(self, root: Path) -> str:
        root.mkdir(parents=True, exist_ok=True)
        return (
            f"iceberg://rev_{uuid.uuid4().hex[:8]}?uri=sqlite:///{root}/catalog.db"
            f"&warehouse=file://{root}/warehouse"
        )

    def state(self, root: Path) -> str:
        return f"files:{root / 'state'}"

    def rows(self, output: str, name: str) -> list[dict]:
        from urllib.parse import parse_qsl, urlsplit

        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.exceptions import NoSuchTableError

        parts = urlsplit(output)
        catalog = SqlCatalog("default", **dict(parse_qsl(parts.query)))
        try:
            return catalog.load_table((parts.netloc, name)).scan().to_arrow().to_pylist()
        except NoSuchTableError:
            return []  # not written yet (a side table before anything was superseded)

    def close(self) -> None:
        """tmp_path's."""


PLACES = {"postgresql": Postgres, "delta": Delta, "iceberg": Iceberg}


@pytest.fixture(scope="module", params=list(PLACES))
def place(request) -> Iterator[Postgres | Delta | Iceberg]:
    found = PLACES[request.param]()
    yield found
    found.close()


def ordered(rows: list[dict], leave_out=frozenset()) -> list[tuple]:
    """Rows as tuples of their columns by name (those of `leave_out` left out), sorted."""
    out = [tuple(sorted((k, v) for k, v in r.items() if k not in leave_out)) for r in rows]
    return sorted(out, key=repr)


def tables(place, output: str) -> dict[str, list[tuple]]:
    return {name: ordered(place.rows(output, name)) for name in OUTPUTS}


@pytest.fixture(scope="module")
def data(spark, place, tmp_path_factory):
    """The input, its uninterrupted stream to the tables, and its batch run to the same
    kind of output (read by the same client)."""
    root = tmp_path_factory.mktemp("revised-tables")
    inp = revising_input(root / "in")
    clean = place.output(root / "clean")
    opts = StreamOptions(
        input=str(inp),
        output=clean,
        checkpoint=str(root / "clean" / "chk"),
        output_format=place.format,
        partitions=3,
        max_files_per_trigger=1,
        rules=RULES,
        mapping=MAPPING,
    )
    run_stream(opts, spark, on_batch=lambda _: None)
    batch = place.output(root / "batch")
    batch_of_every_event(spark, inp, batch, place.state(root / "batch"), place.format)
    return root, inp, clean, batch


def test_the_tables_after_the_stream_equal_one_batch_of_every_event(place, data):
    _, _, clean, batch = data
    sessions = place.rows(clean, "sessions")
    revised = [r for r in sessions if r["revision"] > 0]
    assert revised, "no session was revised"
    assert all(r["revised_batch"] >= r["batch_id"] for r in sessions)
    assert any(r["revised_batch"] > r["batch_id"] for r in revised), "none kept its first batch"
    assert len({r["session_id"] for r in sessions}) == len(sessions)
    current = {r["session_id"] for r in sessions}
    superseded = place.rows(clean, "sessions_superseded")
    assert {r["session_id"] for r in superseded} - current, "no session was retracted"
    assert not place.rows(clean, "late_events"), "the window covers the input's lateness"
    for name in ("sessions", "page_views"):
        got = [r for r in place.rows(clean, name) if r["user_id"] != FLUSH_USER]
        want = [r for r in place.rows(batch, name) if r["user_id"] != FLUSH_USER]
        assert ordered(got, BOOKKEEPING) == ordered(want, BOOKKEEPING), name


REWOUND_TO = REVISING_BATCH - 1  # the last batch before the first revision


def killed_at(args: list[str], point: str) -> None:
    seen = run_until_killed(
        args, f"PAUSED {point.replace(':', ' ')}", cli_env(SESSIONIZE_PAUSE_AT=point)
    )
    assert "PAUSED" in seen


@pytest.fixture(scope="module")
def killed(place, data):
    """A run killed before it publishes the first revising batch (its tables then: those of
    a run stopped at the batch before), restarted and killed in that batch's publish (its
    `kill_point`), then restarted to the end."""
    root, inp, _, _ = data
    run = root / "killed"
    output = place.output(run)
    args = [*revising_args(inp, run), "--output-format", place.format]
    args[args.index("--output") + 1] = output
    killed_at(args, f"before-publish:{REVISING_BATCH}")
    stopped = tables(place, output)
    killed_at(args, f"{place.kill_point}:{REVISING_BATCH}")
    done = sessionize(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    return run, args, output, stopped


@pytest.mark.parametrize("place", ["postgresql", "delta"], indirect=True)
def test_kill_9_in_a_revising_publish_then_restart_gives_the_same_tables(place, data, killed):
    _, _, clean, _ = data
    _, _, output, _ = killed
    assert tables(place, output) == tables(place, clean)


def test_rewind_sets_the_tables_back_to_that_batch_and_a_restart_gives_the_same_tables(
    place, data, killed
):
    """Rewound to the batch before the first revision, the tables are those of the run
    stopped there: the rows later batches superseded are back, theirs gone."""
    _, _, clean, _ = data
    run, args, output, stopped = killed
    superseded = place.rows(clean, "sessions_superseded")
    assert any(r["revised_batch"] <= REWOUND_TO for r in superseded), "nothing to put back"
    done = sessionize("rewind", "--checkpoint", str(run / "chk"), "--to-batch", str(REWOUND_TO))
    assert done.returncode == 0, done.stderr[-3000:]
    assert tables(place, output) == stopped
    done = sessionize(*args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert tables(place, output) == tables(place, clean)
