"""The local PostgreSQL answers psycopg 3 and keeps its data across a restart."""

from __future__ import annotations

import uuid

import psycopg  # the dev extra installs it
import pytest

pytestmark = pytest.mark.services


def _connect(uri: str):
    return psycopg.connect(uri, autocommit=True, connect_timeout=10)


def test_round_trip(service_setting):
    uri = service_setting("SESSIONIZE_TEST_POSTGRES")
    key = uuid.uuid4().hex
    with _connect(uri) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS services_smoke (k text PRIMARY KEY, v bytea)")
        conn.execute("INSERT INTO services_smoke VALUES (%s, %s)", (key, b"\x00\xff"))
        row = conn.execute("SELECT v FROM services_smoke WHERE k = %s", (key,)).fetchone()
        conn.execute("DELETE FROM services_smoke WHERE k = %s", (key,))
    assert row == (b"\x00\xff",)


def test_data_survives_restart(service_setting, restart_service):
    uri = service_setting("SESSIONIZE_TEST_POSTGRES")
    key = uuid.uuid4().hex
    with _connect(uri) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS services_smoke (k text PRIMARY KEY, v bytea)")
        conn.execute("INSERT INTO services_smoke VALUES (%s, %s)", (key, b"kept"))
    restart_service("postgres")
    with _connect(uri) as conn:
        row = conn.execute("SELECT v FROM services_smoke WHERE k = %s", (key,)).fetchone()
        conn.execute("DELETE FROM services_smoke WHERE k = %s", (key,))
    assert row == (b"kept",)
