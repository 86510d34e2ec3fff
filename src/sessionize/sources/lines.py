"""Bytes -> the record rows every source yields: UTF-8 text, or an error; files -> lines.

Text that is not UTF-8 is kept, escaped with Python's `backslashreplace` (byte 0xff becomes
the four characters `\\xff`), next to the error `not UTF-8 (byte N)`, N being the 0-based
offset of the first bad byte in the record. So `invalid_events.raw` stays a valid UTF-8
string column that every Parquet reader can read, and still shows the bytes.

What a line is (the same as Spark's `text` format, plus the BOM rule): lines end at `\\n`,
`\\r\\n` or a lone `\\r`, none of which is part of the line; the last line needs no newline; a
newline at the very end does not start another line; an empty file has no lines. A UTF-8
byte order mark at the start of a file is dropped (editors on Windows write one).
"""

from __future__ import annotations

import bz2
import zlib
from collections.abc import Iterator
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import fs as pafs

# The rows every source yields (see sessionize.sources): the payload as text, or an error.
RECORD_SCHEMA = pa.schema(
    [
        pa.field("value", pa.string()),
        pa.field("error", pa.string()),
        pa.field("source", pa.string()),
    ]
)
SPARK_SCHEMA = "value string, error string, source string"

BOM = b"\xef\xbb\xbf"
# Bytes read from a file at a time; a task holds about this much (decompressed) at once.
DEFAULT_CHUNK_BYTES = 16 << 20


def text_or_error(payload: bytes) -> tuple[str, str | None]:
    """One record's bytes -> (text, None), or (escaped text, `not UTF-8 (byte N)`)."""
    try:
        return payload.decode("utf-8"), None
    except UnicodeDecodeError as e:
        return payload.decode("utf-8", "backslashreplace"), f"not UTF-8 (byte {e.start})"


def text_columns(payloads: pa.BinaryArray) -> tuple[pa.Array, pa.Array]:
    """Many records' bytes -> (value, error) string arrays; Arrow checks UTF-8 in one pass
    and the records are decoded one by one only when some are not UTF-8."""
    try:
        return payloads.cast(pa.string()), pa.nulls(len(payloads), pa.string())
    except pa.ArrowInvalid:
        pairs = [text_or_error(p) for p in payloads.to_pylist()]
        return (
            pa.array([v for v, _ in pairs], pa.string()),
            pa.array([e for _, e in pairs], pa.string()),
        )


def split_lines(data: bytes) -> pa.BinaryArray:
    r"""`data.splitlines()` as one Arrow array: a line ends at `\n`, `\r\n` or a lone `\r`,
    none of which is part of it, and a line break at the very end starts no line. Text
    without a `\r` (most files) is split by Arrow in one call, not line by line.

    Example:
        >>> split_lines(b"a\r\nb\rc\n").to_pylist()
        [b'a', b'b', b'c']
    """
    if b"\r" in data:
        return pa.array(data.splitlines(), pa.binary())
    parts = pc.split_pattern(pa.array([data], pa.large_binary()), pattern=b"\n").flatten()
    ended = data.endswith(b"\n") or not data  # then the last part is no line
    return parts.slice(0, len(parts) - ended).cast(pa.binary())


def _batch(values: pa.Array, errors: pa.Array, source: str) -> pa.RecordBatch:
    sources = pa.repeat(pa.scalar(source, pa.string()), len(values))
    return pa.RecordBatch.from_arrays([values, errors, sources], schema=RECORD_SCHEMA)


class _Gzip:
    """Decompresses a gzip stream of one or more members (`cat a.gz b.gz` is valid)."""

    name = "gzip"

    def __init__(self) -> None:
        self._d = self._member()
        self.started = False

    @staticmethod
    def _member():
        return zlib.decompressobj(16 + zlib.MAX_WBITS)

    def feed(self, data: bytes) -> bytes:
        out = []
        while data:
            self.started = True
            out.append(self._d.decompress(data))
            if not self._d.eof:
                break
            data = self._d.unused_data
            self._d = self._member()
            self.started = False
        return b"".join(out)

    def complete(self) -> bool:
        return not self.started


class _Bzip2(_Gzip):
    """The same for bzip2 streams (concatenated streams too)."""

    name = "bzip2"

    @staticmethod
    def _member():
        return bz2.BZ2Decompressor()


def _decompressor(path: str) -> _Gzip | None:
    if path.endswith(".gz"):
        return _Gzip()
    if path.endswith(".bz2"):
        return _Bzip2()
    return None


def open_path(path: str) -> tuple[pafs.FileSystem, str]:
    """A path as Spark's binaryFile lists it (`file:/a/b c.json`, not percent-encoded,
    `s3a://...`) -> pyarrow filesystem and path."""
    parts = urlsplit(path)
    if parts.scheme in ("", "file"):
        return pafs.LocalFileSystem(), parts.path
    scheme = {"s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}.get(parts.scheme, parts.scheme)
    return pafs.FileSystem.from_uri(path.replace(parts.scheme + "://", scheme + "://", 1))


def _os_reason(exc: BaseException) -> str:
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, FileNotFoundError):
        return "file not found (deleted after it was listed?)"
    if isinstance(exc, IsADirectoryError):
        return "is a directory"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def decode_file(path: str, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[pa.RecordBatch]:
    """The lines of one file as RECORD_SCHEMA batches, `source` = `path`.

    A file that cannot be opened, read or decompressed to its end yields the lines read
    before the failure as usual, then ONE row with the error `unreadable file: ...` (the
    file's incomplete last line, if any, as its value); it never raises.
    """
    decomp = _decompressor(path)
    pending = b""
    lines = 0
    first = True
    failure: str | None = None
    try:
        fs, p = open_path(path)
        with fs.open_input_stream(p, compression=None) as stream:
            while True:
                data = stream.read(chunk_bytes)
                if not data:
                    break
                if decomp is not None:
                    try:
                        data = decomp.feed(data)
                    except (zlib.error, OSError, EOFError, ValueError) as exc:
                        failure = f"corrupt {decomp.name} after {lines} lines ({exc})"
                        break
                if first and data:
                    data = data.removeprefix(BOM)
                    first = False
                cut = data.rfind(b"\n")
                if cut < 0:
                    pending += data
                    continue
                complete = pending + data[: cut + 1]
                pending = data[cut + 1 :]
                batch = split_lines(complete)
                lines += len(batch)
                yield _batch(*text_columns(batch), path)
        if failure is None and decomp is not None and not decomp.complete():
            failure = f"truncated {decomp.name} after {lines} lines"
    except OSError as exc:
        failure = f"{_os_reason(exc)} after {lines} lines"
    if failure is not None:
        value, _ = text_or_error(pending)
        yield _batch(pa.array([value or None]), pa.array([f"unreadable file: {failure}"]), path)
    elif pending:
        yield _batch(*text_columns(split_lines(pending)), path)
