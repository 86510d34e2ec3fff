"""What a `Sessionizer` keeps: its settings in frozen groups, each passed on whole.

`Sessionizer(...)` takes its settings as keyword arguments, one a setting, as `stream`
takes flags; it keeps them as one `SessionizerSettings`: the session rules
(`config.SessionRules`), the field mapping with what a session carries
(`mapping.EventMapping`, its `content` a `content.SessionContent`), the state's place and
cut (`StoreSettings`) and the input rule `max_future_us`. The commands build the same
object from their flags (`commands/options.sessionizer`), and a checkpoint's record
resolves into another one (`api/recorded.resolve`).
"""

from __future__ import annotations

from dataclasses import dataclass

from sessionize.config import SessionRules
from sessionize.errors import ConfigError
from sessionize.mapping import EventMapping
from sessionize.state.rows import check_job


@dataclass(frozen=True)
class StoreSettings:
    """Where a job's state lives and how it is cut: `--state`, `--partitions` and `--job`.

    Raises:
        ConfigError: `partitions` below 1, or a job name the state stores refuse (checked
            here, before anything is recorded).

    Example:
        >>> StoreSettings("redis://localhost:6379/0", partitions=8).job
        'sessionize'
    """

    state: str = "files"
    partitions: int = 4
    job: str = "sessionize"

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ConfigError("partitions must be at least 1")
        check_job(self.job)


@dataclass(frozen=True)
class SessionizerSettings:
    """Everything a Sessionizer keeps. `explicit` names the recorded settings the caller
    gave (`api.recorded.RECORDED`'s names; None: all), the others yield to a checkpoint's
    record; without `user_type_given`, the input's user column decides the key type.

    Example:
        >>> s = SessionizerSettings(SessionRules(), EventMapping(), StoreSettings(partitions=2))
        >>> s.store.partitions, s.given("gap")
        (2, True)
    """

    rules: SessionRules
    mapping: EventMapping
    store: StoreSettings = StoreSettings()
    max_future_us: int | None = None  # events further ahead are invalid; not recorded
    explicit: frozenset[str] | None = None
    user_type_given: bool = True

    def given(self, name: str) -> bool:
        """Whether the recorded setting `name` was given (else a checkpoint's value wins)."""
        return self.explicit is None or name in self.explicit
