"""Paths and URIs -> a pyarrow filesystem, for outputs, checkpoints and input checks."""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from sessionize.errors import ConfigError
from sessionize.redaction import redact_uri


def resolve_fs(uri: str) -> tuple[pafs.FileSystem, str]:
    """Any pyarrow filesystem URI (`s3://...`, `file:///...`), or a local path."""
    try:
        return pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, ValueError):
        return pafs.LocalFileSystem(), os.path.abspath(uri)


def absolute_local(uri: str) -> str:
    """A relative local path as an absolute one, so that it names the same directory in
    every process: executors on a cluster run in working directories of their own. URIs
    and absolute paths are returned unchanged."""
    if "://" in uri or os.path.isabs(uri):
        return uri
    return os.path.abspath(uri)


def exists(fs: pafs.FileSystem, path: str) -> bool:
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def listing(fs: pafs.FileSystem, path: str, recursive: bool = False) -> list[pafs.FileInfo]:
    """What is in directory `path` (and below it, if `recursive`); nothing if it is absent.

    Arrow forgives a missing directory only if it is still missing when it looks a second
    time, so a directory that another process creates at that moment raises
    FileNotFoundError: it exists by then, and is listed again.
    """
    selector = pafs.FileSelector(path, allow_not_found=True, recursive=recursive)
    try:
        return fs.get_file_info(selector)
    except FileNotFoundError:
        return fs.get_file_info(selector)


def is_dir(uri: str) -> bool:
    """Whether `uri` names a directory (any filesystem)."""
    fs, path = resolve_fs(uri)
    return fs.get_file_info(path).type == pafs.FileType.Directory


def delete_dir(fs: pafs.FileSystem, path: str) -> None:
    if exists(fs, path):
        fs.delete_dir(path)


def without_options(uri: str) -> str:
    """`uri` without its query string and its password (`redaction.redact_uri`), for
    messages: an `s3://` URI's endpoint options are noise there, a password a leak.

    >>> without_options("postgresql://me:pw@db/app?schema=a")
    'postgresql://me:***@db/app'
    """
    return redact_uri(uri).split("?", 1)[0]  # redacted first: a password may hold a "?"


def child(uri: str, *parts: str) -> str:
    """The path or URI of `parts` below `uri`. A URI's query string (`?endpoint_override=`,
    the options pyarrow reads from an `s3://` URI) stays at the end, where it belongs."""
    base, sep, query = uri.partition("?") if "://" in uri else (uri, "", "")
    path = "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])
    return f"{path}{sep}{query}"


def location_key(uri: str) -> str:
    """One spelling per place, for a checkpoint's record of where it reads and writes: a
    local path (relative, `file://`, with `..` or a trailing slash) as an absolute path, a
    URI without its options (`?endpoint_override=...`) or trailing slash; a PostgreSQL URI
    as `postgres_location` gives it (no password)."""
    if uri.lower().startswith(("postgresql://", "postgres://")):
        return postgres_location(uri)
    base = uri.split("?", 1)[0]
    if base.startswith("file://"):
        base = base.removeprefix("file://") or "/"
    if "://" not in base:
        return os.path.abspath(os.path.expanduser(base))
    return base.rstrip("/")


def postgres_location(uri: str) -> str:
    """A PostgreSQL URI as the place it names: `postgresql://USER@HOST[:PORT]/DB?schema=S`,
    without its password and connection options (the schema is part of the place).

    >>> postgres_location("postgres://me:pw@db:5432/app?schema=analytics&sslmode=require")
    'postgresql://me@db:5432/app?schema=analytics'
    """
    parts = urlsplit(uri)
    user = f"{parts.username}@" if parts.username else ""
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    host = parts.hostname or ""
    schema = dict(parse_qsl(parts.query)).get("schema")
    where = f"postgresql://{user}{host}{port}/{parts.path.strip('/')}"
    return f"{where}?schema={schema}" if schema else where


def is_local(uri: str) -> bool:
    """A local path or a `file://` URI."""
    return "://" not in uri or uri.startswith("file://")


# The URI schemes pyarrow's filesystems read (FileSystem.from_uri; s3 would cost a lookup
# of the bucket's region to ask it).
FILESYSTEM_SCHEMES = ("file", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")


def check_resolvable(uri: str, flag: str) -> None:
    """Refuse `scheme://...` that no pyarrow filesystem reads, which `resolve_fs` would
    take for a local relative path (`./foo:/bucket/x`).

    Raises:
        ConfigError: naming the flag and the filesystems that are read.

    >>> check_resolvable("s3://bucket/chk", "--checkpoint")
    """
    scheme = uri.split("://", 1)[0] if "://" in uri else "file"
    if scheme.lower() not in FILESYSTEM_SCHEMES:
        raise ConfigError(
            f"{flag} {without_options(uri)}: no filesystem reads {scheme}:// URIs; give a "
            "local path, file://, s3:// or another filesystem pyarrow reads (hdfs://, gs://)"
        )
