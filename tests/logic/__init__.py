"""Tests of the pure session logic (DESIGN §3)."""
