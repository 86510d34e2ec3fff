"""Paths and URIs -> a pyarrow filesystem, for outputs, checkpoints and input checks."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.fs as pafs


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


def is_dir(uri: str) -> bool:
    """Whether `uri` names a directory (any filesystem)."""
    fs, path = resolve_fs(uri)
    return fs.get_file_info(path).type == pafs.FileType.Directory


def delete_dir(fs: pafs.FileSystem, path: str) -> None:
    if exists(fs, path):
        fs.delete_dir(path)


def without_options(uri: str) -> str:
    """`uri` without its query string, for messages: an `s3://` URI's endpoint options are
    noise there."""
    return uri.split("?", 1)[0]


def child(uri: str, *parts: str) -> str:
    """The path or URI of `parts` below `uri`. A URI's query string (`?endpoint_override=`,
    the options pyarrow reads from an `s3://` URI) stays at the end, where it belongs."""
    base, sep, query = uri.partition("?") if "://" in uri else (uri, "", "")
    path = "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])
    return f"{path}{sep}{query}"
