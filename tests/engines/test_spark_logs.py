"""The file source's seen-files log cut back to a batch, in the layout Spark leaves after it
compacted (`9.compact` holds batches 0..9; their own files deleted by Spark's cleanup)."""

from __future__ import annotations

import json

from sessionize.engines.checkpoint import seen_files
from sessionize.engines.spark_logs import compact_interval, log_ids, truncate_file_source_log


def entry(b: int) -> dict:
    return {"path": f"file:///in/f{b}.json", "timestamp": 1000 + b, "batchId": b}


def write(log, name: str, batches: range) -> None:
    lines = ["v1", *(json.dumps(entry(b)) for b in batches)]
    (log / name).write_text("\n".join(lines))


def spark_layout(tmp_path):
    """Batches 0..11 after Spark compacted at 9 and deleted 0..8."""
    log = tmp_path / "sources" / "0"
    log.mkdir(parents=True)
    write(log, "9.compact", range(10))
    write(log, "10", range(10, 11))
    write(log, "11", range(11, 12))
    return log


def read(log, name: str) -> list[int]:
    lines = (log / name).read_text().splitlines()
    assert lines[0] == "v1"
    return [json.loads(x)["batchId"] for x in lines[1:]]


def test_a_batch_inside_a_later_compaction_gets_its_files_back(tmp_path):
    log = spark_layout(tmp_path)
    assert truncate_file_source_log(str(tmp_path), 5) == 6  # batches 6..11 read again
    assert sorted(p.name for p in log.iterdir()) == ["0", "1", "2", "3", "4", "5"]
    assert all(read(log, str(b)) == [b] for b in range(6))
    assert seen_files(str(tmp_path)) == {entry(b)["path"] for b in range(6)}
    assert truncate_file_source_log(str(tmp_path), 5) == 0  # again: nothing to do


def test_a_batch_after_the_compaction_keeps_it(tmp_path):
    log = spark_layout(tmp_path)
    truncate_file_source_log(str(tmp_path), 10)
    assert sorted(p.name for p in log.iterdir()) == ["10", "9.compact"]
    assert read(log, "9.compact") == list(range(10))
    assert log_ids(str(tmp_path), "sources/0") == [9, 10]


def test_the_compaction_batch_itself_is_rewritten_whole_when_gone(tmp_path):
    log = tmp_path / "sources" / "0"
    log.mkdir(parents=True)
    write(log, "19.compact", range(20))  # Spark deleted everything before 19
    write(log, "29.compact", range(30))
    write(log, "30", range(30, 31))
    truncate_file_source_log(str(tmp_path), 12)
    assert sorted(p.name for p in log.iterdir()) == ["10", "11", "12", "9.compact"]
    assert read(log, "9.compact") == list(range(10))
    assert read(log, "12") == [12]


def test_a_lone_compaction_is_read_at_the_interval_spark_derives_for_it(tmp_path):
    """With one compacted file `19.compact` and a compact interval of 100 for new logs,
    Spark reads the log at an interval of 20: batch 12 comes back as a plain file, as do
    all before it, and no compacted file is written."""
    log = tmp_path / "sources" / "0"
    log.mkdir(parents=True)
    write(log, "19.compact", range(20))
    write(log, "20", range(20, 21))
    truncate_file_source_log(str(tmp_path), 12, default_interval=100)
    assert sorted(p.name for p in log.iterdir()) == sorted(str(b) for b in range(13))
    assert all(read(log, str(b)) == [b] for b in range(13))


def test_the_compact_interval_is_the_one_the_log_was_written_with():
    # (compacted files present, interval for new logs) -> Spark's interval for the log
    cases = {
        ((), 100): 100,  # nothing compacted yet: the setting
        ((9, 19, 29), 100): 10,  # two or more: their distance, whatever the setting
        ((199, 99), 10): 100,
        ((9,), 100): 10,  # one, at most the setting: the batch count up to it
        ((11,), 5): 6,  # one: the smallest divisor of 12 from the setting on
        ((24,), 5): 5,
        ((19,), 10): 20,  # the setting at least half of 20: 20 itself
        ((19,), 4): 4,
    }
    for (compacted, default), interval in cases.items():
        assert compact_interval(list(compacted), default) == interval, (compacted, default)
