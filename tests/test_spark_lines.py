"""What differs between PySpark lines (`spark_version`): the version read once, a feature
the installed line lacks refused in one line naming the Spark it needs, and the fallbacks
(the parse built for every micro-batch before 4.0, a field's JSON type named without a
variant on 3.5, Arrow tables through pandas on 3.5) giving what the newer path gives. Part
of the range part (tests/range-part.txt), so each runs on every line `./dev test --spark`
sets up; the refusals through the command line run on the lines that refuse."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import pyarrow as pa
import pyspark
import pytest
from pyspark.sql import functions as F

from sessionize import __version__, spark_version
from sessionize.engines.plan_once import PlanOnce
from sessionize.errors import EnvironmentProblem
from sessionize.events.json_types import kind_of
from sessionize.spark_arrow import arrow_of, frame_of
from tests.engines.test_plan_once import _each_batch, _files
from tests.helpers import generate, sessionize


def test_the_installed_line_is_read_once_and_shown_by_version():
    assert spark_version.installed() == spark_version.parse(pyspark.__version__)
    done = sessionize("--version")
    assert done.stdout == f"sessionize {__version__} (PySpark {pyspark.__version__})\n"


@pytest.mark.parametrize(
    ("feature", "what", "needs"),
    [("transform_with_state", "--state spark-rocksdb", "4.1"),
     ("pandas_with_state", "--state spark-hdfs", "4.0"),
     ("python_stream_sources", "--input kafka://", "4.0"),
     ("source_admission_control", "the source option maxRecordsPerTrigger", "4.2"),
     ("plan_once", "the parse analysed once", "4.0")],
)  # fmt: skip
def test_a_feature_of_a_newer_line_is_refused_naming_it(monkeypatch, feature, what, needs):
    monkeypatch.setattr(spark_version, "installed", lambda: (3, 5, 9))
    with pytest.raises(EnvironmentProblem) as refused:
        spark_version.require(feature, what)
    assert str(refused.value).startswith(f"{what} needs Spark {needs} or newer (")
    assert "this is PySpark 3.5.9: run it on Spark" in str(refused.value)
    monkeypatch.setattr(spark_version, "installed", lambda: (4, 3, 0))
    spark_version.require(feature, what)  # the newest line has them all


@pytest.mark.parametrize(
    ("feature", "args"),
    [("transform_with_state", ["--state", "spark-rocksdb"]),
     ("pandas_with_state", ["--state", "spark-hdfs"]),
     ("python_stream_sources", ["--input", "kafka://127.0.0.1:9/visits"]),
     ("source_admission_control", ["--input", "kinesis://visits?endpoint=http://127.0.0.1:9",
                                   "--source-option", "maxRecordsPerTrigger=10"])],
)  # fmt: skip
def test_this_line_refuses_what_it_lacks_in_one_line(tmp_path, feature, args):
    if spark_version.has(feature):
        pytest.skip(f"PySpark {pyspark.__version__} has {feature}: its own tests run it")
    if not spark_version.has("python_stream_sources") and "--input" in args:
        feature = "python_stream_sources"  # 3.5 refuses the input before its options
    inp = generate(tmp_path / "in", hours=1, users=5, events_per_hour=20)
    base = [
        "stream",
        "--input",
        str(inp),
        "--output",
        str(tmp_path / "out"),
        "--checkpoint",
        str(tmp_path / "chk"),
    ]
    done = sessionize(*base, *args)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    (major, minor), _ = spark_version.FEATURES[feature]
    assert f"needs Spark {major}.{minor} or newer" in line, line
    assert f"this is PySpark {pyspark.__version__}" in line, line
    assert not (tmp_path / "chk").exists() or not any((tmp_path / "chk").iterdir())


def test_the_parse_is_analysed_once_from_spark_4_and_built_per_batch_before(spark, tmp_path):
    def build(df):
        return df.select(F.length("value").alias("n")).groupBy().agg(F.sum("n").alias("chars"))

    plan = PlanOnce()
    got = _each_batch(spark, _files(tmp_path / "in", 3), tmp_path / "chk", build, plan)
    assert plan.reused == (2 if spark_version.has("plan_once") else 0)
    # each batch's rows, built anew, and the reference by a plain loop over its file
    sums = sorted(sum(len(f"{b}-{i}-{'x' * i}") for i in range(10 + b)) for b in range(3))
    assert sorted(once[0]["chars"] for once, _ in got) == sums
    assert all(once == anew for once, anew in got)


LINES = [
    '{"user_id": 12, "page": {"current": "home"}, "action": true}',
    '{"user_id": "12", "page": {"current": 5}, "action": null}',
    '{"user_id": 123456789012345678901, "page": {"current": [1]}, "x": 1.5}',
    '{"user_id": -3, "page": {"current": {"a": 1}}}',
    '{"user_id": 1, "page": "home", "x": 123456789012345678901234567890123456789012}',
    '{"user_id": 1, "page": ',
    "[1, 2]",
]
PATHS = ["user_id", "page", "page.current", "action", "x", "missing"]


@pytest.mark.needs_spark("variant")
def test_json_kinds_on_3_5_name_types_as_spark_variant_does(spark):
    """The reference is Spark's own `schema_of_variant` (4.0+); the 3.5 path is this one."""
    df = frame_of(spark, pa.table({"line": LINES}))
    v = F.try_parse_json("line")
    cols = [
        F.schema_of_variant(
            F.variant_get(v, "$" + "".join(f"['{p}']" for p in path.split(".")), "variant")
        ).alias(path)
        for path in PATHS
    ]
    rows = arrow_of(df.select("line", v.isNull().alias("not_json"), *cols)).to_pylist()
    for row in rows:
        assert (kind_of(row["line"], "") is None) == row["not_json"], row["line"]
        for path in PATHS:
            want = row[path]
            got = kind_of(row["line"], path)
            if want is not None and want.startswith(("OBJECT", "ARRAY")):
                want = want.split("<")[0] + "<>"  # the element types are not compared
            if want in ("INT", "SMALLINT", "TINYINT"):
                want = "BIGINT"  # every integer type passes as an integer alike
            if want is not None and want.startswith("DECIMAL") and not want.endswith(",0)"):
                want = "DOUBLE"  # a fraction: a number either way
            assert got == want, (row["line"], path, got, row[path])


