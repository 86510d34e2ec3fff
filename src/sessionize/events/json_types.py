"""The JSON type of a field of a line, as the exact parse names it (`type_checks.type_reason`).

On Spark 4.0+ a line is read as a variant (`try_parse_json`) and a field's type is
`schema_of_variant` of it: 'BIGINT', 'DECIMAL(20,0)', 'STRING', 'BOOLEAN', 'VOID' (a JSON
null), 'OBJECT<...>', 'ARRAY<...>', or NULL where the path does not exist. Spark 3.5 has no
variant: there a Python function over the line (`kind_of`, run as a vectorized UDF) names the
types the same way, so the same reasons come out. It runs only in the exact parse's
projection, whose lines the block reader left to it (the others reach it as NULL).
"""

from __future__ import annotations

import json
from typing import Any

from sessionize import spark_version

_INT64 = range(-(1 << 63), 1 << 63)
_MISSING = object()


def kind_of(line: str | None, path: str) -> str | None:
    """The type name of the JSON value at dotted `path` of `line` ("" for the line itself),
    or None where `line` is not JSON or the path does not exist.

    >>> kind_of('{"user_id": 12, "page": {"current": null}}', "user_id")
    'BIGINT'
    >>> kind_of('{"user_id": 123456789012345678901}', "user_id")
    'DECIMAL(21,0)'
    >>> kind_of('{"page": {"current": null}}', "page.current"), kind_of("{", "")
    ('VOID', None)
    """
    if not isinstance(line, str):
        return None  # NULL (pandas may hand it over as NaN)
    try:
        value: Any = json.loads(line, parse_constant=_refuse)
    except ValueError:
        return None
    for part in path.split(".") if path else ():
        value = value.get(part, _MISSING) if isinstance(value, dict) else _MISSING
        if value is _MISSING:
            return None
    return _name(value)


def _refuse(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")  # NaN, Infinity: Python's extension


def _name(value: Any) -> str:
    if value is None:
        return "VOID"
    if isinstance(value, bool):
        return "BOOLEAN"
    if isinstance(value, int):
        digits = len(str(abs(value)))
        if value in _INT64:
            return "BIGINT"
        return f"DECIMAL({digits},0)" if digits <= 38 else "DOUBLE"  # past Spark's decimals
    if isinstance(value, float):
        return "DOUBLE"
    if isinstance(value, str):
        return "STRING"
    return "OBJECT<>" if isinstance(value, dict) else "ARRAY<>"


def parsed(value):
    """The line as the exact parse reads it: a variant (Spark 4.0+), or on Spark 3.5 the
    line itself where it is JSON; NULL where it is not JSON."""
    from pyspark.sql import functions as F

    if spark_version.has("variant"):
        return F.try_parse_json(value)
    return F.when(_kind_udf()(value, F.lit("")).isNotNull(), value)


def type_of(v, json_path: str, path: str):
    """The type name at `path` (`json_path`: the same as `$['a']['b']`) of `parsed`'s `v`."""
    from pyspark.sql import functions as F

    if spark_version.has("variant"):
        return F.schema_of_variant(F.variant_get(v, json_path, "variant"))
    return _kind_udf()(v, F.lit(path))


def _kind_udf():
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("string")  # type: ignore[call-overload]
    def json_kind(lines, paths):
        return lines.combine(paths, kind_of)

    return json_kind
