"""URI scheme -> backend class, imported lazily (fsspec's registry, in small).

A failed import of an optional backend names the extra to install.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from sessionize.errors import ConfigError, EnvironmentProblem
from sessionize.state.base import StateBackend
from sessionize.state.rows import RowSpec

# scheme -> ("module:Class", extra to install or None)
_REGISTRY: dict[str, tuple[str, str | None]] = {
    "files": ("sessionize.state.backends.files:FilesBackend", None),
    "file": ("sessionize.state.backends.files:FilesBackend", None),
    "postgresql": ("sessionize.state.backends.postgres:PostgresBackend", "postgres"),
    "postgres": ("sessionize.state.backends.postgres:PostgresBackend", "postgres"),
    "redis": ("sessionize.state.backends.redis:RedisBackend", "redis"),
    "rediss": ("sessionize.state.backends.redis:RedisBackend", "redis"),
    "dynamodb": ("sessionize.state.backends.dynamodb:DynamoDBBackend", "dynamodb"),
}

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def register(scheme: str, target: str, extra: str | None = None) -> None:
    """Map `scheme` to a backend class given as "module:Class" (imported on first use)."""
    _REGISTRY[scheme.lower()] = (target, extra)


def schemes() -> list[str]:
    return sorted(_REGISTRY)


def scheme_of(uri: str) -> str:
    """The registry scheme of `uri`; a plain path (no scheme) is `files`."""
    m = _SCHEME.match(uri)
    # One letter before ':' is a Windows drive, i.e. a path.
    if not m or len(m.group(1)) == 1:
        return "files"
    return m.group(1).lower()


def backend_class(scheme: str) -> type[StateBackend[Any]]:
    try:
        target, extra = _REGISTRY[scheme]
    except KeyError:
        raise ConfigError(
            f"unknown state store scheme '{scheme}:'; use one of {', '.join(schemes())}"
        ) from None
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        if e.name == module_name:
            raise EnvironmentProblem(f"the '{scheme}' state store is not available: {e}") from e
        if extra is None:
            raise
        raise EnvironmentProblem(
            f"the '{scheme}' state store needs extra packages: pip install 'sessionize[{extra}]'"
            f" ({e})"
        ) from e
    backend: type[StateBackend[Any]] = getattr(module, class_name)
    return backend


def open_backend(uri: str, spec: RowSpec | None = None) -> StateBackend[Any]:
    """The backend for `uri`: `files:/abs/path`, a plain path, `file:///abs/path`,
    `files:s3://bucket/prefix` (any pyarrow filesystem), `postgresql://...`, `redis://...`,
    `dynamodb://...`. Options go in the query string, e.g. `files:/data/state?snapshot_every=20`.
    `spec` describes the rows (schema.STATE by default)."""
    if not isinstance(uri, str) or not uri.strip():
        raise ConfigError("the state store URI is empty")
    uri = uri.strip()
    return backend_class(scheme_of(uri)).from_uri(uri, spec)
