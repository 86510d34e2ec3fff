"""The optional session rules as settings: bad values are one line before anything runs,
and they bind a checkpoint like `--gap` (an older checkpoint has them unset)."""

from __future__ import annotations

import pytest

from sessionize import Sessionizer
from sessionize.commands.stream import StreamOptions
from sessionize.config import SessionRules
from sessionize.engines.checkpoint import check_or_record
from sessionize.errors import ConfigError, IncompatibleCheckpoint
from sessionize.mapping import EventMapping
from tests.helpers import cli_env, sessionize


def test_bad_values_are_refused_naming_the_flag():
    with pytest.raises(ConfigError, match="--timezone 'Mars/Olympus' is not an IANA time zone"):
        SessionRules(timezone="Mars/Olympus")
    with pytest.raises(ConfigError, match="--max-duration must be positive"):
        SessionRules(max_duration_us=0)
    with pytest.raises(ConfigError, match="--gap-field 'a..b'"):
        EventMapping(gap="a..b")
    with pytest.raises(ConfigError, match="is not an IANA time zone"):
        Sessionizer(timezone="Mars/Olympus")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--timezone", "Mars/Olympus"], "--timezone 'Mars/Olympus' is not an IANA time zone"),
        (["--max-duration", "0s"], "--max-duration must be positive"),
    ],
)
def test_cli_says_what_is_wrong_in_one_line(tmp_path, flags, message):
    r = sessionize(
        "stream",
        "--input",
        str(tmp_path),
        "--output",
        str(tmp_path / "out"),
        "--checkpoint",
        str(tmp_path / "chk"),
        *flags,
        env=cli_env(),
        timeout=120,
    )
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert message in r.stderr


def _settings(chk, **kw) -> dict:
    rules = {
        k: kw.pop(k) for k in list(kw) if k in ("max_duration_us", "timezone", "split_at_midnight")
    }
    return StreamOptions(
        "in", "out", chk, rules=SessionRules(**rules), mapping=EventMapping(**kw)
    ).recorded_settings()


def test_a_checkpoint_from_before_the_rules_has_them_unset(tmp_path):
    chk = str(tmp_path / "chk")
    old = _settings(chk)
    for key in ("max_duration", "timezone", "split_at_midnight", "split_on_change", "gap_field"):
        old.pop(key)
    check_or_record(chk, old)  # what a version before the rules recorded
    check_or_record(chk, _settings(chk))  # none set: the same settings
    refused = {
        "--max-duration  (this run: 1d)": {"max_duration_us": 86_400_000_000},
        "--split-at-midnight False (this run: True)": {"split_at_midnight": True},
        "--timezone UTC (this run: Europe/Paris)": {"timezone": "Europe/Paris"},
        "--split-on-change  (this run: utm.campaign)": {"change": "utm.campaign"},
        "--gap-field  (this run: gap_s)": {"gap": "gap_s"},
    }
    for message, kw in refused.items():
        with pytest.raises(
            IncompatibleCheckpoint, match=message.replace("(", r"\(").replace(")", r"\)")
        ):
            check_or_record(chk, _settings(chk, **kw))


def test_a_changed_rule_is_refused_naming_it(tmp_path):
    chk = str(tmp_path / "chk")
    check_or_record(chk, _settings(chk, max_duration_us=3_600_000_000, gap="g"))
    with pytest.raises(IncompatibleCheckpoint, match=r"--max-duration 1h \(this run: 2h\)"):
        check_or_record(chk, _settings(chk, max_duration_us=7_200_000_000, gap="g"))
    with pytest.raises(IncompatibleCheckpoint, match=r"--gap-field g \(this run: h\)"):
        check_or_record(chk, _settings(chk, max_duration_us=3_600_000_000, gap="h"))


def test_revise_within_is_recorded_taken_when_left_out_and_refused_on_a_state_without_it():
    """`--revise-within` binds a job like the other rules: recorded when set, the record's
    value when left out (its key is absent from records without it), and refused given to a
    job whose state was built without it, which keeps no emitted sessions."""
    given, _ = Sessionizer(revise_within="3h").resolved({})
    assert given.rules.revise_within_us == 3 * 3_600_000_000
    assert given.mapping.session_columns == 2  # schema 3's continued visits: not revised
    record = given.recorded_settings("parquet")
    assert record["revise_within"] == "3h"
    again, _ = Sessionizer().resolved(record)
    assert again.rules.revise_within_us == 3 * 3_600_000_000
    without = Sessionizer().resolved({})[0].recorded_settings("parquet")
    assert "revise_within" not in without
    with pytest.raises(ConfigError, match="state was built without it"):
        Sessionizer(revise_within="3h").resolved(without)
