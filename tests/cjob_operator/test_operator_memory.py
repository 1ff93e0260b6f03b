"""What the operator keeps per job stays small: at a thousand jobs every kilobyte kept
per job is a megabyte of the operator's memory.

The readings a pass remembers (``read_cache.WatchedVersions``) keep the job without its
``managedFields`` (several kilobytes the plan never reads) and in its compact JSON form,
and the companions it ensured are remembered by a digest, not by their manifests.
"""

from __future__ import annotations

import copy
import gc
import json
import tracemalloc
from typing import Any

from cjob_operator.read_cache import WatchedVersions
from cjob_operator.reconcile import Reconciler
from fake_cluster import FakeCluster

JOBS = 200


def managed_fields() -> list[dict[str, Any]]:
    """``metadata.managedFields`` the size the API server gives a job with a status."""
    fields = {f"f:{name}": {} for name in ("attempt", "driverPod", "phase", "reason",
                                           "message", "restarts", "specHash", "startedAt")}
    entry = {"apiVersion": "checkpointed.io/v1alpha1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:status": {".": {}, **fields,
                                       "f:conditions": {".": {}, "k:{\"type\":\"Ready\"}": {}}}},
             "manager": "kopf", "operation": "Update", "subresource": "status",
             "time": "2024-05-01T12:00:00Z"}
    return [copy.deepcopy(entry) for _ in range(4)]


def test_a_remembered_job_costs_less_than_the_job_as_the_api_server_sends_it() -> None:
    cluster = FakeCluster()
    assert cluster.job is not None
    cluster.job["metadata"]["managedFields"] = managed_fields()
    subject = Reconciler(cluster=cluster)
    watched = WatchedVersions(job=cluster.version, store=None)
    subject.reconcile(namespace="team", name="warm-up", pods=[], watched=watched)
    size = len(json.dumps(cluster.job))
    gc.collect()
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        for i in range(JOBS):
            subject.reconcile(namespace="team", name=f"job-{i}", pods=[], watched=watched)
        gc.collect()
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    per_job = (end - start) / JOBS
    assert per_job < size, f"{per_job:.0f} bytes kept per job of {size} bytes"
