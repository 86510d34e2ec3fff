"""Paths below a path or URI: an S3 URI's options stay at the end of the URI. Listing a
directory that another process creates at that moment."""

from __future__ import annotations

import multiprocessing
import os
import time

import pyarrow.fs as pafs

from sessionize.fs import child, listing, location_key, without_options


def test_child_keeps_a_uri_query_at_the_end():
    uri = "s3://bucket/out/?endpoint_override=127.0.0.1:29900&scheme=http"
    assert child(uri, "_lease") == (
        "s3://bucket/out/_lease?endpoint_override=127.0.0.1:29900&scheme=http"
    )
    assert (
        child("s3://bucket/out", "sessions", "/batch_id=1/")
        == "s3://bucket/out/sessions/batch_id=1"
    )
    assert child("/data/out/", "_state") == "/data/out/_state"
    assert child("/data/a?b", "x") == "/data/a?b/x"  # a local name may hold a "?"


def test_a_postgresql_place_is_named_without_its_password():
    uri = "postgres://me:Pw%40secret@db:5432/app?schema=analytics&sslmode=require"
    assert location_key(uri) == "postgresql://me@db:5432/app?schema=analytics"
    assert location_key(uri) == location_key("postgresql://me@db:5432/app?schema=analytics")
    assert location_key(uri) != location_key("postgresql://me@db:5432/app?schema=other")
    assert without_options(uri) == "postgres://me:***@db:5432/app"
    assert without_options("s3://b/x?endpoint_override=h:9") == "s3://b/x"


def _make_dirs(root: str, count: int) -> None:
    for i in range(count):
        os.mkdir(f"{root}/d{i}")
        os.mkdir(f"{root}/d{i}/inner")
        time.sleep(0.0005)


def test_a_directory_is_listed_while_another_process_creates_it(tmp_path):
    """Each directory is listed in a tight loop as another process creates it: the listing
    is empty before, the directory's content after, and never an error in between (Arrow's
    own listing raises FileNotFoundError in that instant, for about a third of them)."""
    count = 500
    fs = pafs.LocalFileSystem()
    maker = multiprocessing.get_context("fork").Process(
        target=_make_dirs, args=(str(tmp_path), count)
    )
    maker.start()
    try:
        for i in range(count):
            deadline = time.monotonic() + 30
            while not listing(fs, f"{tmp_path}/d{i}", recursive=i % 2 == 1):
                assert time.monotonic() < deadline and maker.exitcode in (None, 0)
    finally:
        maker.join()
    assert maker.exitcode == 0
