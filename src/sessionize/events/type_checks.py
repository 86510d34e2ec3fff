"""The exact parse's reading of JSON types as Spark column expressions (`parsing`): the
`from_json` schema of the fields read, and the first field whose JSON type is wrong."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sessionize.events import json_types
from sessionize.events import number_text as N
from sessionize.events import rules as R
from sessionize.mapping import EventMapping

# Every other kind is read as a string: a number as its text (`json_number`), since a
# DoubleType would refuse numeric strings, and a conversion's value as its JSON text.
SPARK_TYPES = {R.INTEGER: T.LongType()}


def json_schema(mapping: EventMapping) -> T.StructType:
    """The `from_json` schema of every field read, nested as the paths are."""
    tree: dict = {}
    for path, kind in R.read_fields(mapping):
        node = tree
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if kind != "object":
            node[parts[-1]] = SPARK_TYPES.get(kind, T.StringType())
        else:
            node.setdefault(parts[-1], {})

    def struct(node: dict) -> T.StructType:
        return T.StructType(
            [T.StructField(k, struct(v) if isinstance(v, dict) else v) for k, v in node.items()]
        )

    top = struct(tree)
    return top.add(T.StructField("_corrupt_record", T.StringType()))


def leaf(j: Column, path: str) -> Column:
    col = j
    for part in path.split("."):
        col = col[part]
    return col


def json_path(path: str) -> str:
    return "$" + "".join(f"['{part}']" for part in path.split("."))


def type_of(v: Column, path: str) -> Column:
    """Spark's name of the JSON type at `path` of variant `v` ('BIGINT', 'STRING',
    'OBJECT<...>', 'VOID' for null), or NULL where the path does not exist."""
    return json_types.type_of(v, json_path(path), path)  # Spark 3.5: no variant


def is_integer(kind: Column) -> Column:
    return kind.isin("BIGINT", "INT", "SMALLINT", "TINYINT")


def wrong_type(kind: Column, expected: str, text: Column | None = None) -> Column:
    ok = {
        "integer": is_integer(kind),
        "string": kind == "STRING",
        "object": kind.startswith("OBJECT"),
        "number": N.number_kind(kind),
    }[expected]
    if text is not None:  # a number may be a numeric string
        ok = ok | N.numeric_string(kind, text)
    return kind.isNotNull() & (kind != "VOID") & ~ok


def type_reason(mapping: EventMapping, value: Column, corrupt: Column, j: Column) -> Column:
    """The first field read whose JSON type is wrong, as `PATH: expected TYPE`, or NULL. A
    corrupt record that the exact parse rejects too is not valid JSON (e.g. a raw control
    character inside a string, which `json_object_keys` skips over). A number may be a
    string holding one (`j`: the parsed struct, a number field read as its text)."""
    v = json_types.parsed(value)
    out = F.when(v.isNull() & corrupt, F.lit(R.NOT_OBJECT))
    for path, expected in R.read_fields(mapping):
        if expected == "any":
            continue
        kind = type_of(v, path)
        if expected == "integer":  # an integer that does not fit in 64 bits
            out = out.when(
                kind.startswith("DECIMAL") & kind.endswith(",0)"),
                F.lit(R.FieldReason.INTEGER_OUT_OF_RANGE.at(path)),
            )
        wrong = F.lit(R.expected(path, expected))
        text = leaf(j, path) if expected == "number" else None
        out = out.when(wrong_type(kind, expected, text), wrong)
    return out
