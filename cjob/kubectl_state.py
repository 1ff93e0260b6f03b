"""``kubectl cjob state``: a job's checkpointed state, read inside the cluster.

The plugin holds no storage credentials and cannot mount the job's volumes, so it
does not read checkpoints itself: it starts a short-lived pod that reaches the
storage as the job's driver does (the driver pod's image, variables, secret
references, volumes, placement and security contexts), runs the runtime's ``state``
command (``python -m job_runtime state``) on one retained checkpoint, and prints
what the pod printed as JSON lines, as a table or as JSON / YAML. The pod needs no
API access (no service account token), is gone when the command returns, and is
labelled with the job and role ``state`` so ``kubectl get pods`` shows whose it is.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from typing import Any

from cjob import views
from cjob.cluster_access import ClusterAccess, PluginError
from cjob.kubectl_changing import wait_until
from cjob.kubectl_reading import status_of
from cjob.views import Output
from cjob_spec.model import is_s3_code
from cjob_spec.names import DRIVER_CONTAINER, KIND, LABEL_JOB, LABEL_ROLE, ROLE_STATE
from cjob_spec.pod_ownership import OPERATOR_DIR, OPERATOR_VOLUMES

READER_CONTAINER = "state"
RUN_WORD = "run"
"""The last word of a driver container's command (``python -m job_runtime run``)."""
STATE_WORD = "state"
COPIED_POD_FIELDS = ("securityContext", "nodeSelector", "tolerations", "affinity",
                     "priorityClassName", "imagePullSecrets")
COPIED_CONTAINER_FIELDS = ("image", "imagePullPolicy", "env", "envFrom", "resources",
                           "securityContext", "workingDir")


def _checkpoint(access: ClusterAccess, name: str, wanted: int | None) -> tuple[int, str]:
    """The id and ``_metadata`` path of the latest retained checkpoint, or of ``wanted``."""
    store = access.store(name)
    checkpoints = list(store.checkpoints) if store is not None else []
    if not checkpoints:
        raise PluginError(f"{KIND} {name} has no retained checkpoint yet")
    if wanted is None:
        latest = checkpoints[-1]
        return latest.checkpoint_id, latest.metadata_path
    for checkpoint in checkpoints:
        if checkpoint.checkpoint_id == wanted:
            return checkpoint.checkpoint_id, checkpoint.metadata_path
    retained = ", ".join(str(c.checkpoint_id) for c in checkpoints)
    raise PluginError(f"{KIND} {name} retains no checkpoint {wanted} (it retains {retained}; "
                      f"kubectl cjob checkpoints {name})")


def _driver_pod(access: ClusterAccess, job: dict[str, Any], name: str) -> dict[str, Any]:
    pod_name = status_of(job).get("driverPod")
    found = access.pod(pod_name) if pod_name else None
    if found is None:
        raise PluginError(f"{KIND} {name} has no driver pod to read its storage as (its "
                          f"image, credentials and volumes): the state is read by a pod "
                          f"like its driver, so the job must have started an attempt whose "
                          f"pod is still there")
    return found


def reader_command(container: dict[str, Any]) -> list[str]:
    """The driver container's command with ``run`` replaced by ``state``."""
    command = list(container.get("command") or [])
    if not command or command[-1] != RUN_WORD:
        raise PluginError(f"the driver's command {command!r} does not end with {RUN_WORD!r}: "
                          f"cannot tell how to start the runtime's state command")
    return [*command[:-1], STATE_WORD]


