"""The Python reading (`parsing.parse`) gives the rows Spark's JVM expressions give.

`parsing.parse_in_jvm` decides every line with the column expressions all lines went
through before the Python reading existed (the exact fallback). Both read the same lines,
random documents from test_json_lines.py and the hostile ones below, and must agree on
every reason and raw line and on every valid event. String user ids must get Spark's own
`xxhash64` key, bit for bit.
"""

from __future__ import annotations

import random
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from sessionize.events.keys import user_key, user_keys
from sessionize.parsing import parse, parse_in_jvm

from .test_json_lines import DAY_US, DEFAULT, NOW_US, STRING_EPOCH, documents


def ev(user="7", time='"2026-11-01T10:00:00Z"', page='{"current": "home"}', extra=""):
    """An event written by hand, for what json.dumps cannot produce."""
    return f'{{"user_id": {user}, "event_time": {time}, "page": {page}{extra}}}'


# Lines Spark's reader and strict JSON read differently, and the edges of every rule.
HOSTILE = [
    ev(user="NaN"),
    ev(user="Infinity"),
    ev(user="-Infinity"),
    ev(extra=', "x": NaN'),
    ev(page='{"current": NaN}'),
    ev(page='{"current": "\\ud800"}'),
    ev(extra=', "x": "\\ud800"'),
    ev(page='{"current": "\\udc00x"}'),
    ev(page='{"current": "\\ud83d\\ude00"}'),
    ev(page='{"current": "a", "current": "b"}'),
    ev(page='{"current": 5, "current": "b"}'),
    ev(page='{"current": "b", "current": 5}'),
    ev(extra=', "x": {"a": 1, "a": 2}'),
    ev(extra=', "page": 1'),
    ev(extra=', "user\\u005fid": 2'),
    ev(user="1.0"),
    ev(user="1e3"),
    ev(user="-0"),
    ev(user="01"),
    ev(user="1E2"),
    ev(user="9223372036854775808"),
    ev(user="-9223372036854775808"),
    ev(user="-9223372036854775809"),
    ev(user='"7"'),
    ev(user="[7]"),
    ev(user="{}"),
    ev(page='{"current": 5}'),
    ev(page='{"current": true}'),
    ev(page='{"current": null}'),
    ev(page='{"current": ""}'),
    ev(page='{"current": "-x"}'),
    ev(page='{"current": "[x"}'),
    ev(page='{"current": 5.5e3}'),
    ev(page='{"current": -1}'),
    ev(page='{"current": {}}'),
    ev(page='{"current": []}'),
    "  " + ev() + "  ",
    ev() + " x",
    ev() + ev(),
    ev(extra=","),
    "{'user_id': 1}",
    ev(extra=', /* c */ "y": 1'),
    ev(extra=", y: 1"),
    ev(page='{"current": "a\tb"}'),
    ev(page='{"current": "a\\u0000b"}'),
    ev(page='{"current": "a\\/b"}'),
    ev(page='{"current": "a\\qb"}'),
    "{}",
    '{"User_ID": 1, "event_time": "2026-11-01T10:00:00Z", "page": {"current": "h"}}',
    ev(time='"2026-11-01 10:00"'),
    ev(time='"2026-11-01T10:00:00.123456789Z"'),
    ev(time='"2026-11-01T10:00:00.1234567Z"'),
    ev(time='"2026-11-01T10:00:00+0200"'),
    ev(time='"2026-02-30T00:00:00Z"'),
    ev(time='"2026-11-01T24:00:00Z"'),
    ev(time='"2026-12-31T23:59:60Z"'),
    ev(time='"2026-11-01t10:00:00z"'),
    ev(time='"2026-11-01T10:00:00+02"'),
    ev(time='"2026-11-01T10:00:00+14:00"'),
    ev(time='"2026-11-01T10:00:00+18:00"'),
    ev(time='"2026-11-01T10:00:00+19:00"'),
    ev(time='"2026-11-01T10:00:00-23:59"'),
    ev(time='"0001-01-01T00:00:00Z"'),
    ev(time='"0000-12-31T23:00:00-02:00"'),
    ev(time='"9999-12-31T23:59:59.999999999Z"'),
    ev(time='"9999-12-31T23:59:59-01:00"'),
    ev(time='"2026-11-01T10:00:00Z "'),
    ev(time='" 2026-11-01T10:00:00Z"'),
    ev(time='"2026-11-01T10:00:00\\n"'),
    ev(time='"٢٠٢٦-11-01T10:00:00Z"'),
    ev(time='"2026-11-01T10:00:00.Z"'),
    ev(time='"2026-11-01T10:00:00.5+05:30"'),
    ev(extra=', "action": null'),
    ev(extra=', "action": ""'),
    ev(extra=', "source": null'),
    ev(extra=', "source": {"site": null}'),
    ev(extra=', "technical": {"device": null}'),
    ev(extra=', "technical": {"device": {"type": "x", "type": 1}}'),
    ev(extra=', "source": {"site": 1}, "action": 2'),
    '{"event_time": 5, "user_id": "x", "page": {"current": "home"}}',
    '{"page": 5, "user_id": "x", "event_time": 5}',
    ev(user="1", extra=', "user_id": 1'),
    ev(extra=', "page": {"current": "home"}'),
    ev(page='{"current": "x", "current": "x"}'),
    ev(user="12345678901234567890123"),
    ev(user="-1.5e400"),
    ev(extra=', "x": 1e400'),
    ev(page='{"current": 1e400}'),
    "\t" + ev(),
    ev() + "\t",
    "\u00a0" + ev(),
    ev(extra=', "x": "\u2028"'),
    ev(extra=', "x": [1, 2, {"a": NaN}]'),
    ev(extra=', "x": tru'),
    ev(extra=', "x": True'),
    ev(extra=', "x": nul'),
    ev(extra=', "x": -'),
    ev(extra=', "x": .5'),
    ev(extra=', "x": 5.'),
    ev(extra=', "x": +5'),
    ev(extra=', "x": 0x10'),
    ev(extra=', "x": 1e'),
    ev(extra=', "": 1'),
    ev(extra=', "x": "\\ud800\\ud800"'),
    ev(extra=', "\\ud800": 1'),
    ev(user="7 "),
    "[",
    "]",
    "{",
    "null",
    "",
    "  ",
    '"{}"',
]
# Around the time limit: one day after NOW_US.
NEAR_LIMIT = [
    ev(time='"2026-11-02T10:00:00Z"'), ev(time='"2026-11-02T10:00:00.000001Z"'),
    ev(time='"2099-01-01T00:00:00Z"'), ev(time='"2026-11-01T09:00:00Z"'),
]  # fmt: skip
HOSTILE += NEAR_LIMIT
# Past the limits of Spark's reader (number and name lengths, nesting) and near them.
HOSTILE += [
    ev(extra=', "x": 0.' + "0" * 1100 + "1"), ev(extra=', "x": ' + "1" * 999),
    ev(extra=', "' + "k" * 60_000 + '": 1'), ev(extra=', "x": ' + "[" * 990 + "]" * 990),
    ev(extra=', "x": ' + "[" * 1010 + "]" * 1010),
]
# The same edges for string ids under `who.id` and epoch-ms times under `ts`.
HOSTILE_EPOCH = [
    line.replace('"user_id": ', '"who": {"id": ', 1).replace(', "ts"', '}, "ts"', 1)
    for line in [
        '{"user_id": "u1", "ts": 1761991200000, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": 1761991200000.5, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": 1761991200000.4999, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": 1.7619912e12, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": "1761991200000", "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": NaN, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": Infinity, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": 1e300, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": 253402300799999, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": 253402300800000, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": -62135596800000, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": -62135596800001, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": 99999999999999999999, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": -0.0, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": 0.0005, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": -0.0005, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": 0.0015, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": 1e-7, "page": {"current": "h"}}',
        '{"user_id": "u1", "ts": true, "page": {"current": "h"}}',
        '{"user_id": 5, "ts": 1, "page": {"current": "h"}}',
        '{"user_id": "", "ts": 1, "page": {"current": "h"}}',
        '{"user_id": "' + "é" * 128 + '", "ts": 1, "page": {"current": "h"}}',
        '{"user_id": "' + "é" * 129 + '", "ts": 1, "page": {"current": "h"}}',
        '{"user_id": null, "ts": 1, "page": {"current": "h"}}',
        '{"user_id": "5", "ts": 1, "page": {"current": "h"}}',
        '{"user_id": "-x", "ts": 1, "page": {"current": "h"}}',
        '{"user_id": "true", "ts": 1, "page": {"current": "h"}}',
        '{"user_id": "\\ud800", "ts": 1, "page": {"current": "h"}}',
        '{"user_id": "u", "ts": 1, "page": {"current": "h"}, "u": {"a": "b"}}',
        '{"user_id": "u", "ts": 1, "page": {"current": "h"}, "u": {"a": 1}}',
        '{"user_id": "u", "ts": 1, "page": {"current": "h"}, "u": 1}',
        '{"user_id": "u", "ts": 1, "page": {"current": "h"}, "u": {"a": "1"}}',
    ]
]


