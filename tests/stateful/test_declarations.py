"""A processor's declarations: checked once, each mistake refused in one line, and mapped
onto the store's rows (RowSpec) with the core's own columns."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sessionize import stateful
from sessionize.core.declared import declared
from sessionize.core.keys import store_keys
from sessionize.errors import ProcessorError
from sessionize.mapping import EventMapping
from sessionize.schema import STATE, layout

from .helpers import TS, Probe, StringProbe, spark_xxhash64


def test_public_names():
    assert set(stateful.__all__) >= {
        "Processor",
        "Update",
        "Context",
        "Output",
        "stream",
        "run",
        "start",
        "run_local",
    }
    assert all(hasattr(stateful, name) for name in stateful.__all__)


def test_int_keys_are_their_own_store_key_and_the_timer_follows_the_state():
    spec = declared(Probe()).rows
    assert spec.key == "k" and spec.expiry == "_timer"
    assert spec.schema.names == ["k", "v", "_timer"]
    assert spec.schema.field("_timer").type == TS


def test_string_keys_add_a_store_key_column():
    spec = declared(StringProbe()).rows
    assert spec.key == "_key" and spec.schema.names == ["k", "v", "_timer", "_key"]


def test_the_session_state_as_stored_today_is_a_processors_stored_form():
    """Sessions on the core keep their stores: events + expires_at (+ user_key)."""
    for mapping in (EventMapping(), EventMapping(user_type="string")):
        lay = layout(mapping)

        class Sessions(stateful.Processor):
            key = "user_id"
            event_time = "event_time"
            state_schema = lay.event
            timer_column = "expires_at"
            store_key_column = "user_key"

            def process(self, state, rows, ctx):
                return stateful.Update()

        spec = declared(Sessions()).rows
        assert spec.schema == lay.stored and spec.key == lay.state_key
    assert layout(EventMapping()).stored == STATE


def _processor(**attrs) -> stateful.Processor:
    return type("Wrong", (Probe,), attrs)()


@pytest.mark.parametrize(
    ("attrs", "match"),
    [
        ({"key": ""}, "`key` must name the input column"),
        ({"state_schema": {"k": "int64"}}, "`state_schema` must be a pyarrow Schema"),
        ({"key": "user"}, "`state_schema` lacks the key column 'user'"),
        ({"state_schema": pa.schema([("k", pa.float64())])}, "key column 'k' is double"),
        ({"state_schema": pa.schema([("k", pa.int64()), ("_timer", TS)])}, "core's column"),
        ({"event_time": 5}, "`event_time` must name a timestamp column"),
        ({"outputs": {"bad name": pa.schema([])}}, "output name 'bad name' must be letters"),
        ({"outputs": {"o": ["k"]}}, "output 'o' must be declared as a pyarrow Schema"),
        (
            {"outputs": {"o": pa.schema([("a", pa.int64()), ("a", pa.int64())])}},
            "output 'o' has duplicate column names",
        ),
        (
            {"outputs": {"o": stateful.Output(pa.schema([("a", pa.int64())]), mode="replace")}},
            "output 'o' is replaced by key: name its key column",
        ),
        (
            {"outputs": {"o": stateful.Output(pa.schema([("a", pa.int64())]), key="a")}},
            "output 'o' is appended: a key is only for mode='replace'",
        ),
        (
            {"outputs": {"o": stateful.Output(pa.schema([("a", pa.int64())]), mode="upsert")}},
            "mode must be 'append' or 'replace'",
        ),
        (
            {
                "outputs": {
                    "o": stateful.Output(pa.schema([("a", pa.int64())]), mode="replace", key="b")
                }
            },
            r"output 'o': key column\(s\) \['b'\] are not in its schema",
        ),
        (
            {"outputs": {"o": stateful.Output(pa.schema([("a", pa.int64())]), partition_by="d")}},
            r"partition_by column\(s\) \['d'\]",
        ),
        ({"late_output": "no/slash"}, "`late_output` 'no/slash' is not an output name"),
        ({"gauges": "open"}, "`gauges` must be a tuple of counter names"),
        ({"gauges": ("open", "")}, "`gauges` must be a tuple of counter names"),
        (
            {
                "late_output": "o",
                "outputs": {
                    "o": stateful.Output(pa.schema([("k", pa.int64())]), mode="replace", key="k")
                },
            },
            "late output 'o' must be appended",
        ),
    ],
)
def test_a_wrong_declaration_is_refused_in_one_line(attrs, match):
    with pytest.raises(ProcessorError, match=match) as caught:
        declared(_processor(**attrs))
    assert str(caught.value).startswith("processor Wrong: ") and "\n" not in str(caught.value)


def test_only_processors_are_processors():
    with pytest.raises(ProcessorError, match="must be an instance of stateful.Processor"):
        declared(object())  # type: ignore[arg-type]


def test_an_output_key_may_be_one_name_or_many():
    out = stateful.Output(pa.schema([("a", pa.int64())]), mode="replace", key="a")
    assert out.key == ("a",)
    assert stateful.Output(pa.schema([]), partition_by=["x", "y"]).partition_by == ("x", "y")


def test_name_and_params_defaults():
    assert Probe().name == "Probe" and Probe().params() == {}


def test_string_store_keys_equal_sparks_xxhash64():
    # Values from Spark 4.3's `xxhash64` of a string column, computed once with Spark.
    spark = {
        "": -7444071767201028348,
        "a": -8582455328737087284,
        "user-1": 3245521771936779939,
        "ünïcödé ✓": -1501201646744835265,
        "x" * 100: 365730103971579591,
    }
    got = store_keys(pa.array(list(spark) + ["a"])).to_pylist()
    assert got == [*spark.values(), spark["a"]]
    assert [spark_xxhash64(k) for k in spark] == list(spark.values())


def test_int_store_keys_are_the_keys():
    assert store_keys(pa.array([5, -3, 5], pa.int64())).to_pylist() == [5, -3, 5]
