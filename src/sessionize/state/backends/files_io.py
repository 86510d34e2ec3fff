"""The `files` store's small I/O: list, read, write whole, delete, and publish a commit
record conditionally (`files.py` has the commit protocol).

On a local disk a file is written aside and renamed into place. An object store has no
rename but replaces an object whole with one PUT. On S3 every read is one GET and every
write one PUT (boto3; pyarrow would add a HEAD to a read and upload in three parts), and a
commit record is moreover published with a conditional PUT: `If-None-Match: *` when the
commit saw no record of its version, `If-Match: <ETag>` of the record it saw and replaces
otherwise. Of two writers committing the same version at the same time one is refused,
instead of one silently undoing the other (whose data file it would then have deleted as
replaced).
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.fs as pafs

from sessionize.errors import StateError
from sessionize.fs import listing
from sessionize.objectstore import ObjectStoreUri, put_if_absent
from sessionize.state.metrics import StateMetrics

_OBJECT_STORES = ("S3FileSystem", "GcsFileSystem", "AzureFileSystem")
ABSENT = ""  # the ETag of a record that does not exist


def count_calls(io: StateMetrics | None, calls: int = 1) -> None:
    if io is not None:
        io.round_trips += calls


class FilesIO:
    """File operations of the `files` store on its filesystem `_fs` below `_root`."""

    redacted_uri: str  # the uri for messages (StateBackend's)
    location: str
    _fs: pafs.FileSystem
    _root: str

    def _init_io(self) -> None:
        self._atomic_put = self._dirless = type(self._fs).__name__ in _OBJECT_STORES
        self._s3 = ObjectStoreUri.parse(self.location)  # conditional writes where it is S3

    def _failed(self, verb: str, path: str, e: BaseException) -> StateError:
        """One line for people: what failed, why, and that a rerun resumes."""
        why = " ".join(str(e).split())
        return StateError(
            f"cannot {verb} {path} in state store {self.redacted_uri}: {why}; is the store "
            "reachable and writable? Run the same command again once it is: the job resumes "
            "from its last committed state"
        )

    def _make_dir(self, directory: str, io: StateMetrics | None = None) -> None:
        """Object stores have no directories to make (a marker object would cost requests)."""
        if not self._dirless:
            count_calls(io)
            self._fs.create_dir(directory, recursive=True)

    def _list(self, directory: str, io: StateMetrics | None = None) -> list[pafs.FileInfo]:
        count_calls(io)
        try:
            return listing(self._fs, directory)
        except (OSError, pa.ArrowException) as e:
            raise self._failed("list", directory, e) from e

    def _read(self, path: str, io: StateMetrics | None = None) -> bytes | None:
        if self._s3 is not None:
            return self._read_tagged(path, io)[0]  # one GET (pyarrow: a HEAD, then a GET)
        count_calls(io)
        try:
            with self._fs.open_input_stream(path) as f:
                data: bytes = f.read()
            if io is not None:
                io.bytes_read += len(data)
            return data
        except FileNotFoundError:
            return None
        except (OSError, pa.ArrowException) as e:
            if "not found" in str(e).lower() or "no such file" in str(e).lower():
                return None
            raise self._failed("read", path, e) from e

    def _write(self, path: str, data: bytes | pa.Buffer, io: StateMetrics | None = None) -> None:
        """Write `path` so that readers see all of it or nothing."""
        count_calls(io, 1 if self._atomic_put else 2)
        if io is not None:
            io.bytes_written += len(data)
        if self._s3 is not None:  # one PUT (pyarrow uploads in parts: three requests)
            body = data.to_pybytes() if isinstance(data, pa.Buffer) else data
            try:
                self._s3.client().put_object(Bucket=self._s3.bucket, Key=self._key(path), Body=body)
            except Exception as e:  # botocore's errors
                raise self._failed("write", path, e) from e
            return
        try:
            if self._atomic_put:
                with self._fs.open_output_stream(path) as f:
                    f.write(data)
                return
            tmp = f"{path}.tmp-{uuid.uuid4().hex[:16]}"
            try:
                with self._fs.open_output_stream(tmp) as f:
                    f.write(data)
                self._fs.move(tmp, path)
            except BaseException:
                self._delete(tmp)
                raise
        except (OSError, pa.ArrowException) as e:  # a full disk, a lost mount, no permission
            raise self._failed("write", path, e) from e

    def _delete(self, path: str, io: StateMetrics | None = None) -> None:
        count_calls(io)
        try:
            self._fs.delete_file(path)
        except FileNotFoundError:
            pass
        except (OSError, pa.ArrowException) as e:
            if "not found" not in str(e).lower() and "no such file" not in str(e).lower():
                raise

    # ----- commit records: replaced only as seen ------------------------------------------

    def _read_tagged(self, path: str, io: StateMetrics | None = None) -> tuple[bytes | None, str]:
        """A record's bytes (None: absent) and the tag `_publish` is conditional on."""
        if self._s3 is None:
            return self._read(path, io), ABSENT
        count_calls(io)
        client = self._s3.client()
        try:
            got = client.get_object(Bucket=self._s3.bucket, Key=self._key(path))
            data = got["Body"].read()
        except client.exceptions.NoSuchKey:
            return None, ABSENT
        except Exception as e:  # botocore's errors: the store is unreachable or refuses
            raise self._failed("read", path, e) from e
        if io is not None:
            io.bytes_read += len(data)
        return data, got["ETag"]

    def _publish(self, path: str, body: bytes, seen: str, io: StateMetrics | None = None) -> bool:
        """Write record `path` unless it changed since it was read with tag `seen`
        (conditional on S3; elsewhere a plain whole write). False if it changed."""
        if self._s3 is None:
            self._write(path, body, io)
            return True
        count_calls(io)
        if io is not None:
            io.bytes_written += len(body)
        client, key = self._s3.client(), self._key(path)
        try:
            if seen == ABSENT:
                return put_if_absent(client, self._s3.bucket, key, body)
            client.put_object(Bucket=self._s3.bucket, Key=key, Body=body, IfMatch=seen)
        except Exception as e:  # botocore's errors
            code = getattr(e, "response", {}).get("Error", {}).get("Code")
            if code in ("PreconditionFailed", "NoSuchKey", "ConditionalRequestConflict"):
                return False
            raise self._failed("write", path, e) from e
        return True

    def _key(self, path: str) -> str:
        """The object key of a path on the S3 filesystem (`bucket/key`)."""
        return path.split("/", 1)[1]
