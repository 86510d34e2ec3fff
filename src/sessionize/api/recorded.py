"""What a checkpoint records of a Sessionizer, and the arguments left out taking it.

A checkpoint records the settings that are part of the state (`engines/checkpoint.py`). A
run gives some of them; the others take the recorded values, so that a restart needs only
its input, output and checkpoint. A setting given with another value, even the default, is
kept as given: the checkpoint check then refuses it, naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from sessionize.api.sessionizer_settings import SessionizerSettings, StoreSettings
from sessionize.config import SessionRules
from sessionize.engines.checkpoint import CheckpointLike, recorded
from sessionize.engines.sessions import state_settings
from sessionize.errors import ConfigError
from sessionize.fs import absolute_local
from sessionize.mapping import DEFAULT_RECORD, EventMapping
from sessionize.redaction import needs_secret, redact_uri


def recorded_state(state: str) -> str:
    """How a checkpoint records `--state`: `files` as is (the store under the checkpoint,
    wherever it moves), `files:PATH` with PATH absolute, anything else as its URI without
    secrets."""
    if state == "files":
        return state
    if state.startswith("files:"):
        return "files:" + absolute_local(redact_uri(state.removeprefix("files:")))
    return redact_uri(state)


# The arguments a checkpoint records, by the name the record (and the flag) gives them.
RECORDED_ARGS = {
    "gap": "gap",
    "lateness": "lateness",
    "close_actions": "close_actions",
    "state": "state",
    "partitions": "partitions",
    "job": "job",
    "user": "user_field",
    "anonymous_field": "anonymous_field",
    "time": "time_field",
    "page": "page_field",
    "action": "action_field",
    "time_format": "time_format",
    "user_type": "user_type",
    "keep": "keep_fields",
    "max_duration": "max_duration",
    "timezone": "timezone",
    "split_at_midnight": "split_at_midnight",
    "user_ttl": "user_ttl",
    "attribution_lookback": "attribution_lookback",
    "revise_within": "revise_within",
    "split_on_change": "split_on_change",
    "gap_field": "gap_field",
    "url": "url_field",
    "referrer": "referrer_field",
    "user_agent": "user_agent_field",
    "site_hosts": "site_hosts",
    "channel_rules": "channel_rules",
    "page_view_actions": "page_view_actions",
    "max_page_time": "max_page_time",
    "ping_action": "ping_action",
    "heartbeat": "heartbeat",
    "min_visit": "min_visit",
    "engaged_after": "engaged_after",
    "conversions": "conversion",
    "bots": "bots",
}
RECORDED = frozenset([*RECORDED_ARGS.values(), "output_format", "session_columns"])


def settings_record(s: SessionizerSettings, output_format: str) -> dict[str, object]:
    """What a checkpoint binds of a Sessionizer's settings `s` (see engines.checkpoint): the
    settings every job record holds (engines.sessions.state_settings), and where the job
    runs."""
    return {
        "state": recorded_state(s.store.state),
        **state_settings(s.rules, s.store.partitions, s.mapping),
        "job": s.store.job,
        "output_format": output_format,
    }


def resolve(
    s: SessionizerSettings, record: Mapping[str, object], output_format: str | None
) -> tuple[SessionizerSettings, str]:
    """A Sessionizer's settings `s` and `output_format` with what they were not given taken
    from `record` (see `Sessionizer.resolved`), all counted as given then."""
    given = set(RECORDED if s.explicit is None else s.explicit)
    given |= {"output_format"} if output_format else set()
    mine = settings_record(s, output_format or "parquet")
    merged = {**mine, **{k: v for k, v in record.items() if k in mine and k not in given}}
    if "revise_within" not in given and record.get("revise_within"):  # recorded only when set
        merged["revise_within"] = record["revise_within"]
    if "revise_within" in mine and record and "revise_within" not in record:
        raise ConfigError(
            "--revise-within changes what the state keeps, and this job's state was built "
            "without it: leave it out, or start a new --checkpoint (or batch --output)"
        )
    state = str(merged["state"])
    if needs_secret(state) and "state" not in given:
        raise ConfigError(
            f"the recorded state is {state}, without its secret: give it with --state"
        )
    rules = SessionRules.from_record(merged)
    store = StoreSettings(
        s.store.state if "state" in given else state,  # as given, with its secret
        int(merged["partitions"]),  # type: ignore[call-overload]
        str(merged["job"]),
    )
    mapping = replace(EventMapping.from_record(merged), input_format=s.mapping.input_format)
    if s.explicit is not None and "user_ttl" in s.explicit and not mapping.anonymous:
        raise ConfigError(
            "--user-ttl applies to identities, which only --anonymous-field keeps: leave "
            "--user-ttl out, or give --anonymous-field"
        )
    if s.explicit is not None and "attribution_lookback" in s.explicit:
        _check_attribution(mapping)
    # The user type is the record's, or the one given (settled before).
    out = replace(s, rules=rules, mapping=mapping, store=store, explicit=None, user_type_given=True)
    return out, str(merged["output_format"])


def _check_attribution(mapping: EventMapping) -> None:
    """Refuse `--attribution-lookback` where nothing is attributed: without identity (no
    users step), or with sessions of schema 1 (no traffic source to attribute)."""
    if not mapping.anonymous:
        raise ConfigError(
            "--attribution-lookback applies to the users step, which only --anonymous-field "
            "runs: leave --attribution-lookback out, or give --anonymous-field"
        )
    if mapping.session_columns < 2:
        raise ConfigError(
            "--attribution-lookback needs the sessions' traffic columns, which this job's "
            "sessions (schema 1, recorded) lack: leave it out, or start a new --checkpoint "
            "and --output"
        )


def recorded_user_type(checkpoint: CheckpointLike) -> str | None:
    """The user key type a checkpoint recorded (None for a new one). An unreadable record is
    left for the settings check to report."""
    try:
        settings = recorded(checkpoint)
    except ValueError:
        return None
    if not isinstance(settings, dict) or not settings:
        return None
    return str({**DEFAULT_RECORD, **settings}["user_type"])
