"""Tests of the pure session logic (docs/design.md, "Semantics")."""
