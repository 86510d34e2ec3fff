"""JSON lines -> typed Arrow event columns, a block at a time, in the task that read them.

A block of lines goes to `pyarrow.json` in one call, with the fields read (the rule table,
`rules.read_fields`) given their types and every other field inferred, so that a key given
twice anywhere, a number or object where a string belongs, an integer that is not a 64-bit
integer, a lone surrogate or anything that is not strict JSON makes the reader refuse.
A refused block is split at the row the error names (or halved) until each part is read or
is one line: the lines it refuses are left to the exact path (`EXACT` true), which reads
them as Spark's expressions always have (`parsing.parse`). So are lines that are not one
braced object and lines whose first field is a field read with a value pyarrow refuses for
its type (both given to pyarrow as `{}`, so every line keeps its row and the columns need
no reordering; the second kind would make pyarrow refuse its block after reading the lines
before it), rows where pyarrow read a NaN or an infinity at any depth (`NaN`, `Inf`,
`Infinity`: numbers to pyarrow, not to Spark), a time that ends in a line break or names the
year 0, and a gap too large to be one. A number field (an epoch time, a gap) may hold
numeric strings (`"49.90"`, `rules.NUMBER_TEXT`): pyarrow reads a field as numbers or as
strings, so a block whose first row holds the other kind is read again with the field as
that kind (`_switched`; the next block starts as the last one read), the strings turned
into the numbers they write; a string that is not a number is left to the exact path,
which names it. What the reader
accepts is judged here, vectorized, with the reasons and in the order of docs/design.md
("Events"): a missing user or time, a time that is not one, a missing page, a bad gap, a
string id that cannot be a key, a time too far ahead of the batch.

A mapping that reads a conversion's value (its JSON text) is not read here (`plan` is None).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from sessionize.base_schema import GAP_COLUMN
from sessionize.core.keys import store_keys
from sessionize.events import rules as R
from sessionize.events.number_text import numbers_of_texts
from sessionize.events.times import (
    epoch_micros,
    exact_times,
    half_away_from_zero,
    iso_micros,
    string_offsets,
)
from sessionize.mapping import EventMapping

EXACT = "_exact"  # True: the line is left to the exact path
NOT_FINITE = ""  # the rows of a call of pyarrow.json holding a NaN or an infinity
USER_KEY = "user_key"
TS = pa.timestamp("us", tz="UTC")
SPARK_KEY_OF_NULL = 42  # Spark's xxhash64 of a NULL is its seed
_ARROW_TYPES = {R.INTEGER: pa.int64(), R.STRING: pa.string(), R.NUMBER: pa.float64()}
_ROW = re.compile(r" in row (\d+)$")
# Lines shorter than this are read one at a time once a block is refused.
_SPLIT_LINES = 16
# Lines per call of pyarrow.json: a refused call is read again in parts, so a bad line costs
# about half this many lines read twice.
_BLOCK_LINES = 4096
_NULL = pa.scalar(None, pa.string())
# The bytes a JSON value pyarrow reads as each type may start with (`null` included; NaN and
# infinities are numbers to pyarrow), and JSON's spaces, which a value may follow.
_SPACES = b" \t\r\n"
_FIRST_BYTES = {
    "int64": b"-0123456789n" + _SPACES,
    "double": b'-0123456789nNI"' + _SPACES,
    "string": b'"n' + _SPACES,
    "struct": b"{n" + _SPACES,
}
# A line nested deeper than this is left to the exact path: Spark's reader refuses deep
# nesting (at a depth pyarrow reads), and no event nests this deep.
_MAX_DEPTH = 64


@dataclass(frozen=True)
class BlockPlan:
    """What `read_block` needs of a mapping, computed once."""

    mapping: EventMapping
    read: pa.Schema  # the fields read, nested as their paths, for pyarrow.json
    rules: tuple[R.FieldRule, ...]
    schema: pa.Schema  # the output: event columns, reason, raw, source, EXACT
    # (`{"KEY":`, whether pyarrow may accept a value of KEY's type starting with each byte) of the
    # top-level fields read: a line starting so with another byte is certainly refused.
    firsts: tuple[tuple[str, bytes], ...]
    # The number fields read as JSON strings (numeric strings, `rules.NUMBER_TEXT`): pyarrow
    # reads a field as numbers or as strings, never both, so a block holding numeric
    # strings is read again with that field as text (`_switched`).
    as_text: frozenset[str] = frozenset()


def _tree(fields: tuple[tuple[str, str], ...], as_text: frozenset[str] = frozenset()) -> pa.Schema:
    tree: dict = {}
    for path, kind in fields:
        node = tree
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        kind = R.STRING if path in as_text else kind
        node.setdefault(parts[-1], {} if kind == R.OBJECT else _ARROW_TYPES[kind])

    def struct(node: dict) -> list[pa.Field]:
        return [
            pa.field(k, pa.struct(struct(v)) if isinstance(v, dict) else v) for k, v in node.items()
        ]

    return pa.schema(struct(tree))


@functools.lru_cache(maxsize=16)
def plan(mapping: EventMapping | None = None) -> BlockPlan | None:
    """The plan of `mapping` (default mapping when None); None when a field is read as its
    JSON text (a conversion's value), which pyarrow does not give."""
    m = mapping or EventMapping()
    fields = R.read_fields(m)
    if any(kind == R.ANY for _, kind in fields):
        return None
    rules = R.field_rules(m)
    user = pa.string() if m.string_keys else pa.int64()
    types = {"user_id": user, "event_time": TS}
    out = [pa.field(r.name, types.get(r.name, pa.string())) for r in rules]
    out += [pa.field(USER_KEY, pa.int64())] if m.string_keys else []
    out += [pa.field(n, pa.string()) for n in ("reason", "raw", "source")]
    out.append(pa.field(EXACT, pa.bool_()))
    read = _tree(fields)
    firsts = tuple(
        (
            "{" + json.dumps(f.name, ensure_ascii=False) + ":",
            _starting_bytes(_FIRST_BYTES[_kind(f.type)]),
        )
        for f in read
    )
    return BlockPlan(m, read, rules, pa.schema(out), firsts)


@functools.lru_cache(maxsize=64)
def _with_text(p: BlockPlan, as_text: frozenset[str]) -> BlockPlan:
    """`p` with the number fields `as_text` read as JSON strings."""
    read = _tree(R.read_fields(p.mapping), as_text)
    return BlockPlan(p.mapping, read, p.rules, p.schema, p.firsts, as_text)


# pyarrow's refusal of a block whose field holds the other kind than it was told to read.
_OTHER_KIND = re.compile(
    r"Column\((/[^)]*)\) changed from (number|string) to (string|number) "
    r"in row 0$"
)


def _switched(p: BlockPlan, error: str) -> BlockPlan | None:
    """The plan that reads a number field as the kind pyarrow met in the first row of a
    refused block (numbers or numeric strings), or None: the block is refused otherwise."""
    found = _OTHER_KIND.search(error)
    if found is None:
        return None
    column, was, met = found.groups()
    for r in p.rules:
        if r.kind == R.NUMBER and "/" + r.path.replace(".", "/") == column:
            if was == "number" and met == "string" and r.path not in p.as_text:
                return _with_text(p, p.as_text | {r.path})
            if was == "string" and met == "number" and r.path in p.as_text:
                return _with_text(p, p.as_text - {r.path})
    return None


def _kind(kind: pa.DataType) -> str:
    return "struct" if pa.types.is_struct(kind) else str(kind)


def _starting_bytes(allowed: bytes) -> bytes:
    """256 flags (0 or 1): whether a value may start with each byte."""
    return bytes(int(b in allowed) for b in range(256))


def _read(p: BlockPlan, data: pa.Buffer) -> dict[str, pa.Array] | str:
    """One call of pyarrow.json: the fields read by path and, under NOT_FINITE, the rows
    holding NaN or an infinity anywhere; or the error's text."""
    options = pj.ParseOptions(explicit_schema=p.read, unexpected_field_behavior="infer")
    read = pj.ReadOptions(use_threads=False, block_size=max(data.size, 1 << 16))
    try:
        table = pj.read_json(pa.BufferReader(data), read_options=read, parse_options=options)
        if _deeper_than(table.schema, _MAX_DEPTH):
            return f"nested deeper than {_MAX_DEPTH}"
        top = {name: table.column(name).combine_chunks() for name in p.read.names}
        got = {r.path: _leaf(top, r.path) for r in p.rules}
        got[NOT_FINITE] = _not_finite_rows(table)
        for path in p.as_text:  # numeric strings as numbers; other strings: the exact path
            got[path], odd = numbers_of_texts(got[path])
            got[NOT_FINITE] = pc.or_(got[NOT_FINITE], odd)
        return got
    except pa.ArrowException as exc:  # whatever pyarrow fails on goes to the exact path
        return str(exc)


def _not_finite_rows(table: pa.Table) -> pa.Array:
    """Whether each row holds a NaN or an infinity at any depth: pyarrow reads `NaN`, `Inf`
    and `Infinity` as numbers (a finite number too large for a double it refuses), which
    Spark's reader reads its own way."""
    rows = np.zeros(table.num_rows, bool)
    for column in table.columns:
        if not _holds_floats(column.type):
            continue
        for at, flags in _not_finite(column.combine_chunks()):
            if at is None:
                rows |= flags
            else:
                rows[at[flags]] = True
    return pa.array(rows)


def _holds_floats(kind: pa.DataType) -> bool:
    stack = [kind]
    while stack:
        kind = stack.pop()
        if pa.types.is_floating(kind):
            return True
        stack.extend(kind.field(i).type for i in range(kind.num_fields))
    return False


def _not_finite(
    values: pa.Array, at: np.ndarray | None = None
) -> Iterator[tuple[np.ndarray | None, np.ndarray]]:
    """(rows, flags) pairs: whether each value of `values` (at rows `at` of the table, None:
    row i is value i) is or holds a NaN or an infinity. A loop over the types, not a
    recursion: a recursion would meet Python's own limit first."""
    stack = [(values, at)]
    while stack:
        values, at = stack.pop()
        kind = values.type
        if pa.types.is_floating(kind):
            finite = pc.is_finite(values)
            if not pc.all(finite).as_py():  # NULL is neither
                yield at, ~finite.fill_null(True).to_numpy(zero_copy_only=False)
        elif pa.types.is_struct(kind):
            stack.extend((values.field(i), at) for i in range(kind.num_fields))
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            parents = pc.list_parent_indices(values).to_numpy()
            stack.append((values.flatten(), parents if at is None else at[parents]))


def _deeper_than(schema: pa.Schema, limit: int) -> bool:
    """Whether a type of `schema` nests more than `limit` levels (a loop: a recursion would
    meet Python's own limit first)."""
    stack = [(f.type, 1) for f in schema]
    while stack:
        kind, depth = stack.pop()
        if depth > limit:
            return True
        stack.extend((kind.field(i).type, depth + 1) for i in range(kind.num_fields))
    return False


def _accepted(
    p: BlockPlan,
    data: pa.Buffer,
    ends: np.ndarray,
    lo: int,
    hi: int,
    out: list[tuple[int, dict[str, pa.Array]]],
) -> BlockPlan:
    """Read lines lo..hi-1 (`ends`: each line's end in `data`, newline included); append
    (first line, table) of what is read, in line order; lines refused alone are left out.
    Returns the plan that read last: a block of numeric strings is read with them as text
    (`_switched`, at most twice per number field and range), and so is the next block. A
    stack of ranges, first range on top, rather than a recursion: lines that alternate
    numbers and numeric strings split a block at every line."""
    todo = [(lo, hi, 0)]
    while todo:
        lo, hi, switches = todo.pop()
        start = 0 if lo == 0 else int(ends[lo - 1])
        got = _read(p, data.slice(start, int(ends[hi - 1]) - start))
        if not isinstance(got, str) and len(got[p.mapping.key_field]) == hi - lo:
            out.append((lo, got))
            continue
        other = _switched(p, got) if isinstance(got, str) else None
        if other is not None and switches < 2 * len(p.rules):
            p = other
            todo.append((lo, hi, switches + 1))
        elif hi - lo == 1:
            continue
        elif hi - lo <= _SPLIT_LINES:
            todo.extend((i, i + 1, 0) for i in range(hi - 1, lo - 1, -1))
        else:
            at = _ROW.search(got) if isinstance(got, str) else None
            row = int(at.group(1)) if at else 0
            if 0 < row < hi - lo:  # the rows before it were read; the row itself alone
                todo += [(lo + row + 1, hi, 0)] if lo + row + 1 < hi else []
                todo += [(lo + row, lo + row + 1, 0), (lo, lo + row, 0)]
            else:
                todo += [((lo + hi) // 2, hi, 0), (lo, (lo + hi) // 2, 0)]
    return p


def _leaf(top: dict[str, pa.Array], path: str) -> pa.Array:
    """The column at a dotted path (NULL where an enclosing object is), from the top-level
    columns read."""
    parts = path.split(".")
    column = top[parts[0]]
    for part in parts[1:]:
        column = pc.struct_field(column, part)  # NULL where the enclosing object is
    return column


def _parse_lines(
    p: BlockPlan, values: pa.StringArray, candidate: np.ndarray
) -> tuple[dict[str, pa.Array], np.ndarray]:
    """The fields read of every line (NULL where not read) and which lines were read: the
    `candidate` lines, in place (the others are given to pyarrow as `{}`), so the columns
    need no reordering."""
    n = len(values)
    if not candidate.all():
        values = pc.if_else(pa.array(candidate), values, pa.scalar("{}"))
    # One string of the lines between line breaks (one copy; the line breaks keep a string
    # from running on into the next line).
    whole = pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), values)
    data = pc.binary_join(whole, "\n").buffers()[2] if n else pa.py_buffer(b"")
    offsets = string_offsets(values)
    ends = offsets[1:] - offsets[0] + np.arange(1, n + 1)  # each line's end, its break included
    ends[-1:] -= 1  # the last line has none
    parts: list[tuple[int, dict[str, pa.Array]]] = []
    reading = p  # the plan of the last block: numeric strings come in runs
    for lo in range(0, n, _BLOCK_LINES):
        reading = _accepted(reading, data, ends, lo, min(lo + _BLOCK_LINES, n), parts)
    read = np.zeros(n, bool)
    for first, got in parts:
        read[first : first + len(got[p.mapping.key_field])] = ~got[NOT_FINITE].to_numpy(
            zero_copy_only=False
        )
    columns = {}
    for r in p.rules:
        kind = _ARROW_TYPES[r.kind]
        pieces, done = [], 0
        for first, got in parts:  # the lines refused alone are NULL
            if first > done:
                pieces.append(pa.nulls(first - done, kind))
            pieces.append(got[r.path])
            done = first + len(got[r.path])
        if done < n or not pieces:
            pieces.append(pa.nulls(n - done, kind))
        columns[r.path] = pa.concat_arrays(pieces) if len(pieces) != 1 else pieces[0]
    return columns, read & candidate


def read_block(
    batch: pa.RecordBatch,
    p: BlockPlan,
    now_us: int | None = None,
    max_future_us: int | None = None,
    valid_sources: bool = True,
) -> pa.RecordBatch:
    """RECORD_SCHEMA rows (`value`, `error`, `source`) -> `p.schema` rows, in order.

    With `now_us` and `max_future_us` a time more than that ahead of `now_us` is invalid;
    with `valid_sources` False a valid event's `source` is NULL.
    A row with `EXACT` true has no reason here: the exact path decides it from `raw`."""
    m = p.mapping
    values = batch.column("value").cast(pa.string())
    error = batch.column("error").cast(pa.string())
    # Only what looks like one object goes to pyarrow: a line that is not one would only
    # make it refuse its block (pyarrow also skips blank lines and reads `{} {}` as two).
    braced = pc.and_(pc.starts_with(values, "{"), pc.ends_with(values, "}")).fill_null(False)
    candidate = pc.and_(pc.is_null(error), braced).to_numpy(zero_copy_only=False)
    candidate &= ~_refused_first_field(p, values)
    found, read = _parse_lines(p, values, candidate)
    col = {r.name: found[r.path] for r in p.rules}
    user, time, page = col["user_id"], col["event_time"], col["page"]
    if m.time_format == "iso8601":
        read &= ~exact_times(time)
        us = iso_micros(time)
    else:
        us = epoch_micros(time.to_numpy(zero_copy_only=False), m.time_format)
    # (whether, reason) in the order of the rules: the first that holds is the reason
    valid_us = _numbers(us)
    steps = [
        (_nulls(user), R.FieldReason.MISSING.at(m.key_field)),
        (_nulls(time), R.FieldReason.MISSING.at(m.time)),
        (_nulls(us), R.bad_time(m.time, m.time_format)),
        ((valid_us < R.MIN_US) | (valid_us > R.MAX_US), R.FieldReason.TIME_OUT_OF_RANGE.at(m.time)),
        (_nulls(page), R.FieldReason.MISSING.at(m.page)),
    ]
    if m.gap:
        gap, bad, huge = _gap(col[GAP_COLUMN])
        read &= ~huge
        col[GAP_COLUMN] = gap
        steps.append((bad, R.FieldReason.BAD_GAP.at(m.gap)))
    if m.string_keys:
        size = _numbers(pc.binary_length(user))
        steps.append((size == 0, R.FieldReason.EMPTY_KEY.at(m.key_field)))
        steps.append((size > R.KEY_BYTES, R.FieldReason.LONG_KEY.at(m.key_field)))
    if now_us is not None and max_future_us is not None:
        steps.append((valid_us > now_us + max_future_us, R.FieldReason.TOO_FAR_AHEAD.at(m.time)))
    has_error = ~_nulls(error)
    early = [(_nulls(values), R.UNREADABLE), (_spaces_only(values, braced), R.EMPTY_LINE)]
    exact = ~read & ~has_error & ~early[0][0] & ~early[1][0]
    code = np.zeros(len(values), np.int8)  # 0: no reason, k: the k-th reason
    for k in range(len(early) + len(steps), 0, -1):
        code[(early + steps)[k - 1][0]] = k
    code[exact | has_error] = 0
    texts = pa.array([None, *(reason for _, reason in early + steps)], pa.string())
    reason = pc.coalesce(error, texts.take(pa.array(code)))
    kept = pa.array((code > 0) | has_error | exact)
    raw = pc.if_else(kept, values, _NULL)  # the line of an invalid or exact path's row
    col["event_time"] = us.cast(TS)
    col["action"] = pc.coalesce(col["action"], pa.scalar(R.DEFAULT_ACTION))
    columns = [col[r.name] for r in p.rules]
    if m.string_keys:
        columns.append(_user_keys(user))
    source = batch.column("source")
    if not valid_sources:
        source = pc.if_else(kept, source, _NULL)
    columns += [reason, raw, source, pa.array(exact)]
    return pa.RecordBatch.from_arrays(columns, schema=p.schema)


def _refused_first_field(p: BlockPlan, values: pa.StringArray) -> np.ndarray:
    """Whether each line starts with a field read whose value pyarrow certainly refuses for
    its type (`{"user_id": "7", ...`): such a line would only make pyarrow refuse its block
    after reading the lines before it, and is refused alone, so it goes to the exact path
    without being read. Lines that start otherwise are not judged here."""
    refused = np.zeros(len(values), bool)
    data = values.buffers()[2]
    if data is None or len(values) == 0:
        return refused
    raw = np.frombuffer(data, np.uint8)
    offsets = string_offsets(values)
    for prefix, allowed in p.firsts:
        rows = np.flatnonzero(
            pc.starts_with(values, prefix).fill_null(False).to_numpy(zero_copy_only=False)
        )
        if not len(rows):
            continue
        at, end = offsets[rows] + len(prefix.encode()), offsets[rows + 1]
        at = np.where((at < end - 1) & (raw[np.minimum(at, len(raw) - 1)] == ord(" ")), at + 1, at)
        inside = at < end
        first = raw[np.minimum(at, len(raw) - 1)]
        refused[rows[inside & ~np.frombuffer(allowed, bool)[first]]] = True
    return refused


def _spaces_only(values: pa.StringArray, braced: pa.Array) -> np.ndarray:
    """Whether each line is spaces alone (Spark's trim: spaces only); a braced line is not,
    so only the others are trimmed."""
    spaces = np.zeros(len(values), bool)
    others = np.flatnonzero(~braced.to_numpy(zero_copy_only=False))
    if len(others):
        trimmed = pc.utf8_trim(values.take(pa.array(others)), " ")
        spaces[others] = pc.equal(trimmed, "").fill_null(False).to_numpy(zero_copy_only=False)
    return spaces


def _nulls(values: pa.Array) -> np.ndarray:
    return values.is_null().to_numpy(zero_copy_only=False)


def _numbers(values: pa.Array) -> np.ndarray:
    """An integer array as int64 numbers, NULL as 0."""
    return values.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


def _gap(seconds: pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """(gap in µs as decimal digits, whether a present gap is bad, whether it is too large
    for a 64-bit µs count and so left to the exact path)."""
    x = seconds.to_numpy(zero_copy_only=False).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        us = half_away_from_zero(x * 1e6)
        huge = np.abs(us) >= 2.0**63
        bad = (us <= 0) | (us > float(R.MAX_GAP_US))
    present = ~np.isnan(x)
    whole = np.where(present & ~huge, us, 0).astype(np.int64)
    text = pa.array(whole, pa.int64(), mask=~present).cast(pa.string())
    return text, present & bad, present & huge


def _user_keys(user: pa.Array) -> pa.Array:
    """Spark's `xxhash64` of string user ids (seed 42; NULL hashes to the seed)."""
    valid = pc.is_valid(user)
    keys = np.full(len(user), SPARK_KEY_OF_NULL, np.int64)
    mask = valid.to_numpy(zero_copy_only=False)
    if mask.any():
        keys[mask] = store_keys(user.filter(valid)).to_numpy()
    return pa.array(keys)
