"""Operator start-up: kopf settings, the API connection, the metrics server.

kopf's defaults are adjusted so the operator leaves only its own marks on objects:
the finalizer ``checkpointed.io/finalizer`` and annotations under ``checkpointed.io/``
(kopf's default would write handler progress into ``status.kopf``, which the
reconciler rewrites on every pass). Pods and ConfigMaps are watched with server-side
label selectors, so the operator only ever receives the objects it created.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import kopf
from prometheus_client import start_http_server

from cjob_lifecycle.plan import PlanSettings
from cjob_operator.api import connect
from cjob_operator.config import OperatorConfig
from cjob_operator.loops import LoopSettings, Wakeups
from cjob_operator.metrics import OperatorMetrics
from cjob_operator.options import OperatorOptions
from cjob_operator.reconcile import Reconciler
from cjob_operator.snapshot_reconcile import SnapshotReconciler
from cjob_spec.names import (
    API_GROUP,
    LABEL_JOB,
    LABEL_ROLE,
    ROLE_DRIVER,
    ROLE_EXECUTOR,
    ROLE_STANDBY,
)

FINALIZER = "checkpointed.io/finalizer"
ANNOTATION_PREFIX = "checkpointed.io"
REPORTING_COMPONENT = "checkpointed-jobs-operator"
DRIVER_ROLES = (ROLE_DRIVER, ROLE_STANDBY)
"""The role labels of the driver pods: drivers, and standby drivers."""
WATCHED_POD_ROLES = (*DRIVER_ROLES, ROLE_EXECUTOR)
"""The role labels of the pods the operator watches: its drivers, and the executors
Spark creates for them (indexed, to tell a running job whose executors cannot be
placed)."""
POD_SELECTOR = f"{LABEL_JOB},{LABEL_ROLE} in ({','.join(WATCHED_POD_ROLES)})"
STORE_SELECTOR = LABEL_JOB

_log = logging.getLogger(__name__)


@dataclass
class OperatorRuntime:
    """Everything the handlers share, kept in kopf's ``memo``."""

    reconciler: Reconciler
    wakeups: Wakeups
    snapshots: SnapshotReconciler
    metrics: OperatorMetrics
    loop_settings: LoopSettings = field(default_factory=LoopSettings)
    metrics_server: Any = None


def apply_settings(settings: kopf.OperatorSettings, *, options: OperatorOptions) -> None:
    """Configure kopf for this operator (pure: only touches ``settings``)."""
    persistence = settings.persistence
    persistence.finalizer = FINALIZER
    persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    # Our own Events explain every decision; kopf's per-handler chatter stays in the log.
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = REPORTING_COMPONENT
    if options.standalone:
        settings.peering.standalone = True
    elif options.peering:
        settings.peering.standalone = False
        settings.peering.mandatory = True
        settings.peering.name = options.peering
        settings.peering.priority = options.priority
    # A watch that silently stops delivering is re-opened instead of trusted forever.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.watching.label_selectors["v1", "pods"] = POD_SELECTOR
    settings.watching.label_selectors["v1", "configmaps"] = STORE_SELECTOR
    settings.networking.connect_timeout = 10


def build_runtime(*, options: OperatorOptions) -> OperatorRuntime:
    metrics = OperatorMetrics(with_process_metrics=True)
    cluster = connect(kubeconfig=options.kubeconfig)
    config = OperatorConfig(default_image=options.runtime_image)
    reconciler = Reconciler(cluster=cluster, operator_config=config, metrics=metrics,
                            plan_settings=PlanSettings(network_policies=options.network_policies))
    if options.runtime_image is None:
        _log.warning("no --runtime-image: jobs without spec.image will fail (reason NoImage)")
    else:
        _log.info("jobs without spec.image run %s", options.runtime_image)
    snapshots = SnapshotReconciler(cluster=cluster, operator_config=config)
    runtime = OperatorRuntime(reconciler=reconciler, wakeups=Wakeups(), snapshots=snapshots,
                              metrics=metrics)
    if options.metrics_port:
        runtime.metrics_server = start_http_server(options.metrics_port, registry=metrics.registry)
        _log.info("metrics on port %d", options.metrics_port)
    return runtime


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    options: OperatorOptions = memo.options
    apply_settings(settings, options=options)
    memo.runtime = build_runtime(options=options)
    _log.info("watching %s for %s CheckpointedJobs",
              "all namespaces" if options.all_namespaces else ", ".join(options.namespaces),
              API_GROUP)


@kopf.on.cleanup()
def shut_down(memo: kopf.Memo, **_: Any) -> None:
    runtime: OperatorRuntime | None = memo.get("runtime")
    if runtime is not None and runtime.metrics_server is not None:
        server = runtime.metrics_server
        if isinstance(server, tuple):
            server[0].shutdown()
