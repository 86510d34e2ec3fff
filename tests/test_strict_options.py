"""Options with a small grammar refuse what they do not understand, naming the part: a
trailing `currency=...` in `--conversion`, a `=` inside a `--keep-fields` path, two channel
conditions without their comma. Nothing is read as the rest of a path that matches nothing."""

from __future__ import annotations

import pytest

from sessionize import Sessionizer
from sessionize.content import Conversion, parse_conversion
from sessionize.errors import ConfigError
from sessionize.logic.channel import parse_rules
from sessionize.mapping import EventMapping, parse_keep
from tests.helpers import cli_env, sessionize


@pytest.mark.parametrize(
    ("text", "part"),
    [
        ("purchase=purchase,value=properties.revenue,currency=properties.currency",
         "'currency=properties.currency'"),
        ("purchase=buy,value=a,value=b", "a second value="),
        ("purchase=buy,", "an empty part"),
        ("purchase=buy,amount=order.total", "'amount=order.total'"),
        ("purchase=action=buy", "'purchase=action=buy' is not NAME=ACTION"),
        ("purchase", "'purchase' is not NAME=ACTION"),
    ],
)  # fmt: skip
def test_a_conversion_part_it_does_not_understand_is_refused_by_name(text, part):
    with pytest.raises(ConfigError, match="^--conversion ") as refused:
        parse_conversion(text)
    assert part in str(refused.value)


def test_a_conversion_it_understands_is_read_whole():
    assert parse_conversion(" purchase = buy , value = order.total ") == Conversion(
        "purchase", "buy", "order.total"
    )
    assert parse_conversion("signup=register") == Conversion("signup", "register", None)


@pytest.mark.parametrize(
    "text", ["site=source.site=x", "site=source.site;browser=technical.browser=y"]
)
def test_keep_fields_refuse_a_pair_that_is_not_name_equals_path(text):
    with pytest.raises(ConfigError, match="is not NAME=PATH"):
        parse_keep(text)


@pytest.mark.parametrize("path", ["page.url,x", "a=b"])
def test_a_mapped_path_holding_a_separator_is_refused(path):
    with pytest.raises(ConfigError, match=f"--url-field '{path}' is not a dotted path"):
        EventMapping(url=path)


@pytest.mark.parametrize(
    ("line", "refused"),
    [
        ("Email = source in newsletter|mail medium in email", "holds two conditions"),
        ("Paid = medium matches cpc.* source is search", "holds two conditions"),
        ("Paid = paid search", "is not a condition"),
        ("Social = source is socials", "is not a condition"),
        ("Email = medium in email|e mail", None),  # a value with a space is a value
        ("Paid = medium in paid", None),
    ],
)  # fmt: skip
def test_channel_rules_refuse_what_is_not_one_condition(line, refused):
    if refused is None:
        assert parse_rules(line)[0].conditions
        return
    with pytest.raises(ConfigError, match=refused):
        parse_rules(line)


def test_the_api_refuses_the_same_conversion():
    with pytest.raises(ConfigError, match="'currency=properties.currency' is not understood"):
        Sessionizer(
            conversions=["purchase=purchase,value=properties.revenue,currency=properties.currency"]
        )


def test_the_cli_refuses_a_trailing_conversion_part_in_one_line(tmp_path):
    r = sessionize(
        "batch",
        "--input",
        str(tmp_path),
        "--output",
        str(tmp_path / "out"),
        "--from",
        "2026-11-01T00",
        "--conversion",
        "purchase=purchase,value=properties.revenue,currency=properties.currency",
        env=cli_env(),
        timeout=120,
    )
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "'currency=properties.currency' is not understood" in r.stderr
    assert not (tmp_path / "out").exists()
