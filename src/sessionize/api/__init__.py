"""The Python API: `Sessionizer`, for sessionization inside the user's PySpark jobs.

Both names are imported on first use, so that the command line can import the API's
argument checks (`api.arguments`) without PySpark (`spark_version`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["SessionsResult", "Sessionizer"]

if TYPE_CHECKING:
    from sessionize.api.bounded import SessionsResult
    from sessionize.api.sessionizer import Sessionizer


def __getattr__(name: str):
    if name == "Sessionizer":
        from sessionize.api.sessionizer import Sessionizer

        return Sessionizer
    if name == "SessionsResult":
        from sessionize.api.bounded import SessionsResult

        return SessionsResult
    raise AttributeError(f"module 'sessionize.api' has no attribute {name!r}")
