"""``kubectl cjob``'s commands that only read: ``list``, ``status``, ``checkpoints``,
``logs``; and what every command reads of a job (its status, its phase)."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from cjob import views
from cjob.cluster_access import ClusterAccess, NotFoundError, PluginError
from cjob.views import Output
from cjob_spec.names import DRIVER_CONTAINER, KIND


def utc_now() -> datetime:
    return datetime.now(UTC)


def say(line: str) -> None:
    """One line of what a command did, at once (a wait may follow it)."""
    print(line, flush=True)


def status_of(job: dict[str, Any]) -> dict[str, Any]:
    status: dict[str, Any] = job.get("status") or {}
    return status


def phase_of(job: dict[str, Any]) -> str | None:
    phase = status_of(job).get("phase")
    return str(phase) if phase else None


def cmd_list(access: ClusterAccess, ns: argparse.Namespace) -> int:
    jobs = access.jobs(all_namespaces=ns.all_namespaces)
    output = Output(ns.output)
    if output is not Output.TABLE:
        print(views.dump({"apiVersion": "v1", "kind": "List", "items": jobs}, output=output))
        return 0
    if not jobs:
        where = "any namespace" if ns.all_namespaces else f"namespace {access.namespace}"
        sys.stderr.write(f"No {KIND}s found in {where}.\n")
        return 0
    now = utc_now()
    header = ["NAME", "PHASE", "ATTEMPT", "RESTARTS", "PARALLELISM", "CHECKPOINT",
              "CHECKPOINT AGE", "AGE"]
    rows = []
    for job in jobs:
        status = status_of(job)
        latest = status.get("latestCheckpoint") or {}
        row = [job["metadata"]["name"], status.get("phase"), status.get("attempt"),
               status.get("restarts"), status.get("parallelism"), latest.get("id"),
               views.age(views.parse_time(latest.get("completedAt")), now=now),
               views.age(views.parse_time(job["metadata"].get("creationTimestamp")),
                         now=now)]
        rows.append(([job["metadata"].get("namespace")] if ns.all_namespaces else []) + row)
    print(views.table((["NAMESPACE"] if ns.all_namespaces else []) + header, rows))
    return 0


def cmd_status(access: ClusterAccess, ns: argparse.Namespace) -> int:
    job = access.job(ns.name)
    events = access.events(ns.name)[-ns.events:] if ns.events > 0 else []
    output = Output(ns.output)
    if output is not Output.TABLE:
        print(views.dump({"name": ns.name, "namespace": access.namespace,
                          "generation": job["metadata"].get("generation"),
                          "status": status_of(job), "events": events}, output=output))
        return 0
    now = utc_now()
    status = status_of(job)
    print(views.status_fields(name=ns.name, namespace=access.namespace, status=status,
                              now=now))
    if status.get("conditions"):
        print("\nConditions:")
        print(_indent(views.conditions_table(status["conditions"], now=now)))
    print("\nEvents:" + ("" if events else "  <none>"))
    if events:
        print(_indent(views.events_table(events, now=now)))
    return 0


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


def cmd_checkpoints(access: ClusterAccess, ns: argparse.Namespace) -> int:
    access.job(ns.name)  # an unknown job is said as such, not as a missing ConfigMap
    store = access.store(ns.name)
    checkpoints = list(store.checkpoints) if store is not None else []
    output = Output(ns.output)
    if output is not Output.TABLE:
        print(views.dump(views.checkpoint_data(checkpoints), output=output))
        return 0
    if not checkpoints:
        sys.stderr.write(f"{KIND} {ns.name} has no retained checkpoint yet.\n")
        return 0
    print(views.checkpoint_table(checkpoints, now=utc_now()))
    return 0


def cmd_logs(access: ClusterAccess, ns: argparse.Namespace) -> int:
    job = access.job(ns.name)
    pod = status_of(job).get("driverPod")
    if not pod:
        raise PluginError(f"{KIND} {ns.name} has no driver pod now (it is "
                          f"{phase_of(job) or 'not started'})")
    if access.pod(pod) is None:
        raise NotFoundError(f"the driver pod {pod} of {ns.name} is gone (its attempt ended)")
    for line in access.logs(pod=pod, container=DRIVER_CONTAINER, follow=ns.follow,
                            tail=ns.tail):
        print(line, flush=ns.follow)
    return 0
