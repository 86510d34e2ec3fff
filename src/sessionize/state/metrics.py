"""What a partition transaction did: counts, sizes and timings, summable across partitions."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from sessionize.state.rows import EMPTY_VERSION


@dataclass
class StateMetrics:
    """What one partition transaction did. Summable across partitions with `+`.

    `keys` and `bytes` describe the state itself (after the commit once committed, else as
    loaded) and are None when a backend cannot know them without a scan. `bytes` is the
    backend's measure of the state's size (in-memory Arrow bytes for `files`).
    `rows_loaded` counts rows read from storage (0 when a cache served the version);
    `round_trips` counts storage calls (file operations, network requests).
    """

    version: int = EMPTY_VERSION
    committed_version: int | None = None
    keys: int | None = 0
    bytes: int | None = 0
    load_ms: float = 0.0
    read_ms: float = 0.0
    commit_ms: float = 0.0
    rows_loaded: int = 0
    rows_returned: int = 0
    rows_put: int = 0
    keys_removed: int = 0
    rows_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    round_trips: int = 0
    cache_hits: int = 0
    snapshots: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    _NOT_SUMMED: ClassVar[tuple[str, ...]] = ("version", "committed_version", "extra")

    def __add__(self, other: StateMetrics) -> StateMetrics:
        out = StateMetrics(version=max(self.version, other.version))
        cv = [v for v in (self.committed_version, other.committed_version) if v is not None]
        out.committed_version = max(cv) if cv else None
        for f in fields(self):
            if f.name in self._NOT_SUMMED:
                continue
            a, b = getattr(self, f.name), getattr(other, f.name)
            setattr(out, f.name, None if a is None or b is None else a + b)
        out.extra = {**self.extra, **other.extra}
        return out

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
