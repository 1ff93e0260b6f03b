"""``kubectl cjob``'s commands that change what the operator acts on, and wait for the
outcome: ``checkpoint``, ``snapshot``, ``suspend``, ``resume``, ``scale``, ``restore``.

Each checks what it can before it changes anything (a refused command changes
nothing), makes one change (a field of the spec, the scale subresource, a snapshot
object), and then, unless ``--no-wait``, polls until the operator reports the outcome
or the job ends under it.
"""

from __future__ import annotations

import argparse
import re
import secrets
import time
from collections.abc import Callable
from typing import Any, TypeVar

from cjob import views
from cjob.cluster_access import ClusterAccess, PluginError
from cjob.kubectl_reading import phase_of, say, status_of, utc_now
from cjob.views import Output
from cjob_spec.names import KIND, SNAPSHOT_KIND
from cjob_spec.status import Phase

EXIT_USAGE = 2
POLL_SECONDS = 1.0
DNS_LABEL_MAX = 63

T = TypeVar("T")


def wait_until(check: Callable[[], T | None], *, timeout: float, what: str) -> T:
    """``check()`` every second until it returns a value; a timeout is a failure that
    says what did not happen (the request stays made)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            raise PluginError(f"timed out after {views.duration(timeout)} waiting for "
                              f"{what}")
        time.sleep(POLL_SECONDS)


def _request_nonce() -> str:
    """A value a job's spec never held: the plugin's prefix, the time, six random hex
    digits (a trigger or redeploy nonce acts only when it is new)."""
    return f"kubectl-cjob-{utc_now():%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def _refuse_unless_running(job: dict[str, Any], *, name: str, action: str) -> None:
    phase = phase_of(job)
    if phase in (Phase.SUSPENDED, Phase.SUCCEEDED, Phase.FAILED):
        raise PluginError(f"{KIND} {name} is {phase}: {action} only while it runs"
                          + (" (kubectl cjob resume first)" if phase == Phase.SUSPENDED
                             else ""))


def _ended_meanwhile(access: ClusterAccess, name: str, *, waiting_for: str) -> None:
    """Fail the wait at once when the job ended or was suspended under it."""
    job = access.job(name)
    phase = phase_of(job)
    if phase in (Phase.SUCCEEDED, Phase.FAILED, Phase.SUSPENDED):
        failure = status_of(job).get("lastFailure") or {}
        detail = f" ({failure.get('reason')}: {failure.get('message')})" \
            if phase == Phase.FAILED and failure else ""
        raise PluginError(f"{KIND} {name} became {phase} before {waiting_for}{detail}")


def cmd_checkpoint(access: ClusterAccess, ns: argparse.Namespace) -> int:
    job = access.job(ns.name)
    _refuse_unless_running(job, name=ns.name, action="a checkpoint is taken")
    nonce = _request_nonce()
    access.patch_job(ns.name, {"spec": {"checkpoint": {"triggerNonce": nonce}}})
    if not ns.wait:
        say(f"checkpointedjob/{ns.name} checkpoint requested ({nonce})")
        return 0

    def completed() -> int | None:
        found = access.checkpoint_acknowledged(ns.name, nonce)
        if found is None:
            _ended_meanwhile(access, ns.name, waiting_for="the checkpoint completed")
        return found

    checkpoint_id = wait_until(completed, timeout=ns.timeout,
                          what=f"the checkpoint requested as {nonce}")
    store = access.store(ns.name)
    pointer = next((c for c in (store.checkpoints if store else ())
                    if c.checkpoint_id == checkpoint_id), None)
    output = Output(ns.output)
    if output is not Output.TABLE:
        data: dict[str, Any] = {"id": checkpoint_id, "nonce": nonce}
        if pointer is not None:
            data.update(views.checkpoint_data([pointer])[0])
        print(views.dump(data, output=output))
        return 0
    where = f": {pointer.metadata_path}" if pointer is not None else " (already pruned)"
    say(f"checkpointedjob/{ns.name} checkpoint {checkpoint_id} completed{where}")
    return 0


def _snapshot_name(job_name: str, given: str | None) -> str:
    if given is None:
        return f"{job_name}-{utc_now():%Y%m%d-%H%M%S}"
    if len(given) > DNS_LABEL_MAX or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", given):
        raise PluginError(f"--name {given}: a snapshot's name is lower-case letters, digits "
                          f"and '-', starting and ending with a letter or digit, at most "
                          f"{DNS_LABEL_MAX} characters", exit_code=EXIT_USAGE)
    return given


def cmd_snapshot(access: ClusterAccess, ns: argparse.Namespace) -> int:
    access.job(ns.name)
    name = _snapshot_name(ns.name, ns.snapshot)
    store = access.store(ns.name)
    retained = sorted(c.checkpoint_id for c in (store.checkpoints if store else ()))
    if not retained:
        raise PluginError(f"{KIND} {ns.name} has no retained checkpoint to copy yet")
    if ns.checkpoint is not None and ns.checkpoint not in retained:
        raise PluginError(f"{KIND} {ns.name} retains no checkpoint {ns.checkpoint} "
                          f"(it retains {', '.join(map(str, retained))})")
    if access.snapshot(name) is not None:
        raise PluginError(f"{SNAPSHOT_KIND} {name} exists already; pick another --name")
    access.create_snapshot(name=name, job_name=ns.name, checkpoint_id=ns.checkpoint)
    if not ns.wait:
        say(f"checkpointedjobsnapshot/{name} created")
        return 0

    status = _wait_for_snapshot(access, name, timeout=ns.timeout)
    output = Output(ns.output)
    if output is not Output.TABLE:
        print(views.dump({"name": name, "status": status}, output=output))
    else:
        say(f"checkpointedjobsnapshot/{name} completed: checkpoint "
             f"{status.get('checkpointId')}, {views.size(status.get('sizeBytes'))}, "
             f"{status.get('path')}")
        say(f"go back to it with kubectl cjob restore {ns.name} --from {name}, or start "
             f"a new job from it with spec.restore.snapshot: {name}")
    return 0


def _observed(job: dict[str, Any], generation: int) -> bool:
    """The operator has acted on the spec of ``generation`` (or a later one)."""
    return int(status_of(job).get("observedGeneration") or 0) >= generation


def cmd_suspend(access: ClusterAccess, ns: argparse.Namespace) -> int:
    job = access.job(ns.name)
    phase = phase_of(job)
    if (job.get("spec") or {}).get("suspend") and phase == Phase.SUSPENDED:
        say(f"checkpointedjob/{ns.name} is suspended already")
        return 0
    if phase in (Phase.SUCCEEDED, Phase.FAILED):
        raise PluginError(f"{KIND} {ns.name} is {phase}: there is nothing to suspend")
    patched = access.patch_job(ns.name, {"spec": {"suspend": True}})
    if not ns.wait:
        say(f"checkpointedjob/{ns.name} suspend requested")
        return 0
    generation = int(patched["metadata"].get("generation") or 0)

    def suspended() -> dict[str, Any] | None:
        found = access.job(ns.name)
        if not _observed(found, generation):
            return None
        if phase_of(found) in (Phase.FAILED, Phase.SUCCEEDED):
            raise PluginError(f"{KIND} {ns.name} became {phase_of(found)} instead of suspended")
        return found if phase_of(found) == Phase.SUSPENDED else None

    found = wait_until(suspended, timeout=ns.timeout, what=f"{ns.name} to be Suspended")
    latest = (status_of(found).get("latestCheckpoint") or {}).get("id")
    say(f"checkpointedjob/{ns.name} suspended"
         + (f" at checkpoint {latest}" if latest is not None else ""))
    return 0


def _started(job: dict[str, Any], *, phases: tuple[Phase, ...]) -> bool:
    """The current attempt is in one of ``phases`` and, when there is a checkpoint to
    restore, its driver reported what it restored (so the command can say it)."""
    status = status_of(job)
    if phase_of(job) not in phases:
        return False
    return (phase_of(job) == Phase.SUCCEEDED or status.get("latestCheckpoint") is None
            or status.get("restoredFrom") is not None)


def cmd_resume(access: ClusterAccess, ns: argparse.Namespace) -> int:
    job = access.job(ns.name)
    if not (job.get("spec") or {}).get("suspend"):
        say(f"checkpointedjob/{ns.name} is not suspended")
        return 0
    patched = access.patch_job(ns.name, {"spec": {"suspend": False}})
    if not ns.wait:
        say(f"checkpointedjob/{ns.name} resume requested")
        return 0
    generation = int(patched["metadata"].get("generation") or 0)

    def running() -> dict[str, Any] | None:
        found = access.job(ns.name)
        if not _observed(found, generation):
            return None
        if phase_of(found) == Phase.FAILED:
            failure = status_of(found).get("lastFailure") or {}
            raise PluginError(f"{KIND} {ns.name} failed on resuming: "
                              f"{failure.get('reason')}: {failure.get('message')}")
        return found if _started(found, phases=(Phase.RUNNING, Phase.SUCCEEDED)) else None

    found = wait_until(running, timeout=ns.timeout, what=f"{ns.name} to be Running")
    restored = (status_of(found).get("restoredFrom") or {}).get("id")
    say(f"checkpointedjob/{ns.name} resumed, attempt {status_of(found).get('attempt')}"
         + (f" from checkpoint {restored}" if restored is not None else ""))
    return 0


def cmd_scale(access: ClusterAccess, ns: argparse.Namespace) -> int:
    job = access.job(ns.name)
    spec = job.get("spec") or {}
    most = spec.get("maxParallelism")
    if most is not None and ns.replicas > int(most):
        raise PluginError(f"parallelism {ns.replicas} is above the job's maxParallelism "
                          f"{most} (its key groups); a job cannot run more subtasks than "
                          f"key groups", exit_code=EXIT_USAGE)
    if phase_of(job) in (Phase.SUCCEEDED, Phase.FAILED):
        raise PluginError(f"{KIND} {ns.name} is {phase_of(job)}: there is nothing to scale")
    if spec.get("parallelism") == ns.replicas and \
            status_of(job).get("parallelism") == ns.replicas:
        say(f"checkpointedjob/{ns.name} runs at parallelism {ns.replicas} already")
        return 0
    access.scale(ns.name, ns.replicas)
    generation = int(access.job(ns.name)["metadata"].get("generation") or 0)
    if not ns.wait or spec.get("suspend"):
        say(f"checkpointedjob/{ns.name} scaled to {ns.replicas}"
             + (" (it runs so once resumed)" if spec.get("suspend") else ""))
        return 0

    def rescaled() -> dict[str, Any] | None:
        found = access.job(ns.name)
        if not _observed(found, generation):
            return None
        _ended_meanwhile(access, ns.name, waiting_for=f"it ran at parallelism {ns.replicas}")
        status = status_of(found)
        return found if (status.get("parallelism") == ns.replicas
                         and _started(found, phases=(Phase.RUNNING,))) else None

    found = wait_until(rescaled, timeout=ns.timeout,
                  what=f"{ns.name} to run at parallelism {ns.replicas}")
    restored = (status_of(found).get("restoredFrom") or {}).get("id")
    say(f"checkpointedjob/{ns.name} scaled to {ns.replicas}, attempt "
         f"{status_of(found).get('attempt')}"
         + (f" from checkpoint {restored}" if restored is not None else ""))
    return 0


def _wait_for_snapshot(access: ClusterAccess, name: str, *, timeout: float) -> dict[str, Any]:
    """The snapshot's status once Completed; a Failed one (or one deleted) is an error."""
    def final() -> dict[str, Any] | None:
        found = access.snapshot(name)
        if found is None:
            raise PluginError(f"{SNAPSHOT_KIND} {name} was deleted while it was taken")
        status: dict[str, Any] = found.get("status") or {}
        return status if status.get("state") in ("Completed", "Failed") else None

    status = wait_until(final, timeout=timeout, what=f"{SNAPSHOT_KIND} {name} to complete "
                                                f"(it goes on; kubectl get cjobsnapshot)")
    if status.get("state") == "Failed":
        raise PluginError(f"checkpointedjobsnapshot/{name} failed: {status.get('reason')}: "
                          f"{status.get('message')}")
    return status


