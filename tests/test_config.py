"""Durations as the CLI, the API and the checkpoint settings write them."""

from __future__ import annotations

import pytest

from sessionize.config import format_duration, parse_duration
from sessionize.errors import ConfigError

MS, S, M, H, D = 1_000, 1_000_000, 60_000_000, 3_600_000_000, 86_400_000_000


@pytest.mark.parametrize(
    ("text", "us"),
    [
        ("250ms", 250 * MS),
        ("90s", 90 * S),
        ("10m", 10 * M),
        ("1h", H),
        ("2d", 2 * D),
        ("1h30m", H + 30 * M),
        ("1d2h3m4s5ms", D + 2 * H + 3 * M + 4 * S + 5 * MS),
        ("0s", 0),
        (" 10M ", 10 * M),  # surrounding blanks and upper case are fine
        ("10m10m", 20 * M),  # repeated units add up
    ],
)
def test_durations_parse_to_microseconds(text, us):
    assert parse_duration(text) == us


@pytest.mark.parametrize(
    "text",
    ["", " ", "10", "m", "1x", "1.5h", "-5m", "1h junk 30m", "1h 30m", "junk1h", "1h30", "10 m"],
)
def test_anything_else_is_refused_in_one_line(text):
    with pytest.raises(ConfigError, match="is not a duration; write it like 90s") as e:
        parse_duration(text)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("us", [0, 250 * MS, 90 * S, 10 * M, H + 30 * M, D + 5 * MS])
def test_format_duration_reads_back_as_the_same_duration(us):
    assert parse_duration(format_duration(us)) == us


def test_retained_batches_come_from_the_environment_or_default_to_100():
    from sessionize.config import retained_batches

    assert retained_batches({}) == 100
    assert retained_batches({"SESSIONIZE_RETAIN_BATCHES": "12"}) == 12
    for bad in ("0", "-3", "ten", ""):
        with pytest.raises(ConfigError, match="SESSIONIZE_RETAIN_BATCHES"):
            retained_batches({"SESSIONIZE_RETAIN_BATCHES": bad})
