"""`allowed_lateness_us`: rows behind the watermark by at most that reach `process` with the
on-time ones; older rows go to the late output; a wrong value is refused in one line."""

from __future__ import annotations

import pytest

from sessionize.errors import ProcessorError

from .helpers import Probe, events, run


class Revising(Probe):
    allowed_lateness_us = 50


def test_rows_within_the_allowed_lateness_reach_process_and_older_ones_are_late():
    p = Revising()
    got = run(p, None, events([1, 2, 3, 4], [1000, 951, 950, 949]), before=1000, after=1000)
    ((_, rows, _),) = p.calls
    assert sorted(rows.column("k").to_pylist()) == [1, 2, 3]  # 950 = 1000 - 50 is in
    assert got.outputs["late"].column("k").to_pylist() == [4]


def test_without_it_every_row_behind_the_watermark_is_late():
    p = Probe()
    got = run(p, None, events([1, 2], [1000, 999]), before=1000, after=1000)
    assert p.calls[0][1].column("k").to_pylist() == [1]
    assert got.outputs["late"].column("k").to_pylist() == [2]


def test_a_negative_allowed_lateness_is_refused():
    class Wrong(Probe):
        allowed_lateness_us = -1

    with pytest.raises(ProcessorError, match="`allowed_lateness_us` must be a non-negative"):
        run(Wrong(), None, events([1], [1]), before=None, after=1)
