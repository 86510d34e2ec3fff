"""What a checkpoint records and compares: its places (output, input, a `files:PATH` state)
by place whatever their spelling, and the settings a run leaves out taken from the record."""

from __future__ import annotations

import json
import os
import sys

import pytest

from sessionize.api.sessionizer import RECORDED, Sessionizer
from sessionize.engines.checkpoint import check_or_record
from sessionize.errors import ConfigError, IncompatibleCheckpoint
from sessionize.fs import check_resolvable
from sessionize.sinks.registry import check_output


def _record(chk, **places):
    check_or_record(str(chk), {**Sessionizer().recorded_settings("parquet"), **places})


def test_one_output_is_the_same_place_whatever_its_spelling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    chk = tmp_path / "chk"
    _record(chk, output="out", input="in/", state="files")
    for same in ("out/", "./out", str(tmp_path / "out"), f"file://{tmp_path}/out/", "x/../out"):
        _record(chk, output=same, input=str(tmp_path / "in"))
    recorded = json.loads((chk / "sessionize.json").read_text())
    assert recorded["output"] == str(tmp_path / "out")  # absolute, whatever was given
    with pytest.raises(IncompatibleCheckpoint) as e:
        _record(chk, output="other")
    assert f"--output {tmp_path}/out (this run: {tmp_path}/other)" in str(e.value)
    assert "--move-output" in str(e.value)
    with pytest.raises(IncompatibleCheckpoint, match="--input .* one input"):
        _record(chk, input="in2")


