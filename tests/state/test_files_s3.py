"""The `files` backend on `s3://` (services/s3.sh): the contract suite, on an object store
that has no rename and enforces conditional writes."""

from __future__ import annotations

import re

import pytest

from sessionize.errors import StateError
from sessionize.fs import child
from sessionize.state.backends.files import FilesBackend
from tests.s3_fixtures import s3_stopped

from .contract import StateBackendContract
from .test_files import files_leftovers
from .workers import J, commit, expected, read_all, rows


class TestFilesS3Contract(StateBackendContract):
    @pytest.fixture
    def make_backend(self, bucket_uri):
        root = child(bucket_uri, "store")

        def make(spec=None, cache=True):
            return FilesBackend(root, snapshot_every=3, cache_mb=64 if cache else 0, spec=spec)

        return make

    @pytest.fixture
    def unusable_backend(self, bucket_uri):
        return FilesBackend(re.sub(r"^s3://[^/]+", "s3://no-such-bucket", bucket_uri))

    @pytest.fixture
    def leftovers(self):
        return files_leftovers


@pytest.mark.parametrize("before", ["absent", "committed"])
def test_of_two_writers_of_one_version_the_later_is_refused(bucket_uri, before):
    """Writer B read the version's record (absent, or an earlier commit it replaces); writer
    A publishes the version just before B does: B's conditional PUT fails and A's stays."""
    root = child(bucket_uri, "store")
    a, b = FilesBackend(root, cache_mb=0), FilesBackend(root, cache_mb=0)
    commit(a, J, 0, -1, 0, {1: [1]})
    if before == "committed":
        commit(a, J, 0, 0, 1, {2: [2]})
    tx = b.open(J, 0, 0)
    tx.put_many(rows({4: [4]}))
    publish = b._publish

    def after_the_other_writer(*args, **kwargs):
        commit(a, J, 0, 0, 1, {3: [3]})
        return publish(*args, **kwargs)

    b._publish = after_the_other_writer
    with pytest.raises(StateError, match="committed by another writer at the same time"):
        tx.commit(1)
    assert read_all(FilesBackend(root, cache_mb=0), J, 0, 1) == expected({1: [1], 3: [3]})
    files = [i.base_name for i in b._list(b._partition_dir(J, 0))]
    assert len([f for f in files if f.startswith("00000000000000000001-")]) == 1, files


@pytest.mark.serial  # stops the shared S3 server
def test_an_unreachable_store_is_one_state_error_and_the_commit_can_be_repeated(bucket_uri):
    """The S3 server stops between a transaction's reads and its commit: the commit fails as
    one StateError line naming the store; once the server is back the same commit succeeds."""
    root = child(bucket_uri, "store")
    commit(FilesBackend(root, cache_mb=0), J, 0, -1, 0, {1: [1]})
    store = FilesBackend(root, cache_mb=0)
    tx = store.open(J, 0, 0)
    tx.put_many(rows({2: [2]}))
    with s3_stopped(), pytest.raises(StateError) as down:
        tx.commit(1)
    line = str(down.value)
    assert "\n" not in line and "in state store files:s3://" in line, line
    assert "is the store reachable" in line, line
    commit(FilesBackend(root, cache_mb=0), J, 0, 0, 1, {2: [2]})
    assert read_all(FilesBackend(root, cache_mb=0), J, 0, 1) == expected({1: [1], 2: [2]})


def test_a_large_partition_is_read_by_row_group_on_s3(bucket_uri):
    """Lazy snapshots through pyarrow's S3 filesystem (ranged reads of the row groups asked):
    the same rows and expiring keys as a whole load, for a fraction of the file's bytes."""
    root = child(bucket_uri, "store")
    state = {k * 7: [k, k + 5_000] if k % 3 else [k] for k in range(3_000)}
    lazy = FilesBackend(root, cache_mb=0, lazy_mb=0)
    lazy.group_rows = 16
    commit(lazy, J, 0, -1, 0, state)
    commit(lazy, J, 0, 0, 1, {7: [1]}, [14])
    whole = FilesBackend(root, cache_mb=0, lazy_mb=1 << 20)
    keys = [7, 14, 21, 700, 20_993, 5]
    assert read_all(lazy, J, 0, 1, keys) == read_all(whole, J, 0, 1, keys)
    with lazy.open(J, 0, 1) as a, whole.open(J, 0, 1) as b:
        assert a._stored.state.is_lazy and not b._stored.state.is_lazy
        for upto in (40, 1_500, 10_000):
            assert a.expiring(upto).equals(b.expiring(upto))
    with lazy.open(J, 0, 1) as a:
        opened = a.metrics().bytes_read
        a.get_many(keys)
        read = a.metrics().bytes_read - opened
    assert 0 < read < b.metrics().bytes_read / 20
