"""Every way an Update can break the processor contract is refused with one ProcessorError
line naming the processor, the output or column, and what was wrong."""

from __future__ import annotations

import pyarrow as pa
import pytest

from sessionize import stateful
from sessionize.errors import ProcessorError, SessionizeError

from .helpers import TS, Probe, events, run, stored


def refused(update, match: str, *, state=None, rows=None, processor=None) -> str:
    p = processor or Probe(lambda s, r, c: update)
    if processor is not None:
        p.respond = lambda s, r, c: update
    if rows is None:
        rows = events([1, 2], [100, 100])
    with pytest.raises(ProcessorError, match=match) as caught:
        run(p, state, rows, before=None, after=100)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"processor {p.name}: ")
    assert isinstance(caught.value, SessionizeError)
    return message


def test_process_must_return_an_update():
    refused({"state": None}, "process returned dict, not a stateful.Update")


def test_a_raising_process_stops_the_batch_in_one_line_naming_it():
    def boom(state, rows, ctx):
        raise KeyError("no such column\nsecond line")

    with pytest.raises(ProcessorError, match=r"processor Probe raised KeyError: ") as caught:
        run(Probe(boom), None, events([1], [1]), after=1)
    assert "\n" not in str(caught.value) and isinstance(caught.value.__cause__, KeyError)


def test_state_must_be_a_table():
    refused(stateful.Update(state=[{"k": 1, "v": 1}]), "state must be a pyarrow Table, not list")


def test_state_column_of_another_type():
    msg = refused(
        stateful.Update(state=pa.table({"k": [1], "v": [1.5]})),
        r"state column 'v' is double, declared int64",
    )
    assert "'v'" in msg


def test_state_lacking_or_adding_columns():
    refused(
        stateful.Update(state=pa.table({"k": [1]})), r"state lacks declared column\(s\) \['v'\]"
    )
    refused(
        stateful.Update(state=pa.table({"k": [1], "v": [1], "w": [2]})),
        r"state has undeclared column\(s\) \['w'\]",
    )


def test_state_rows_for_keys_it_was_not_given():
    refused(
        stateful.Update(state=pa.table({"k": [1, 5], "v": [1, 1]})),
        r"state has rows for key\(s\) \[5\] it was not given",
    )


def test_remove_of_keys_it_was_not_given_or_null():
    refused(stateful.Update(remove=[1, 6]), r"remove names key\(s\) \[6\] it was not given")
    refused(stateful.Update(remove=pa.array([None], pa.int64())), "remove has null keys")
    refused(stateful.Update(remove=["x"]), "remove must be an array of int64 keys")


def test_a_key_in_both_state_and_remove():
    refused(
        stateful.Update(state=pa.table({"k": [1], "v": [1]}), remove=[1, 2]),
        r"key\(s\) \[1\] are both in state and remove",
    )


def test_an_undeclared_output():
    refused(
        stateful.Update(outputs={"other": pa.table({"k": [1]})}),
        r"Update.outputs names undeclared output\(s\) \['other'\]",
    )


def test_an_output_whose_schema_differs_from_declared():
    msg = refused(
        stateful.Update(outputs={"out": pa.table({"k": [1], "n": ["x"]})}),
        r"output 'out' column 'n' is string, declared int64",
    )
    assert "'out'" in msg


def test_nulls_in_a_column_declared_not_null():
    class Strict(Probe):
        outputs = {"out": pa.schema([pa.field("k", pa.int64(), nullable=False)])}

    refused(
        stateful.Update(outputs={"out": pa.table({"k": pa.array([None], pa.int64())})}),
        r"output 'out' column 'k' has nulls, declared not null",
        processor=Strict(),
    )


def test_timers_for_keys_it_was_not_given():
    timers = pa.table({"k": [1, 9], "at": pa.array([5, 5], pa.int64())})
    state = stored(Probe(), [(1, 1, None)])
    refused(
        stateful.Update(timers=timers), r"timers name key\(s\) \[9\] it was not given", state=state
    )


