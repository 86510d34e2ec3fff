"""The owner of an output, directly: the rule that accepts or refuses a job, and each sink's
owner records (local, S3, PostgreSQL, Kafka) on the real servers: created once whoever
races for it, kept, renamed in place by the same job only, and what a sink's commits say an
output written before owners were recorded holds."""

from __future__ import annotations

import threading

import pytest

from sessionize.errors import ConfigError, OutputOwned, StateError
from sessionize.sinks.claim import OwnerClaim, check_owner, owner_records
from sessionize.sinks.owner import BATCH, STATEFUL_RUN, STREAM, Claimant, Owner, refusal
from tests.sinks.conftest import make_sink
from tests.sinks.rows import stage

A = Owner("a" * 32, STREAM, "sessionize", "/data/chk-a")
B = Owner("b" * 32, STREAM, "sessionize", "/data/chk-b")
NIGHTLY = Owner("c" * 32, BATCH, "nightly", "files")
FRESH = Owner(None, STREAM, "sessionize", "/data/chk-new")  # a new checkpoint: no id yet


# (recorded owner, what the output holds, the job starting, its records say it wrote
# there) -> accepted; written out case by case, not computed.
CASES = [
    (None, [], FRESH, False, True),  # a new output: the first commit records the job
    (None, [], B, False, True),
    (A, [], A, False, True),  # the owner itself
    (A, ["sessions"], A, False, True),
    (A, [], B, True, False),  # another checkpoint, whatever its own records say
    (A, [], FRESH, False, False),
    (A, [], NIGHTLY, False, False),  # a batch job on a stream's output
    (NIGHTLY, [], A, False, False),  # a stream on a batch job's output
    (NIGHTLY, [], Owner("d" * 32, STATEFUL_RUN, "nightly", "files", "Totals"), False, False),
    (None, ["sessions", "page_views"], B, False, False),  # written before owners: not by B
    (None, ["sessions"], A, True, True),  # written before owners, by A
    (None, ["sessions"], FRESH, False, False),
]


@pytest.mark.parametrize(("recorded", "written", "me", "wrote", "accepted"), CASES)
def test_a_job_is_accepted_only_by_the_owner_recorded_or_by_its_own_records(
    recorded, written, me, wrote, accepted
):
    asked = []

    def wrote_here() -> bool:
        asked.append(True)
        return wrote

    why = refusal("/data/out", recorded, written, Claimant(me, wrote_here))
    assert (why is None) == accepted, why
    if recorded is not None:
        assert not asked  # a record decides alone
    if why is not None:
        assert "\n" not in why and why.startswith("output /data/out ")
        assert "give this job another --output" in why
        if recorded is not None:  # the line names the owner and the job refused
            assert recorded.describe() in why and me.describe() in why, why
        else:
            assert ", ".join(written) in why and "before outputs recorded their owner" in why


def test_the_refusal_tells_each_owner_how_to_write_it():
    line = refusal("/out", A, [], Claimant(NIGHTLY))
    assert line == (
        "output /out belongs to the stream of checkpoint /data/chk-a, not to the batch job "
        "'nightly' with state files: run that checkpoint (moved elsewhere, it keeps its "
        "outputs), or give this job another --output"
    )
    assert "run `sessionize batch` with that state and job" in refusal(
        "/out", NIGHTLY, [], Claimant(A)
    )
    anew = Owner("e" * 32, STREAM, "sessionize", A.place)  # chk-a removed and made again
    assert refusal("/out", A, [], Claimant(anew)) == (
        "output /out belongs to the stream of checkpoint /data/chk-a as it was before it was "
        "made anew: its batches are not this job's; give this job another --output, or remove "
        "/out to start it over"
    )


@pytest.fixture(params=["parquet", "parquet-s3", "delta-s3", "postgresql", "kafka", "iceberg"])
def kind(request) -> str:
    return request.param


def test_the_owner_is_recorded_once_and_kept(kind, root):
    """Eight jobs claim a new output at once: one wins, and the record is its; the others
    and any later job are refused; the winner's record follows its moved checkpoint."""
    records = owner_records(root)
    assert records.read() is None and records.written() == []
    claimants = [Owner(f"{i:032d}", STREAM, "sessionize", f"/chk-{i}") for i in range(8)]
    won: list[Owner] = []
    refused: list[str] = []

    def claim(owner: Owner) -> None:
        try:
            OwnerClaim(root, owner)()
            won.append(owner)
        except OutputOwned as exc:
            refused.append(str(exc))

    threads = [threading.Thread(target=claim, args=(o,)) for o in claimants]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == 7, (won, refused)
    (owner,) = won
    assert owner_records(root).read() == owner
    assert all(owner.describe() in line for line in refused)
    with pytest.raises(OutputOwned, match="belongs to the stream of checkpoint /chk-"):
        check_owner(root, Claimant(B))
    check_owner(root, Claimant(owner))  # the owner itself starts
    moved = Owner(owner.id, STREAM, "sessionize", "/moved/chk")
    OwnerClaim(root, moved)()  # the same job from its new place: the record follows it
    assert owner_records(root).read() == moved
    with pytest.raises(OutputOwned, match="belongs to the stream of checkpoint /moved/chk"):
        OwnerClaim(root, B)()


@pytest.mark.parametrize(
    "kind", ["parquet", "parquet-s3", "delta", "delta-s3", "postgresql", "kafka", "iceberg"]
)
def test_an_output_written_before_owners_says_what_it_holds(kind, root):
    """What the commits of each sink say, with no owner record: the outputs with batches."""
    sink = make_sink(kind, root)
    sink.clear_staging(0)
    stage(sink, 0, "old")  # rows of sessions and invalid_events
    sink.publish(0)
    sink.close()
    assert owner_records(root).read() is None
    held = ["invalid_events", "sessions"]
    if kind.startswith("delta") or kind == "iceberg":  # a batch commits to every table
        held = ["invalid_events", "late_events", "page_views", "sessions"]
    assert owner_records(root).written() == held
    with pytest.raises(OutputOwned, match=f"holds {', '.join(held)}, written before"):
        check_owner(root, Claimant(FRESH))
    check_owner(root, Claimant(FRESH, lambda: True))  # its own records say it wrote them


def test_an_unreadable_record_or_a_file_for_an_output_is_one_line(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "_owner.json").write_text('{"id": ')  # cut short
    with pytest.raises(StateError, match=r"_owner.json is not readable \(.*\): restore it, or"):
        check_owner(str(out), Claimant(FRESH))
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="--output .*/file is a file: give a directory"):
        check_owner(str(tmp_path / "file"), Claimant(FRESH))