def test_a_symlink_to_the_output_is_the_output(tmp_path, monkeypatch):
    """Places are compared as the system resolves them, not as text."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "st").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "out")
    (tmp_path / "st-link").symlink_to(tmp_path / "st")
    chk = tmp_path / "chk"
    _record(chk, output="out", input="in", state=f"files:{tmp_path}/st")
    _record(chk, output="alias", state=f"files:{tmp_path}/st-link")
    (tmp_path / "other").mkdir()
    with pytest.raises(IncompatibleCheckpoint, match="--move-output"):
        _record(chk, output="other")


def test_object_store_places_compare_without_their_options(tmp_path):
    chk = tmp_path / "chk"
    _record(
        chk,
        output="s3://b/out?endpoint_override=127.0.0.1:9000&scheme=http",
        input="kafka://a:9092/events",
        state="files:s3://b/st?scheme=http",
    )
    _record(
        chk, output="s3://b/out/", input="kafka://b:9092,c:9092/events", state="files:s3://b/st/"
    )
    with pytest.raises(IncompatibleCheckpoint, match=r"--input kafka://\*/events"):
        _record(chk, input="kafka://a:9092/clicks")
    with pytest.raises(IncompatibleCheckpoint, match="state migrate"):
        _record(chk, state="files:s3://b/other")


def test_a_files_state_is_one_place_relative_or_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    chk = tmp_path / "chk"
    created = Sessionizer(state="files:st")
    _record(chk, **{"state": created.recorded_settings("parquet")["state"]})
    assert json.loads((chk / "sessionize.json").read_text())["state"] == f"files:{tmp_path}/st"
    _record(chk, state=f"files:{tmp_path}/st/")
    os.chdir(tmp_path / "chk")  # `st` is another directory from here
    with pytest.raises(IncompatibleCheckpoint, match="--state"):
        _record(chk, state=Sessionizer(state="files:st").recorded_settings("parquet")["state"])


def test_arguments_not_given_take_the_recorded_values_and_given_ones_stay():
    record = {
        **Sessionizer().recorded_settings("delta"),
        "gap": "5m",
        "partitions": 8,
        "close_actions": "",
        "user_field": "uid",
        "user_type": "string",
        "time_format": "epoch-ms",
        "keep_fields": "",
    }
    s, fmt = Sessionizer().resolved(record)
    assert (s.rules.gap_us, s.partitions, s.rules.close_actions, fmt) == (300e6, 8, (), "delta")
    assert (s.mapping.user, s.mapping.user_type, s.mapping.keep) == ("uid", "string", ())
    assert s.explicit == RECORDED
    # Given, even at its default value: kept as given, so the checkpoint check names it.
    s, fmt = Sessionizer(gap="10m", user_type="long").resolved(record, "parquet")
    assert (s.rules.gap_us, s.mapping.user_type, s.mapping.user, fmt) == (
        600e6,
        "long",
        "uid",
        "parquet",
    )
    given = s.recorded_settings(fmt)
    changed = sorted(k for k in record if record[k] != given[k])
    assert changed == ["gap", "output_format", "user_type"]


def test_a_recorded_state_without_its_secret_must_be_given():
    record = {"state": "redis://app:***@db:6379/0"}
    with pytest.raises(ConfigError, match="give it with --state"):
        Sessionizer().resolved(record)
    s, _ = Sessionizer(state="redis://app:pw@db:6379/0").resolved(record)
    assert s.state == "redis://app:pw@db:6379/0"
    # PostgreSQL's client reads a password left out (PGPASSWORD, ~/.pgpass): used as recorded
    s, _ = Sessionizer().resolved({"state": "postgresql://app:***@db/s"})
    assert s.state == "postgresql://app:***@db/s"


@pytest.mark.parametrize("uri", ["foo://bucket/x", "hdfs://nn/x"])
def test_an_output_we_do_not_write_is_one_line_naming_what_we_write(uri):
    with pytest.raises(ConfigError) as e:
        check_output(uri)
    written = "give a local path, file://, s3://, postgresql://, kafka:// or iceberg://"
    assert written in str(e.value)
    for fine in ("out", "/tmp/out/", "file:///tmp/out", "s3://b/x?scheme=http"):
        check_output(fine, "delta")


def test_an_s3_output_without_the_s3_extra_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "boto3", None)  # what an environment without it finds
    for fmt in ("parquet", "delta"):  # Delta too: its owner record and lease are conditional
        with pytest.raises(ConfigError, match=r"pip install 'sessionize\[s3\]'"):
            check_output("s3://b/x", fmt)
    check_output("s3://b/x", None)  # the place alone is fine


def test_a_checkpoint_no_filesystem_reads_is_refused():
    with pytest.raises(ConfigError, match="no filesystem reads foo:// URIs"):
        check_resolvable("foo://bucket/chk", "--checkpoint")
    check_resolvable("chk/", "--checkpoint")
    check_resolvable("s3://b/chk", "--checkpoint")


def test_one_refusal_gives_a_way_for_every_changed_flag_and_a_whole_fresh_start(tmp_path):
    """Following the refusal is never refused again for a flag it did not name: each
    changed flag has its way, and a fresh start names all that must be new at once (a
    store outside the checkpoint keeps the job's batches: a new --job too)."""
    chk = tmp_path / "chk"
    _record(chk, output=str(tmp_path / "out"), state="postgresql://me@db/app")
    with pytest.raises(IncompatibleCheckpoint) as e:
        check_or_record(
            str(chk),
            {
                **Sessionizer(gap="5m").recorded_settings("parquet"),
                "output": str(tmp_path / "out2"),
                "state": "redis://cache:6379",
            },
        )
    text = str(e.value)
    for said in (
        "--gap 10m (this run: 5m)",
        "--move-output",
        "state migrate",
        "leave the flag out",
        "--to-batch -1",
        "or start over with a new --checkpoint, a new --output and a new --job",
    ):
        assert said in text, said
    files = tmp_path / "chk-files"
    _record(files, output=str(tmp_path / "out"), state="files")
    with pytest.raises(
        IncompatibleCheckpoint, match="start over with a new --checkpoint and a new --output$"
    ):
        check_or_record(
            str(files),
            {
                **Sessionizer(gap="5m").recorded_settings("parquet"),
                "output": str(tmp_path / "out"),
                "state": "files",
            },
        )