def _restore_point(access: ClusterAccess, ns: argparse.Namespace) -> dict[str, Any]:
    """``spec.restore``'s new starting point for ``--from``, checked before anything
    changes: a retained checkpoint (copied into a snapshot first), a path, a snapshot."""
    point: str = ns.point
    if point.isdigit():
        checkpoint_id = int(point)
        store = access.store(ns.name)
        retained = sorted(c.checkpoint_id for c in (store.checkpoints if store else ()))
        if checkpoint_id not in retained:
            listed = ", ".join(map(str, retained)) or "none"
            raise PluginError(f"{KIND} {ns.name} retains no checkpoint {checkpoint_id} "
                              f"(it retains {listed}); restore a snapshot or a path instead")
        name = f"{ns.name}-r{checkpoint_id}-{utc_now():%Y%m%d-%H%M%S}"
        say(f"copying checkpoint {checkpoint_id} into checkpointedjobsnapshot/{name}, so "
             f"that pruning cannot take it before the job restores it")
        access.create_snapshot(name=name, job_name=ns.name, checkpoint_id=checkpoint_id)
        _wait_for_snapshot(access, name, timeout=ns.timeout)
        return {"snapshot": name, "from": None}
    if "://" in point:
        if not point.startswith(("file://", "s3://")):
            raise PluginError(f"--from {point}: a path is file:// or s3://, to a checkpoint's "
                              f"or a snapshot's _metadata", exit_code=EXIT_USAGE)
        return {"from": point, "snapshot": None}
    if not re.fullmatch(r"[a-z0-9]([-.a-z0-9]*[a-z0-9])?", point):
        raise PluginError(f"--from {point}: not a checkpoint id, a file:// or s3:// path, or "
                          f"a snapshot's name", exit_code=EXIT_USAGE)
    found = access.snapshot(point)
    if found is None:
        raise PluginError(f"no {SNAPSHOT_KIND} {point!r} in namespace {access.namespace!r} "
                          f"(kubectl get cjsnap -n {access.namespace})")
    state = (found.get("status") or {}).get("state")
    if state == "Failed":
        raise PluginError(f"{SNAPSHOT_KIND} {point} failed; restore another")
    return {"snapshot": point, "from": None}


