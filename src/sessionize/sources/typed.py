"""Raw records (`value`, `error`, `source`) -> the typed columns of a given schema, or a
reason: the parse behind `stateful.source`.

Each line is decoded by msgspec into a struct made from the schema (`msgspec.defstruct`),
one C call per line inside the Spark task; a line that does not fit gets the reason of its
first wrong field, named by its path, in the session parser's words (docs/how-to/bad-input.md).
Lines are decoded one by one rather than joined into one JSON array per block: in a block,
a hostile line can close another line's string and two wrong lines can look like two
right ones.

Rules: extra fields are ignored; an absent field and JSON `null` are the same (`missing F`
where the schema's field is not nullable); a duplicated key keeps its last value; integers
must be JSON integers that fit the column's width (`F: integer out of range (64-bit)`),
floats take any JSON number, strings and booleans only their own JSON type; a timestamp
column takes an RFC 3339 / ISO-8601 date-time string (`2026-11-01T10:00:00Z`, a space for
the `T`, an offset, or none: UTC), anything else is `F is not an ISO-8601 timestamp`.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import msgspec
import pyarrow as pa

from sessionize.core.invalid import RAW, REASON, SOURCE
from sessionize.errors import ConfigError

_UTC = dt.UTC
_ARTICLE = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "a boolean",
    dt.datetime: "a string",
}
_PATH = re.compile(r" - at `\$((?:\.\w+)*)`$")


def marked_schema(schema: pa.Schema) -> pa.Schema:
    """The typed records' columns: the schema's (nullable: an invalid row has none), then
    the invalid marks `_raw`, `_reason`, `_source` (stateful/invalid.py)."""
    fields = [f.with_nullable(True) for f in schema]
    return pa.schema(
        [
            *fields,
            pa.field(RAW, pa.string()),
            pa.field(REASON, pa.string()),
            pa.field(SOURCE, pa.string()),
        ]
    )


def _python_type(field: pa.Field) -> Any:
    t = field.type
    if pa.types.is_signed_integer(t):
        top = 2 ** (t.bit_width - 1)
        return Annotated[int, msgspec.Meta(ge=-top, le=top - 1)]
    if pa.types.is_floating(t):
        return float
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return str
    if pa.types.is_boolean(t):
        return bool
    if pa.types.is_timestamp(t) and t.unit != "ns":
        return dt.datetime
    raise ConfigError(
        f"stateful.source reads int, float, string, bool and timestamp[s|ms|us] columns; "
        f"column '{field.name}' is {t}: read it as one of those and convert it in process"
    )


class RecordDecoder:
    """Decodes the JSON lines of one schema (built once per task: the struct type is not
    picklable).

    Example:
        >>> d = RecordDecoder(pa.schema([("id", pa.int64())]))
        >>> d.reason('{"id": "7"}')
        'id: expected an integer'
    """

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.kinds = {f.name: _python_type(f) for f in schema}
        fields = [(name, kind | None, None) for name, kind in self.kinds.items()]
        self.row_type = msgspec.defstruct("Row", fields)
        self.decoder = msgspec.json.Decoder(self.row_type)

    def decode(self, line: str) -> tuple[Any, str | None]:
        """(the decoded row, None), or (None, why the line does not fit)."""
        if not line.strip():
            return None, "empty line"
        try:
            row = self.decoder.decode(line)
        except msgspec.ValidationError as e:
            # the first wrong field stops the typed decode: the rest of the line may not
            # even be JSON, which comes first (as in the session parser)
            try:
                msgspec.json.decode(line, type=msgspec.Raw)  # syntax only
            except msgspec.DecodeError:
                return None, "not a JSON object"
            return None, self._reason(str(e))
        except msgspec.DecodeError:
            return None, "not a JSON object"
        for f in self.schema:
            if not f.nullable and getattr(row, f.name) is None:
                return None, f"missing {f.name}"
        return row, None

    def reason(self, line: str) -> str | None:
        """Why `line` does not fit, or None."""
        return self.decode(line)[1]

    def _reason(self, message: str) -> str:
        found = _PATH.search(message)
        if not found or not found.group(1):
            return "not a JSON object"  # the line itself is an array, a number, ...
        path = found.group(1)[1:]
        kind = self.kinds.get(path)
        base = getattr(kind, "__origin__", kind)
        if base is int and "Expected `int` " in message:
            return f"{path}: integer out of range ({self.schema.field(path).type.bit_width}-bit)"
        if base is dt.datetime and message.startswith("Invalid"):
            return f"{path} is not an ISO-8601 timestamp"
        if base is float and message.startswith("Number out of range"):
            return f"{path}: number out of range"
        if base in _ARTICLE:
            return f"{path}: expected {_ARTICLE[base]}"
        return f"{path}: {_PATH.sub('', message)}"


def typed_batch(decoder: RecordDecoder, batch: pa.RecordBatch) -> pa.RecordBatch:
    """One batch of raw records (`value`, `error`, `source`) -> `marked_schema` rows: the
    typed columns of every valid line, `_raw`/`_reason`/`_source` of every other."""
    values = batch.column("value").to_pylist()
    errors = batch.column("error").to_pylist()
    sources = batch.column("source").to_pylist()
    rows: list[Any] = []
    reasons: list[str | None] = []
    for value, error in zip(values, errors, strict=True):
        if error is not None:
            row, why = None, error
        elif value is None:
            row, why = None, "unreadable record"
        else:
            row, why = decoder.decode(value)
        rows.append(row)
        reasons.append(why)
    columns = []
    for f in decoder.schema:
        column = [None if r is None else getattr(r, f.name) for r in rows]
        if decoder.kinds[f.name] is dt.datetime:
            column = [_utc(v) for v in column]
        columns.append(pa.array(column, f.type))
    bad = [why is not None for why in reasons]
    columns += [
        pa.array([v if b else None for v, b in zip(values, bad, strict=True)], pa.string()),
        pa.array(reasons, pa.string()),
        pa.array([s if b else None for s, b in zip(sources, bad, strict=True)], pa.string()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=marked_schema(decoder.schema))


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=_UTC)


def typed_task(
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
    decode: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]] | None = None,
) -> Iterator[pa.RecordBatch]:
    """A mapInArrow task: raw records (or, with `decode`, a listing of files that `decode`
    turns into them: `sources.files.decode_listed`) -> `marked_schema` rows."""
    decoder = RecordDecoder(schema)
    for batch in decode(batches) if decode is not None else batches:
        if batch.num_rows:
            yield typed_batch(decoder, batch)
