"""URIs, options, record decoding and the per-trigger budget: no server needed."""

from __future__ import annotations

import pytest

from sessionize.errors import ConfigError
from sessionize.generate.publish import user_key
from sessionize.sources.uri import (
    KafkaAddress,
    KinesisAddress,
    decode_records,
    parse_kafka_uri,
    parse_kinesis_uri,
    parse_source_options,
    split_budget,
)


def test_kafka_uri():
    assert parse_kafka_uri("kafka://127.0.0.1:59092/visits") == KafkaAddress(
        "127.0.0.1:59092", "visits"
    )
    assert parse_kafka_uri("kafka://a:1,b:2/t").bootstrap == "a:1,b:2"
    for bad in ("kafka://h/t", "kafka://h:1/", "kafka://h:1/a/b", "kafka://h:1/t?x=1", "h:1/t"):
        with pytest.raises(ConfigError):
            parse_kafka_uri(bad)


def test_kinesis_uri():
    uri = "kinesis://visits?endpoint=http://127.0.0.1:54567&region=us-east-1"
    assert parse_kinesis_uri(uri) == KinesisAddress("visits", "http://127.0.0.1:54567", "us-east-1")
    assert parse_kinesis_uri("kinesis://visits") == KinesisAddress("visits")
    with pytest.raises(ConfigError, match="unknown parameter"):
        parse_kinesis_uri("kinesis://visits?endpoint=http://x:1&shards=2")
    with pytest.raises(ConfigError, match="http"):
        parse_kinesis_uri("kinesis://visits?endpoint=x:1")


def test_options_are_case_insensitive_and_typos_are_refused():
    opts = parse_source_options(
        {"MAXRECORDSPERTRIGGER": "5", "startingposition": "Latest", "kafka.client.id": "me"},
        "kafka",
    )
    assert (opts.max_records_per_trigger, opts.starting_position) == (5, "latest")
    assert opts.client == {"client.id": "me"}
    assert parse_source_options({"readTimeout": "90s"}, "kafka").read_timeout_s == 90
    with pytest.raises(ConfigError, match="unknown source option 'maxRecordPerTrigger'"):
        parse_source_options({"maxRecordPerTrigger": "5"}, "kafka")
    with pytest.raises(ConfigError, match="unknown source option 'kinesis.region_name'"):
        parse_source_options({"kinesis.region_name": "x"}, "kafka")
    with pytest.raises(ConfigError, match="positive integer"):
        parse_source_options({"maxRecordBytes": "-1"}, "kafka")


def test_decode_flags_bad_payloads_and_keeps_good_ones():
    batch = decode_records(
        [b"ok", b"a\xff", None, b"x" * 11, "\u00e9".encode()], ["a", "b", "c", "d", "e"], 10
    )
    assert batch.to_pydict() == {
        "value": ["ok", "a\\xff", None, None, "\u00e9"],  # escaped, not lost
        "error": [
            None,
            "not UTF-8 (byte 1)",
            "no payload (null value)",
            "record too large (11 bytes)",
            None,
        ],
        "source": ["a", "b", "c", "d", "e"],
    }
    assert decode_records([b"x" * 10], ["a"], 10).to_pydict()["error"] == [None]  # inclusive
    assert decode_records([], [], 10).num_rows == 0


def test_split_budget_shares_fairly_and_never_exceeds_backlog():
    assert split_budget({"0": 100, "1": 100, "2": 100}, 30) == {"0": 10, "1": 10, "2": 10}
    assert split_budget({"0": 2, "1": 100, "2": 100}, 30) == {"0": 2, "1": 14, "2": 14}
    assert split_budget({"0": 5, "1": 5, "10": 5, "2": 5}, 2) == {"0": 1, "1": 1, "2": 0, "10": 0}
    assert split_budget({"0": 3, "1": 0}, 100) == {"0": 3, "1": 0}
    assert split_budget({"0": 0}, 10) == {"0": 0}
    for budget in range(1, 40):
        grant = split_budget({"0": 7, "1": 1, "2": 20}, budget)
        assert sum(grant.values()) == min(budget, 28)
        assert grant["0"] <= 7 and grant["1"] <= 1


def test_user_key_of_a_line():
    assert user_key(b'{"user_id": 342290, "event_time": "x"}') == b"342290"
    assert user_key(b'{"event_time": "x", "user_id":7}') == b"7"
    assert user_key(b"not json") is None


def test_redaction_hides_passwords_and_secret_query_parameters():
    from sessionize.redaction import redact_uri

    uri = "s3://b/p?endpoint_override=h:9&access_key=AK1&secret_key=SK2&scheme=http"
    assert (
        redact_uri(uri)
        == "s3://b/p?endpoint_override=h:9&access_key=***&secret_key=***&scheme=http"
    )
    assert (
        redact_uri("redis://:pw@h:1/0?password=zz&prefix=a")
        == "redis://:***@h:1/0?password=***&prefix=a"
    )
    assert (
        redact_uri("kinesis://s?endpoint=http://h:1&region=r")
        == "kinesis://s?endpoint=http://h:1&region=r"
    )
