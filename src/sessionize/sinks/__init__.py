"""Sinks: the four outputs (docs/design.md, "Outputs"), written per batch, published atomically."""