def reader_pod(*, driver: dict[str, Any], job: dict[str, Any], pod_name: str,
               checkpoint: str, operator: str | None, state: str | None,
               deadline_seconds: int) -> dict[str, Any]:
    """The pod that prints ``checkpoint``'s state as JSON lines, built like ``driver``."""
    driver_spec = driver["spec"]
    container = next(c for c in driver_spec["containers"] if c["name"] == DRIVER_CONTAINER)
    args = ["--checkpoint", checkpoint, "--output", "json", "--limit", "0"]
    if operator is not None:
        args += ["--operator", operator]
    if state is not None:
        args += ["--state", state]
    for entry in job["spec"].get("job", {}).get("pythonPath") or []:
        if not is_s3_code(entry):
            args += ["--python-path", entry]
    reader: dict[str, Any] = {
        "name": READER_CONTAINER, "command": reader_command(container), "args": args,
        **{key: container[key] for key in COPIED_CONTAINER_FIELDS if key in container}}
    mounts = [m for m in container.get("volumeMounts") or []
              if not str(m.get("mountPath", "")).startswith(OPERATOR_DIR)]
    if mounts:
        reader["volumeMounts"] = mounts
    names = {m["name"] for m in mounts}
    spec: dict[str, Any] = {
        "restartPolicy": "Never", "automountServiceAccountToken": False,
        "activeDeadlineSeconds": deadline_seconds, "containers": [reader],
        **{key: driver_spec[key] for key in COPIED_POD_FIELDS if key in driver_spec}}
    volumes = [v for v in driver_spec.get("volumes") or []
               if v["name"] in names and v["name"] not in OPERATOR_VOLUMES]
    if volumes:
        spec["volumes"] = volumes
    metadata = job["metadata"]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": driver["metadata"]["namespace"],
                     "labels": {LABEL_JOB: metadata["name"], LABEL_ROLE: ROLE_STATE}},
        "spec": spec,
    }


def _finished(pod: dict[str, Any] | None) -> dict[str, Any] | None:
    if pod is None:
        raise PluginError("the state reader's pod was deleted before it finished")
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is not None:
            found: dict[str, Any] = terminated
            return found
    if (pod.get("status") or {}).get("phase") == "Failed":
        reason = pod["status"].get("reason") or "Failed"
        return {"exitCode": -1, "reason": reason, "message": pod["status"].get("message")}
    return None


def cmd_state(access: ClusterAccess, ns: argparse.Namespace) -> int:
    job = access.job(ns.name)
    checkpoint_id, path = _checkpoint(access, ns.name, ns.checkpoint)
    driver = _driver_pod(access, job, ns.name)
    pod_name = f"{ns.name}-state-{secrets.token_hex(3)}"[:63]
    access.create_pod(reader_pod(driver=driver, job=job, pod_name=pod_name, checkpoint=path,
                                 operator=ns.operator, state=ns.state,
                                 deadline_seconds=max(int(ns.timeout), 1)))
    try:
        ended = wait_until(lambda: _finished(access.pod(pod_name)), timeout=ns.timeout,
                           what=f"pod {pod_name} to read checkpoint {checkpoint_id}")
        lines = list(access.logs(pod=pod_name, container=READER_CONTAINER, follow=False,
                                 tail=None))
    finally:
        access.delete_pod(pod_name)
    if ended.get("exitCode") != 0:
        said = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
        reason = said[-1] if said else (ended.get("message") or ended.get("reason")
                                        or f"exit code {ended.get('exitCode')}")
        raise PluginError(f"reading checkpoint {checkpoint_id} of {ns.name}: {reason}")
    rows = [json.loads(line) for line in lines if line.startswith("{")]
    _print(rows, output=Output(ns.output), limit=ns.limit, listing=ns.operator is None,
           checkpoint_id=checkpoint_id, name=ns.name)
    return 0


def _print(rows: list[dict[str, Any]], *, output: Output, limit: int, listing: bool,
           checkpoint_id: int, name: str) -> None:
    if output is not Output.TABLE:
        print(views.dump(rows, output=output))
        return
    if not rows:
        sys.stderr.write(f"checkpoint {checkpoint_id} of {name} holds no "
                         f"{'keyed state' if listing else 'such state'}.\n")
        return
    shown = rows if limit == 0 else rows[:limit]
    if listing:  # sizes as kubectl cjob checkpoints shows them
        shown = [{**row, "sizeBytes": views.size(row.get("sizeBytes"))} for row in shown]
    header = list(shown[0])
    print(views.table([h.upper() for h in header],
                      [[_cell(row.get(h)) for h in header] for row in shown]))
    if len(shown) < len(rows):
        print(f"({len(shown)} of {len(rows)} rows; --limit 0 or -o json for all)")


CELL_WIDTH = 48


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= CELL_WIDTH else text[:CELL_WIDTH - 3] + "..."
