"""ISO-8601 times read in numpy (`events.times.iso_micros`) against the reference's reading
of each string with `datetime` (`reference.iso_us`), mostly well-formed times near the
limits of each field."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionize.events.times import iso_micros

from .reference import OPEN, iso_us


def _digits(lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.integers(lo, hi).map(lambda n: f"{n:02d}")


times = st.builds(
    lambda y, mo, d, sep, h, mi, s, frac, zone: f"{y:04d}-{mo}-{d}{sep}{h}:{mi}{s}{frac}{zone}",
    st.integers(1, 9999) | st.sampled_from([1970, 2000, 2024]),
    _digits(0, 13),
    _digits(0, 32),
    st.sampled_from("T "),
    _digits(0, 24),
    _digits(0, 60),
    st.sampled_from(["", ":00"]) | _digits(0, 60).map(lambda s: ":" + s),
    st.sampled_from(["", ".5", ".000001", ".123456789", ".1234567", ".660", "."]),
    st.sampled_from(["", "Z", "+02:00", "-0530", "+18:00", "+18:01", "-00:59", "+0000", "+02"]),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(times | st.text(max_size=30), min_size=1, max_size=50))
def test_iso_times_read_as_the_reference(texts):
    got = iso_micros(pa.array(texts, pa.string())).to_pylist()
    for text, us in zip(texts, got, strict=True):
        want = iso_us(text)
        if want != OPEN:  # a time Java's `$` decides is left to the exact path
            assert us == want, text
