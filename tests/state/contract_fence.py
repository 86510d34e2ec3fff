"""The fencing and truncation part of the state store contract (`contract.py`): the store
itself refuses an older driver (state/lease.py), and a rewind cut short completes."""

from __future__ import annotations

import pytest

from sessionize.errors import LeaseLost

from .workers import J, commit, expected, read_all, rows


class FenceContract:
    # ----- fencing (state/lease.py): the store itself refuses an older driver -------------

    def test_a_commit_begun_before_a_takeover_is_refused_inside_the_store(self, backend):
        commit(backend, J, 0, -1, 0, {1: [1]})
        backend.raise_fence(J, 1, partitions=2)
        old = backend.open(J, 0, 0, epoch=1)
        old.put_many(rows({2: [2]}))
        backend.raise_fence(J, 2, partitions=2)  # a new driver takes over mid-batch
        with pytest.raises(LeaseLost, match="lease epoch 2, this driver's 1"):
            old.commit(1)
        assert backend.versions(J, 0) == [0]
        with pytest.raises(LeaseLost):
            backend.write_job_record(J, 1, {"v": 1}, epoch=1)
        assert backend.job_versions(J) == []
        with pytest.raises(LeaseLost):
            backend.write_job_settings(J, {"gap": "1m"}, epoch=1)
        assert backend.read_job_settings(J) is None
        # the new driver, and unfenced tools, still commit
        commit(backend, J, 0, 0, 1, {3: [3]})
        new = backend.open(J, 0, 1, epoch=2)
        new.commit(2)
        backend.write_job_record(J, 2, {"v": 2}, epoch=2)
        backend.write_job_settings(J, {"gap": "2m"}, epoch=2)
        assert backend.versions(J, 0) == [0, 1, 2] and backend.job_versions(J) == [2]
        assert backend.read_job_settings(J) == {"gap": "2m"}

    def test_the_fence_only_moves_up_and_outlives_a_reset(self, backend, make_backend):
        assert backend.fence(J) == 0
        backend.raise_fence(J, 3, partitions=1)
        with pytest.raises(LeaseLost, match="lease epoch 3"):
            make_backend(cache=False).raise_fence(J, 2, partitions=1)
        assert backend.fence(J) == 3 and backend.fence("job-b") == 0
        commit(backend, J, 0, -1, 0, {1: [1]})
        backend.truncate_after(J, -1)
        late = backend.open(J, 0, -1, epoch=2)
        with pytest.raises(LeaseLost):
            late.commit(0)
        assert backend.versions(J, 0) == []
        commit(backend, J, 0, -1, 0, {1: [1]})  # starting over clears the partition
        with pytest.raises(LeaseLost):
            backend.open(J, 0, 0, epoch=2).commit(1)
        assert backend.versions(J, 0) == [0]

    def test_truncate_after_completes_a_truncation_cut_short(self, backend):
        """A rewind killed after the job records went (truncate_after's first step) and
        before the partitions did: running it again finishes the partitions."""
        for v in range(4):
            for p in range(2):
                commit(backend, J, p, v - 1, v, {v: [v]})
            backend.write_job_record(J, v, {"v": v})
        backend._delete_job_records(J, [3, 2])
        backend._truncate_partition(J, 0, 1)
        assert backend.versions(J, 1) == [0, 1, 2, 3]
        backend.truncate_after(J, 1)
        assert backend.job_versions(J) == [0, 1]
        assert backend.versions(J, 0) == backend.versions(J, 1) == [0, 1]
        assert read_all(backend, J, 1, 1) == expected({0: [0], 1: [1]})
