"""Engines: where the session logic meets Spark and a state store."""
