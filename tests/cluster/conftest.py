from __future__ import annotations

import pytest

from tests.cluster.cluster import Cluster, find_cluster


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    """services/spark-cluster.sh's master and Connect server; fails when they are not up."""
    return find_cluster()
