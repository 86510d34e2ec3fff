"""The commands a user runs (`stream`, `batch`, `demo`), each a function over options.

The CLI (`sessionize.cli`) parses flags into these options and calls these functions; the
Python API calls them too. Commands plan and check, engines do the work.
"""