def test_arrow_tables_go_in_and_out_with_their_types(spark):
    t = datetime(2026, 11, 1, 12, 30, tzinfo=UTC)
    table = pa.table(
        {
            "user_id": pa.array([1, None, 3], pa.int64()),
            "page": pa.array(["a", "b", None]),
            "event_time": pa.array([t, t, None], pa.timestamp("us", tz="UTC")),
        }
    )
    df = frame_of(spark, table)
    assert [f.dataType.simpleString() for f in df.schema] == ["bigint", "string", "timestamp"]
    back = arrow_of(df)
    assert back.column("user_id").to_pylist() == [1, None, 3]
    assert back.column("page").to_pylist() == ["a", "b", None]
    times = back.column("event_time").cast(pa.timestamp("us", tz="UTC")).to_pylist()
    assert [json.dumps(x, default=str) for x in times] == [
        json.dumps(x, default=str) for x in [t, t, None]
    ]
    assert arrow_of(df.where("user_id > 100")).num_rows == 0


def test_without_pyspark_the_generator_runs_and_a_spark_command_says_what_to_install(tmp_path):
    """PySpark replaced by a package that fails to import, first on PYTHONPATH (the wheel
    test, tests/distribution, does it for real in a venv without one)."""
    (tmp_path / "pyspark").mkdir()
    (tmp_path / "pyspark" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pyspark'\", name='pyspark')\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    shown = sessionize("--version", env=env)
    assert shown.stdout == f"sessionize {__version__} (PySpark not installed)\n"
    made = sessionize(
        "generate",
        "--output",
        str(tmp_path / "in"),
        "--hours",
        "1",
        "--users",
        "5",
        "--events-per-hour",
        "20",
        env=env,
    )
    assert made.returncode == 0, made.stderr
    for command in (
        [
            "stream",
            "--input",
            str(tmp_path / "in"),
            "--output",
            str(tmp_path / "o"),
            "--checkpoint",
            str(tmp_path / "c"),
        ],
        ["demo", "--workdir", str(tmp_path / "demo")],
    ):
        done = sessionize(*command, env=env)
        assert done.returncode == 2
        assert done.stderr.splitlines() == [
            "sessionize: error: PySpark is not installed: pip install 'sessionize[spark]' "
            "(PySpark 4.3.0), or run where the platform's PySpark 3.5 to 4.3 is installed"
        ], done.stderr
