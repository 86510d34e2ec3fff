"""Numbers written as text: wherever a number is mapped (an epoch time, a `--gap-field`, a
conversion's value), a string that holds exactly a JSON number (`"49.90"`, `"1.7e12"`:
`rules.NUMBER_TEXT`) is that number, in every parser: Spark's expressions (JSON lines read
by `from_json`, typed string columns) and the block reader's pyarrow columns. Any other
string is not a number: the event is invalid, `PATH: expected a number`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from sessionize.events import rules as R
from sessionize.spark_casts import try_cast

if TYPE_CHECKING:  # PySpark is imported where a Spark expression is built (the block
    from pyspark.sql import Column  # reader's pyarrow part needs none)

# How `from_json` writes the non-standard numbers its reader accepts (`NaN`, `Infinity`,
# `-Infinity`, unquoted) into a string: quoted, which the content of a JSON string read as a
# string is only when the string itself holds the quotes (the exact type check tells those
# apart: events/json_types.py).
_NOT_FINITE_TEXT = {'"NaN"': "NaN", '"Infinity"': "Infinity", '"-Infinity"': "-Infinity"}


def text_number(text: Column) -> Column:
    """A string column -> the double each numeric string writes, NULL for other strings."""
    from pyspark.sql import functions as F

    return F.when(text.rlike(R.NUMBER_JAVA), try_cast(text, "double"))


def json_number(text: Column) -> Column:
    """A number field that `from_json` read into a string (a number's JSON text, or a
    string's content) -> the double it writes: a JSON number or a numeric string; NaN and
    the infinities Spark's JSON reader takes; NULL for anything else."""
    from pyspark.sql import functions as F

    out = text_number(text)
    for written, value in _NOT_FINITE_TEXT.items():
        out = out.when(text == written, try_cast(F.lit(value), "double"))
    return out


def number_kind(kind: Column) -> Column:
    """Whether Spark's variant type name `kind` is a number's (integer, decimal, double)."""

    return kind.isin("BIGINT", "INT", "SMALLINT", "TINYINT", "DOUBLE", "FLOAT") | (
        kind.startswith("DECIMAL")
    )


def numeric_string(kind: Column, text: Column) -> Column:
    """Whether a JSON value of Spark's variant type `kind` is a string holding a number
    (`text`: the string)."""
    from pyspark.sql import functions as F

    return (kind == "STRING") & F.coalesce(text.rlike(R.NUMBER_JAVA), F.lit(False))


def numbers_of_texts(texts: pa.Array) -> tuple[pa.Array, pa.Array]:
    """pyarrow strings -> (the float64 each numeric string stands for, null elsewhere;
    whether each row must be decided elsewhere: a string that is not a number, or one too
    large for a double). A numeric string reads as pyarrow reads the number it writes."""
    numeric = pc.match_substring_regex(texts, R.NUMBER_RE2)
    numbers = pc.cast(pc.if_else(numeric, texts, None), pa.float64())
    odd = pc.or_kleene(pc.invert(numeric), pc.invert(pc.is_finite(numbers)))
    return numbers, pc.and_kleene(pc.is_valid(texts), odd).fill_null(False)
