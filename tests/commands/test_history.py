"""What `history` and `rewind` take from a checkpoint: the state URI recorded without its
secret is given again with --state, and only for the same store; a PostgreSQL one may be
used as recorded (its client reads PGPASSWORD or ~/.pgpass)."""

from __future__ import annotations

import json

import pytest

from sessionize.commands.history import open_checkpoint
from sessionize.errors import ConfigError

URI = "redis://app:s3cret@db.example:6379/0?prefix=s"
PG = "postgresql://app:s3cret@db.example:5432/sessions?schema=s"


def checkpoint(tmp_path, uri=URI):
    recorded = {"state": uri.replace("s3cret", "***"), "job": "j"}
    (tmp_path / "sessionize.json").write_text(json.dumps(recorded))
    (tmp_path / "sessionize-paths.json").write_text(json.dumps({"output": str(tmp_path / "o")}))
    return str(tmp_path)


def test_a_redacted_state_uri_must_be_given_again(tmp_path):
    chk = checkpoint(tmp_path)
    with pytest.raises(ConfigError, match="give it with --state URI"):
        open_checkpoint(chk)
    with pytest.raises(ConfigError, match="is not the state of checkpoint"):
        open_checkpoint(chk, URI.replace("db.example", "other.example"))
    assert open_checkpoint(chk, URI).state.state_uri == URI


def test_a_postgresql_state_recorded_without_its_password_is_used_as_recorded(tmp_path):
    chk = checkpoint(tmp_path, PG)
    masked = PG.replace("s3cret", "***")
    assert open_checkpoint(chk).state.state_uri == masked  # the store drops the mask
    assert open_checkpoint(chk, PG).state.state_uri == PG


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(ConfigError, match="not a sessionize checkpoint"):
        open_checkpoint(str(tmp_path))
