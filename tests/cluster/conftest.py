from __future__ import annotations

import pytest

from tests.cluster.cluster import Cluster, clean_local_run, find_cluster, small_input


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    """services/spark-cluster.sh's master and Connect server; fails when they are not up."""
    return find_cluster()


@pytest.fixture(scope="session")
def data(spark, tmp_path_factory):
    """The cluster tests' input and its uninterrupted local[2] run in `root/clean`, made once
    for every case (each run writes its own directory beside it)."""
    root = tmp_path_factory.mktemp("cluster")
    inp = small_input(root)
    clean_local_run(spark, inp, root)
    return root, inp
