"""The node-loss run's cluster: kind with a worker node beside the control plane's.

It overrides the kind tier's one-node ``kind_cluster`` for the tests below this folder,
so the tier's other fixtures (the chart's operator, the S3 server, kubectl) come up on
this cluster. Until a test says otherwise the worker is cordoned: those fixtures' pods
land on the control-plane node, the node that stays when the worker is stopped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.kind.cluster import KindCluster
from e2e.kind.pytest_plugin import kind_session


@pytest.fixture(scope="session")
def kind_cluster() -> Iterator[KindCluster]:
    for cluster in kind_session(workers=1):
        for worker in cluster.worker_nodes:
            cluster.cordon(worker)
        yield cluster
