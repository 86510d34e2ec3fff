"""On a master whose executors may run on other machines, local paths for outputs and the
files state get one warning line naming the alternatives; nothing on a local master or for
storage every worker reaches."""

from __future__ import annotations

from sessionize.commands.placement import local_path_warning


def test_local_paths_on_a_cluster_master_get_one_line():
    line = local_path_warning("spark://10.0.0.1:7077", "/data/out", "files:/data/chk/state")
    assert line is not None and "\n" not in line
    assert line.startswith("sessionize: warning: on spark://10.0.0.1:7077, --output /data/out")
    assert "the files state at /data/chk/state are local paths" in line
    assert "every worker sees the same path" in line
    assert "s3://" in line and "postgresql://" in line
    only_output = local_path_warning("yarn", "file:///out", "redis://h:6379/0")
    assert only_output is not None and "--output file:///out is a local path" in only_output


def test_no_warning_on_local_masters_or_shared_storage():
    assert local_path_warning("local[2]", "/out", "files:/chk/state") is None
    assert local_path_warning("local", "/out", "files:/chk/state") is None
    assert local_path_warning("k8s://https://h", "s3://b/out", "files:s3://b/state") is None
    assert local_path_warning("spark://h:7077", "hdfs://nn/out", "dynamodb://t") is None


def test_tasks_get_absolute_local_paths(tmp_path, monkeypatch):
    """Executors on a cluster run in working directories of their own: a relative --output
    or files state must reach the tasks as the driver's absolute path."""
    from sessionize import Sessionizer

    monkeypatch.chdir(tmp_path)
    settings = Sessionizer().engine_settings("files:chk/state?cache_mb=0", "out", "parquet")
    assert settings.output == f"{tmp_path}/out"
    assert settings.state_uri == f"files:{tmp_path}/chk/state?cache_mb=0"
    remote = Sessionizer().engine_settings("redis://h:6379/0", "s3://b/out", "parquet")
    assert (remote.state_uri, remote.output) == ("redis://h:6379/0", "s3://b/out")


def test_a_kafka_output_is_warned_about_for_its_local_staging_place():
    staged = local_path_warning("yarn", "kafka://b:9092/web?staging=/data/stage", "redis://h/0")
    assert staged is not None and "staging=/data/stage is a local path" in staged
    assert local_path_warning("yarn", "kafka://b:9092/web?staging=s3://b/s", "redis://h/0") is None
    # No staging= in a stream: it stages under the checkpoint, which Spark needs shared anyway.
    assert local_path_warning("yarn", "kafka://b:9092/web", "redis://h/0") is None