def test_timers_for_keys_without_state_rows():
    timers = pa.table({"k": [2], "at": pa.array([500], pa.int64())})
    refused(
        stateful.Update(timers=timers),
        r"timers name key\(s\) \[2\] that have no state rows after this update",
    )
    state = stored(Probe(), [(1, 1, None)])
    timers = pa.table({"k": [1], "at": pa.array([500], pa.int64())})
    refused(stateful.Update(timers=timers, remove=[1]), "no state rows after", state=state)


def test_timers_without_event_time():
    class Untimed(Probe):
        event_time = None

    timers = pa.table({"k": [1], "at": pa.array([5], pa.int64())})
    refused(
        stateful.Update(timers=timers),
        "has no event_time, so no watermark: it cannot set timers",
        processor=Untimed(),
        rows=events([1, 2]),
    )


def test_timers_of_the_wrong_shape():
    state = stored(Probe(), [(1, 1, None)])
    bad = [
        (pa.table({"k": [1], "when": [5]}), "timers must be a table of exactly the columns"),
        (pa.table({"k": [1], "at": [5.0]}), "timers column 'at' is double"),
        (pa.table({"k": ["1"], "at": [5]}), "timers column 'k' is string, declared int64"),
        (pa.table({"k": [1, 1], "at": [5, 6]}), r"timers name a key more than once: \[1\]"),
        (pa.table({"k": [1], "at": [2**62]}), "after 9999-12-31"),
        (pa.table({"k": pa.array([None], pa.int64()), "at": [5]}), "timers column 'k' has nulls"),
    ]
    for timers, match in bad:
        refused(stateful.Update(timers=timers), match, state=state)


def test_counters_must_be_integers_with_plain_names():
    refused(stateful.Update(counters={"n": 1.0}), "counter 'n' is 1.0, not an integer")
    refused(stateful.Update(counters={"n": True}), "counter 'n' is True, not an integer")
    refused(stateful.Update(counters={"a b": 1}), "counter name 'a b' must be letters")
    refused(stateful.Update(counters=[("n", 1)]), "Update.counters must be a dict")


def test_deletes_only_for_outputs_replaced_by_key():
    class Replaced(Probe):
        outputs = {
            "out": OUT_APPENDED,
            "live": stateful.Output(
                pa.schema([("id", pa.string()), ("n", pa.int64())]), mode="replace", key="id"
            ),
        }

    refused(
        stateful.Update(deletes={"out": pa.table({"k": [1]})}),
        "deletes name output 'out', which is appended, not replaced by key",
        processor=Replaced(),
    )
    refused(
        stateful.Update(deletes={"live": pa.table({"id": [1]})}),
        "deletes of 'live' column 'id' is int64, declared string",
        processor=Replaced(),
    )
    ok = Replaced(lambda s, r, c: stateful.Update(deletes={"live": pa.table({"id": ["x"]})}))
    result = run(ok, None, events([1], [1]), after=1)
    assert result.deletes["live"].to_pylist() == [{"id": "x"}]


OUT_APPENDED = pa.schema([("k", pa.int64()), ("n", pa.int64())])


def test_input_without_key_or_time_or_with_nulls():
    for rows, match in [
        (pa.table({"t": pa.array([1], TS)}), "the input has no column 'k'"),
        (pa.table({"k": [1]}), "the input has no column 't'"),
        (pa.table({"k": [None, 1], "t": pa.array([1, 1], TS)}), "input column 'k' has nulls"),
        (pa.table({"k": [1], "t": [1]}), "input column 't' is int64, not a timestamp"),
        (pa.table({"k": ["1"], "t": pa.array([1], TS)}), "input column 'k' is string, the key"),
    ]:
        with pytest.raises(ProcessorError, match=match):
            run(Probe(), None, rows, after=1)


def test_a_processor_error_in_a_spark_task_reaches_the_driver_as_itself():
    from sessionize.errors import raised_in_task

    text = "Job aborted\nsessionize.errors.ProcessorError: processor Probe: remove has null keys"
    error = raised_in_task(Exception(text))
    assert (
        isinstance(error, ProcessorError) and str(error) == "processor Probe: remove has null keys"
    )