def _rows(df) -> list[dict]:
    rows = df.withColumn("event_time", F.unix_micros("event_time")).collect()
    return sorted((r.asDict() for r in rows), key=lambda r: int(r["source"]))


def _compare(spark, lines: list[str], mapping, now_us: int | None = NOW_US) -> None:
    raw = spark.createDataFrame(
        [(line, None, str(i)) for i, line in enumerate(lines)],
        "value string, error string, source string",
    )
    now = F.timestamp_micros(F.lit(now_us))
    new = _rows(parse(raw, now=now_us, max_future_us=DAY_US, mapping=mapping))
    old = _rows(parse_in_jvm(raw, now=now, max_future_us=DAY_US, mapping=mapping))
    assert len(new) == len(old) == len(lines)
    for line, a, b in zip(lines, new, old, strict=True):
        assert (a["reason"], a["raw"], a["source"]) == (b["reason"], b["raw"], b["source"]), line
        if b["reason"] is None or b["reason"].endswith("too far in the future"):
            assert a == b, line


def test_hostile_lines_read_as_spark_reads_them(spark):
    _compare(spark, HOSTILE, DEFAULT)
    _compare(spark, HOSTILE_EPOCH, STRING_EPOCH)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(documents(DEFAULT), min_size=20, max_size=60))
