"""A stateful job's checkpoint is bound to its processor: a restart with another one, other
parameters or another state schema is refused in one line naming the difference."""

from __future__ import annotations

import pytest

from examples.dedup import Dedup
from examples.running_totals import RunningTotals
from sessionize.engines.checkpoint import (
    check_or_record,
    check_or_record_processor,
    recorded,
    write_record,
)
from sessionize.engines.keyed import KeyedSettings, settings_record
from sessionize.errors import IncompatibleCheckpoint


def _record(processor, partitions: int = 4) -> dict:
    settings = KeyedSettings(processor, None, partitions, "files:/s", "job", "/out")  # type: ignore[arg-type]
    return {**settings_record(settings), "output": "/out"}


def test_the_first_start_records_the_processor_and_the_same_one_restarts(tmp_path):
    check_or_record_processor(str(tmp_path), _record(Dedup(hours=2)))
    assert recorded(str(tmp_path))["processor"] == "Dedup"
    assert recorded(str(tmp_path))["params"] == {"ttl_us": 7_200_000_000}
    check_or_record_processor(str(tmp_path), _record(Dedup(hours=2)))


@pytest.mark.parametrize(
    ("other", "named"),
    [
        (_record(Dedup(hours=3)), "params {'ttl_us': 7200000000} (now {'ttl_us': 10800000000})"),
        (_record(Dedup(hours=2), partitions=8), "partitions 4 (now 8)"),
        (_record(RunningTotals()), "processor 'Dedup' (now 'RunningTotals')"),
    ],
)
def test_a_restart_with_another_processor_is_refused_naming_the_difference(tmp_path, other, named):
    check_or_record_processor(str(tmp_path), _record(Dedup(hours=2)))
    with pytest.raises(IncompatibleCheckpoint) as refused:
        check_or_record_processor(str(tmp_path), other)
    assert named in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_gauge_added_to_a_running_job_is_refused_and_an_old_record_without_one_runs(tmp_path):
    """A gauge's running sum is kept from a job's first batch: one added later would count
    from the restart, so the restart is refused, also on a record written before gauges
    were recorded; such a record runs on unchanged when the processor has none."""

    class Counted(Dedup):
        gauges = ("ids_held",)

        @property
        def name(self) -> str:
            return "Dedup"  # the same processor, with a gauge added

    old = {k: v for k, v in _record(Dedup(hours=2)).items() if k != "gauges"}
    write_record(str(tmp_path), "sessionize.json", old)
    with pytest.raises(IncompatibleCheckpoint, match=r"gauges \[\] \(now \['ids_held'\]\)"):
        check_or_record_processor(str(tmp_path), _record(Counted(hours=2)))
    check_or_record_processor(str(tmp_path), _record(Dedup(hours=2)))
    assert recorded(str(tmp_path))["gauges"] == []


def test_another_state_schema_is_named(tmp_path):
    check_or_record_processor(str(tmp_path), _record(Dedup(hours=2)))
    changed = {**_record(Dedup(hours=2)), "state_schema": "event_id string"}
    with pytest.raises(IncompatibleCheckpoint, match="state_schema 'event_id string, window"):
        check_or_record_processor(str(tmp_path), changed)


def test_a_session_jobs_checkpoint_is_refused(tmp_path):
    write_record(str(tmp_path), "sessionize.json", {"gap": "30m", "partitions": 4})
    with pytest.raises(IncompatibleCheckpoint, match="belongs to a session job"):
        check_or_record_processor(str(tmp_path), _record(RunningTotals()))


def test_a_processors_checkpoint_is_refused_to_a_session_job(tmp_path):
    check_or_record_processor(str(tmp_path), _record(RunningTotals()))
    with pytest.raises(IncompatibleCheckpoint, match="belongs to the stateful job of processor"):
        check_or_record(str(tmp_path), {"gap": "30m", "partitions": 4})


def test_a_follow_on_added_to_or_dropped_from_a_running_job_is_refused(tmp_path):
    """A follow-on's state starts with the job: one added later would number from the
    restart. A record written before follow-ons were recorded reads as none."""
    from tests.stateful.chained import Devices

    class Alone(Devices):
        follow_on = None

        @property
        def name(self) -> str:
            return "Devices"

    old = {k: v for k, v in _record(Alone()).items() if k != "follow_on"}
    write_record(str(tmp_path), "sessionize.json", old)
    with pytest.raises(IncompatibleCheckpoint, match=r"follow_on None \(now \{'job': 'job.users'"):
        check_or_record_processor(str(tmp_path), _record(Devices()))
    check_or_record_processor(str(tmp_path), _record(Alone()))
    fresh = tmp_path / "fresh"
    check_or_record_processor(str(fresh), _record(Devices()))
    assert recorded(str(fresh))["follow_on"]["processor"] == "Users"
    with pytest.raises(
        IncompatibleCheckpoint, match=r"follow_on {.*'job': 'job.users'.* \(now None\)"
    ):
        check_or_record_processor(str(fresh), _record(Alone()))