def cmd_restore(access: ClusterAccess, ns: argparse.Namespace) -> int:
    job = access.job(ns.name)
    before = int(status_of(job).get("attempt") or 0)
    restore = _restore_point(access, ns)
    nonce = _request_nonce()
    access.patch_job(ns.name, {"spec": {"restore": {**restore, "redeployNonce": nonce}}})
    point = f"snapshot {restore['snapshot']}" if restore.get("snapshot") else restore["from"]
    if not ns.wait:
        say(f"checkpointedjob/{ns.name} redeploy from {point} requested ({nonce})")
        return 0

    def restored() -> dict[str, Any] | None:
        found = access.job(ns.name)
        status = status_of(found)
        if status.get("lastRedeployNonce") != nonce:
            return None
        phase = status.get("phase")
        if phase == Phase.FAILED:
            failure = status.get("lastFailure") or {}
            raise PluginError(f"{KIND} {ns.name} failed restoring {point}: "
                              f"{failure.get('reason')}: {failure.get('message')}")
        if phase == Phase.SUSPENDED or (found.get("spec") or {}).get("suspend"):
            return found
        attempt = int(status.get("attempt") or 0)
        if attempt > before and (status.get("restoredFrom") or phase == Phase.SUCCEEDED):
            return found
        return None

    found = wait_until(restored, timeout=ns.timeout, what=f"{ns.name} to restore {point}")
    status = status_of(found)
    if status.get("phase") == Phase.SUSPENDED:
        say(f"checkpointedjob/{ns.name} is suspended: it starts from {point} when resumed")
        return 0
    origin = status.get("restoredFrom") or {}
    say(f"checkpointedjob/{ns.name} restored checkpoint {origin.get('id')} "
         f"({origin.get('path')}) in attempt {status.get('attempt')}")
    return 0
