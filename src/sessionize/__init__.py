"""sessionize: user sessionization on PySpark, streaming and batch, exactly once.

`from sessionize import Sessionizer` is the Python API (sessionize.api). It is imported on
first use, so that `import sessionize` (and the command line) does not load PySpark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"
__all__ = ["Sessionizer", "__version__"]

if TYPE_CHECKING:
    from sessionize.api import Sessionizer


def __getattr__(name: str):
    if name == "Sessionizer":
        from sessionize.api import Sessionizer

        return Sessionizer
    raise AttributeError(f"module 'sessionize' has no attribute {name!r}")
