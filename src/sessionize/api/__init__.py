"""The Python API: `Sessionizer`, for sessionization inside the user's PySpark jobs."""

from sessionize.api.bounded import SessionsResult
from sessionize.api.sessionizer import Sessionizer

__all__ = ["SessionsResult", "Sessionizer"]
