"""A Sessionizer keeps its keyword arguments as one frozen SessionizerSettings, in groups
passed on whole; the commands build the same object, and resolving against a record makes a
new one. Pure: no Spark."""

from __future__ import annotations

import dataclasses

import pytest

from sessionize.api.recorded import RECORDED
from sessionize.api.sessionizer import Sessionizer
from sessionize.api.sessionizer_settings import SessionizerSettings, StoreSettings
from sessionize.commands.stream import StreamOptions
from sessionize.config import SessionRules
from sessionize.errors import ConfigError

MINUTE_US = 60_000_000


def test_the_keyword_arguments_are_kept_as_frozen_groups():
    s = Sessionizer(
        gap="5m",
        lateness="2m",
        close_actions="logout,close",
        partitions=3,
        job="shop",
        user="uid",
        conversions=["buy=purchase"],
        max_future="1h",
    )
    assert s.settings.rules == SessionRules(
        gap_us=5 * MINUTE_US, lateness_us=2 * MINUTE_US, close_actions=("logout", "close")
    )
    assert s.settings.store == StoreSettings(state="files", partitions=3, job="shop")
    assert s.settings.mapping.user == "uid"
    assert [(c.name, c.action) for c in s.settings.mapping.content.conversions] == [
        ("buy", "purchase")
    ]
    assert s.settings.max_future_us == 60 * MINUTE_US
    # What the rest of the package reads, through the groups.
    assert (s.partitions, s.job, s.state, s.rules.gap_us) == (3, "shop", "files", 5 * MINUTE_US)
    assert s.explicit == {
        "gap",
        "lateness",
        "close_actions",
        "partitions",
        "job",
        "user_field",
        "conversion",
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.settings.store.partitions = 8  # type: ignore[misc]


def test_a_store_setting_out_of_range_is_refused_when_built():
    with pytest.raises(ConfigError, match="partitions must be at least 1"):
        StoreSettings(partitions=0)
    with pytest.raises(ConfigError, match="job name"):
        Sessionizer(job="no spaces please")


def test_resolving_against_a_record_makes_new_settings_and_keeps_the_given_ones():
    s = Sessionizer(gap="5m")
    before = s.settings
    resolved, output_format = s.resolved(
        {"gap": "30m", "lateness": "2m", "partitions": 8, "job": "other", "output_format": "delta"}
    )
    assert s.settings is before and s.partitions == 4 and s.job == "sessionize"
    assert resolved.partitions == 8 and resolved.job == "other" and output_format == "delta"
    assert resolved.rules.gap_us == 5 * MINUTE_US  # given: kept for the check to compare
    assert resolved.rules.lateness_us == 2 * MINUTE_US  # left out: the record's
    assert resolved.explicit == RECORDED


def test_a_command_passes_one_settings_object():
    rules = SessionRules(gap_us=7 * MINUTE_US)
    opts = StreamOptions(
        input="in/",
        output="out/",
        checkpoint="chk/",
        state="files:/s",
        rules=rules,
        partitions=2,
        job="j",
        max_future_us=None,
        explicit=frozenset({"gap"}),
    )
    s = opts.sessionizer()
    assert s.settings == SessionizerSettings(
        rules, opts.mapping, StoreSettings("files:/s", 2, "j"), None, frozenset({"gap"})
    )
    assert Sessionizer.of(s.settings).settings is s.settings
