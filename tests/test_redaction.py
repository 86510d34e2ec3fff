"""One redaction for every URI that reaches text, and URIs whose password a client would
split elsewhere than we do refused before any client sees them."""

from __future__ import annotations

import re

import pytest

from sessionize.errors import ConfigError
from sessionize.redaction import check_userinfo, needs_secret, redact_uri


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://me:pw@db:5432/app?schema=a", "postgresql://me:***@db:5432/app?schema=a"),
        ("redis://:pw@r:6379/0?prefix=p", "redis://:***@r:6379/0?prefix=p"),
        ("s3://AKIA:sEcReT@bucket/out?endpoint_override=h:9",
         "s3://AKIA:***@bucket/out?endpoint_override=h:9"),
        ("s3://b/x?access_key=AK&secret_key=SK&scheme=http",
         "s3://b/x?access_key=***&secret_key=***&scheme=http"),
        ("postgresql://me@db/app?password=pw&sslmode=require",
         "postgresql://me@db/app?password=***&sslmode=require"),
        # an unencoded @ or / in the password: masked up to the host, nothing of it left
        ("postgresql://me:pa@ss@db/app", "postgresql://me:***@db/app"),
        ("postgresql://me:pa/ss@db/app", "postgresql://me:***@db/app"),
        # URIs inside a client's message, and options on a command line
        ("cannot reach 'redis://u:pw@r:1/0'", "cannot reach 'redis://u:***@r:1/0'"),
        ("kafka.sasl.password=pw kafka.sasl.username=u",
         "kafka.sasl.password=*** kafka.sasl.username=u"),
        # no secret: unchanged
        ("kafka://h:9092/topic", "kafka://h:9092/topic"),
        ("/data/a:b@c/out", "/data/a:b@c/out"),
    ],
)  # fmt: skip
def test_every_form_of_secret_is_masked(text, shown):
    assert redact_uri(text) == shown


def test_a_known_secret_is_masked_as_given_and_percent_encoded():
    assert redact_uri("auth p@ss and p%40ss", "p@ss") == "auth *** and ***"


@pytest.mark.parametrize("password", ["hidden@denPW", "a/b", "a?b", "a#b", "x@y/z?w#v"])
def test_a_reserved_character_in_a_password_is_refused_without_any_of_it(password):
    for uri in (f"postgresql://me:{password}@127.0.0.1/app", f"redis://u:{password}@r:1/0"):
        with pytest.raises(ConfigError, match="percent-encode it") as refused:
            check_userinfo(uri, "--state")
        line = str(refused.value)
        assert "\n" not in line
        assert not any(part and part in line for part in _pieces(password)), line


def _pieces(password: str) -> list[str]:
    """The parts of `password` between its reserved characters (each long enough to be
    told apart from the message's own words)."""
    return [p for p in re.split(r"[@/?#]", password) if len(p) > 1 and p != "me"]


def test_encoded_passwords_and_uris_without_one_pass():
    for uri in (
        "postgresql://me:p%40ss%2Fw@db/app?schema=a",
        "postgresql://db/app",
        "redis://r:6379/0",
        "s3://bucket/x",
        "kafka://h:1/t",
    ):
        check_userinfo(uri, "--output")


def test_only_a_postgresql_uri_recorded_without_its_password_finds_it_itself():
    assert not needs_secret("postgresql://me:***@db/app?schema=a")  # PGPASSWORD, ~/.pgpass
    assert needs_secret("redis://:***@r:6379/0") and needs_secret("s3://AK:***@b/x")
    assert not needs_secret("redis://r:6379/0")


def _parsers():
    from sessionize.sinks.kafka import KafkaOutput
    from sessionize.sinks.postgres import parse as postgres_output
    from sessionize.sources.uri import parse_kafka_uri
    from sessionize.state.backends.postgres import PostgresBackend
    from sessionize.state.backends.redis import RedisBackend

    return {
        "postgresql output": (postgres_output, "postgresql://me:{}@127.0.0.1:1/app"),
        "postgresql state": (PostgresBackend, "postgresql://me:{}@127.0.0.1:1/app"),
        "redis state": (RedisBackend, "redis://me:{}@127.0.0.1:1/0"),
        "kafka input": (parse_kafka_uri, "kafka://me:{}@127.0.0.1:1/topic"),
        "kafka output": (KafkaOutput.parse, "kafka://me:{}@127.0.0.1:1/prefix?staging=s"),
    }


@pytest.mark.parametrize(
    "where", ["postgresql output", "postgresql state", "redis state", "kafka input", "kafka output"]
)
def test_every_uri_parser_refuses_an_unencoded_password_in_one_line_without_it(where):
    parse, form = _parsers()[where]
    password = "hid@den/Pw?x"
    with pytest.raises(ConfigError) as refused:
        parse(form.format(password))
    line = str(refused.value)
    assert "\n" not in line and not any(p in line for p in _pieces(password)), line
    if where.startswith("kafka"):
        assert "takes no user or password" in line
    else:
        assert "percent-encode it" in line