def test_random_lines_read_as_spark_reads_them(spark, lines):
    _compare(spark, lines, DEFAULT)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(documents(STRING_EPOCH), min_size=20, max_size=60))
def test_random_string_id_lines_read_as_spark_reads_them(spark, lines):
    _compare(spark, lines, STRING_EPOCH)


def test_a_time_limit_given_as_a_column_is_judged_the_same(spark):
    lines = [HOSTILE[0], *NEAR_LIMIT]
    raw = spark.createDataFrame(
        [(line, None, str(i)) for i, line in enumerate(lines)],
        "value string, error string, source string",
    )
    now = F.timestamp_micros(F.lit(NOW_US))
    by_column = _rows(parse(raw, now=now, max_future_us=DAY_US))
    by_micros = _rows(parse(raw, now=NOW_US, max_future_us=DAY_US))
    assert by_column == by_micros
    assert any(r["reason"] == "event_time too far in the future" for r in by_column)


def test_string_ids_get_sparks_xxhash64_key(spark):
    rng = random.Random(7)
    alphabet = string.printable + "éß漢字🙂\x00"
    ids = ["", "a", "user-1", *("".join(rng.choices(alphabet, k=rng.randint(1, 80)))
                                 for _ in range(500))]  # fmt: skip
    df = spark.createDataFrame([(i,) for i in ids] + [(None,)], "id string")
    want = [r[0] for r in df.select(F.xxhash64("id")).collect()]
    assert user_keys([*ids, None]).to_pylist() == want
    assert [user_key(i) for i in [*ids, None]] == want
