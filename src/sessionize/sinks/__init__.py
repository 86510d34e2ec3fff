"""Sinks: the four outputs of DESIGN §4, written per batch and published atomically."""
