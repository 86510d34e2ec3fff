"""sessionize: user sessionization on PySpark, streaming and batch, exactly once."""

__version__ = "0.1.0"
