"""Files -> lines: the split agrees with Python's own `bytes.splitlines`."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sessionize.sources.lines import split_lines

# Line breaks and bytes that are line breaks elsewhere but not in files (`\x85`, `\x0b`,
# U+2028 in UTF-8), around ordinary text.
_PIECES = st.sampled_from(
    [b"a", b"bc", b"\n", b"\r", b"\r\n", b"\n\n", b"\x85", b"\x0b", b"\xe2\x80\xa8", b"\xff", b"{}"]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_PIECES, max_size=20))
def test_split_lines_is_bytes_splitlines(pieces):
    data = b"".join(pieces)
    assert split_lines(data).to_pylist() == data.splitlines()


def test_split_lines_without_carriage_returns():
    assert split_lines(b"").to_pylist() == []
    assert split_lines(b"\n").to_pylist() == [b""]
    assert split_lines(b"a\n\nb").to_pylist() == [b"a", b"", b"b"]
    assert split_lines(b"a\nb\n").to_pylist() == [b"a", b"b"]
