"""Paths below a path or URI: an S3 URI's options stay at the end of the URI."""

from __future__ import annotations

from sessionize.fs import child, location_key, without_options


def test_child_keeps_a_uri_query_at_the_end():
    uri = "s3://bucket/out/?endpoint_override=127.0.0.1:29900&scheme=http"
    assert child(uri, "_lease") == (
        "s3://bucket/out/_lease?endpoint_override=127.0.0.1:29900&scheme=http"
    )
    assert child("s3://bucket/out", "sessions", "/batch_id=1/") == "s3://bucket/out/sessions/batch_id=1"
    assert child("/data/out/", "_state") == "/data/out/_state"
    assert child("/data/a?b", "x") == "/data/a?b/x"  # a local name may hold a "?"


def test_a_postgresql_place_is_named_without_its_password():
    uri = "postgres://me:Pw%40secret@db:5432/app?schema=analytics&sslmode=require"
    assert location_key(uri) == "postgresql://me@db:5432/app?schema=analytics"
    assert location_key(uri) == location_key("postgresql://me@db:5432/app?schema=analytics")
    assert location_key(uri) != location_key("postgresql://me@db:5432/app?schema=other")
    assert without_options(uri) == "postgres://me@db:5432/app"
    assert without_options("s3://b/x?endpoint_override=h:9") == "s3://b/x"
