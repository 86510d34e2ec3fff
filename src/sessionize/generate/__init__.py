"""Internals of the synthetic visit generator; the public API is `sessionize.generator`.

config.py (settings) -> visits.py (users, visits, events as numpy arrays) ->
layout.py (files, arrival times, duplicates, late and invalid lines) -> lines.py (JSON text).
"""
