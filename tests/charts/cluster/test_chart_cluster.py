"""The chart against a real kube-apiserver (the local control plane): every rendered
object passes a server-side dry run, ``helm install``/``uninstall`` create and remove
the operator's objects (the CRD stays), and the RBAC it binds is enough for what the
operator does and no more."""

from __future__ import annotations

import functools
import json
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cjob_operator.builders import build_role, build_role_binding, build_service_account
from paths import REPO

from cjob_spec import parse_job
from e2e.controlplane.namespaces import resource_exists
from e2e.controlplane.rest import ApiError, RestClient, quote
from e2e.controlplane.waiting import wait_for
from e2e.kind.chart import CHART_DIR, HelmCommandError, Manifest, run_command
from e2e.kind.chart_fixtures import InstallChart

Render = Callable[..., list[Manifest]]
FULL_VALUES = CHART_DIR / "ci" / "full-values.yaml"
CRD_NAME = "checkpointedjobs.checkpointed.io"
# The operator pods of these tests must not run: a shared process node would start a
# real operator that reconciles other tests' jobs. No node carries this label.
NOWHERE = {"nodeSelector": {"checkpointed.io/test-node": "none"}}

MONITORING_STAND_INS = """
# Minimal stand-ins for the Prometheus Operator's CRDs (the real ones are large and not
# part of this project): they make the kinds known, so the apiserver accepts or refuses
# the chart's ServiceMonitor and PodMonitor as objects, without checking their fields.
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ServiceMonitor, plural: servicemonitors, singular: servicemonitor}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: prometheusrules.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: PrometheusRule, plural: prometheusrules, singular: prometheusrule}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: podmonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: PodMonitor, plural: podmonitors, singular: podmonitor}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"""


class Kubectl:
    """kubectl against the local control plane as its admin (or as someone else)."""

    def __init__(self, *, binary: Path, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str, stdin: str | None = None, as_user: str | None = None) -> str:
        command = [str(self.binary), "--kubeconfig", str(self.kubeconfig)]
        if as_user:
            command += ["--as", as_user]
        return run_command([*command, *args], stdin=stdin, timeout=120)

    def can_i(self, verb: str, resource: str, *, as_user: str, namespace: str | None = None) -> bool:
        args = ["auth", "can-i", verb, resource, "--as", as_user]
        args += ["--namespace", namespace] if namespace else ["--all-namespaces"]
        command = [str(self.binary), "--kubeconfig", str(self.kubeconfig), *args]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        answer = proc.stdout.strip()
        assert answer in ("yes", "no"), f"kubectl auth can-i said {answer!r}: {proc.stderr}"
        return answer == "yes"


@pytest.fixture(scope="session")
def kubectl(control_plane: Any, kubectl_bin: Path) -> Kubectl:
    return Kubectl(binary=kubectl_bin, kubeconfig=Path(control_plane.kubeconfig))


@pytest.fixture(scope="session")
def chart_crds(kubectl: Kubectl, kube_rest: RestClient) -> Iterator[None]:
    """The chart's CRDs and the monitoring stand-ins, established in the cluster."""
    created_stand_ins = not resource_exists(
        kube_rest, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
        "servicemonitors.monitoring.coreos.com"
    )  # fmt: skip
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CHART_DIR / "crds"))
    kubectl("apply", "--server-side", "-f", "-", stdin=MONITORING_STAND_INS)
    names = [CRD_NAME, "kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev",
             "servicemonitors.monitoring.coreos.com", "podmonitors.monitoring.coreos.com",
             "prometheusrules.monitoring.coreos.com"]  # fmt: skip
    kubectl("wait", "--for=condition=Established", "--timeout=60s",
            *[f"crd/{n}" for n in names])  # fmt: skip
    yield
    if created_stand_ins:
        kubectl("delete", "--ignore-not-found", "-f", "-", stdin=MONITORING_STAND_INS)


def dry_run(kubectl: Kubectl, objects: list[Manifest]) -> str:
    stream = yaml.safe_dump_all(objects, sort_keys=False)
    return kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", stdin=stream)


# --- server-side dry run ---------------------------------------------------------------


def full_values(*, watched: list[str], rbac: bool) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(FULL_VALUES.read_text())
    values["watchNamespaces"] = watched
    values["rbac"] = {"create": rbac}
    return values


@pytest.mark.parametrize("case", ["defaults", "full-values-file", "namespaced-rbac-peering",
                                  "cluster-peering-monitoring"])  # fmt: skip
def test_every_rendered_object_is_accepted_by_the_apiserver(
    case: str,
    render: Render,
    kubectl: Kubectl,
    chart_crds: None,
    kube_namespace: str,
    extra_namespaces: Callable[[int], list[str]],
) -> None:
    watched = extra_namespaces(2)
    values: dict[str, Any] = {
        "defaults": {},
        "full-values-file": full_values(watched=watched, rbac=False),
        "namespaced-rbac-peering": full_values(watched=watched, rbac=True),
        "cluster-peering-monitoring": {
            "replicaCount": 2,
            "metrics": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}},
            "grafana": {"dashboard": {"enabled": True}},
        },
    }[case]
    objects = render(values, namespace=kube_namespace, release=f"dry-{case}"[:40])
    out = dry_run(kubectl, objects)
    accepted = [line for line in out.splitlines() if "(server dry run)" in line]
    assert len(accepted) == len(objects), out


def test_the_dry_run_would_catch_an_invalid_object(
    render: Render, kubectl: Kubectl, chart_crds: None, kube_namespace: str
) -> None:
    """The dry run really validates: a broken Deployment is refused."""
    objects = render({}, namespace=kube_namespace)
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = 0
    with pytest.raises(HelmCommandError) as failure:
        dry_run(kubectl, objects)
    assert "containerPort" in failure.value.stderr


# --- install and uninstall -----------------------------------------------------------


def object_path(obj: Manifest) -> str:
    api_version: str = obj["apiVersion"]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    plural = {
        "Deployment": "deployments", "ServiceAccount": "serviceaccounts",
        "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
        "Role": "roles", "RoleBinding": "rolebindings", "Service": "services",
        "ConfigMap": "configmaps", "KopfPeering": "kopfpeerings",
        "ClusterKopfPeering": "clusterkopfpeerings",
        "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
        "PodDisruptionBudget": "poddisruptionbudgets",
    }[obj["kind"]]  # fmt: skip
    namespace = obj["metadata"].get("namespace")
    scope = f"/namespaces/{quote(namespace)}" if namespace else ""
    return f"{base}{scope}/{plural}/{quote(obj['metadata']['name'])}"


def is_gone(client: RestClient, path: str) -> bool:
    """True once the object is gone (or only waits for its finalizers to run)."""
    try:
        obj = client.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return True
        raise
    return bool(obj["metadata"].get("deletionTimestamp"))


@pytest.mark.parametrize(
    "values",
    [
        {},
        {"replicaCount": 2, "grafana": {"dashboard": {"enabled": True}}},
        "namespaced",
    ],
    ids=["defaults", "cluster-peering-dashboard", "namespaced-peering"],
)
def test_install_creates_the_operator_objects_and_uninstall_leaves_only_the_crds(
    values: dict[str, Any] | str,
    installed_chart: InstallChart,
    kube_rest: RestClient,
    kube_namespace: str,
    extra_namespaces: Callable[[int], list[str]],
) -> None:
    if values == "namespaced":
        values = {"watchNamespaces": extra_namespaces(2), "peering": {"enabled": True}}
    assert isinstance(values, dict)
    release = installed_chart({**values, **NOWHERE})
    assert release.status()["info"]["status"] == "deployed"
    objects = release.manifest()
    assert objects
    for obj in objects:
        found = kube_rest.get(object_path(obj))
        labels = found["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == release.name
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
    deployment = kube_rest.get(
        f"/apis/apps/v1/namespaces/{kube_namespace}/deployments/{release.fullname}"
    )
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == release.fullname
    crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for crd in (CRD_NAME, "kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"):
        assert kube_rest.get(f"{crds}/{crd}")["metadata"]["name"] == crd

    release.uninstall()

    for obj in objects:
        wait_for(functools.partial(is_gone, kube_rest, object_path(obj)),
                 what=f"{obj['kind']} {obj['metadata']['name']} deleted", timeout=60)  # fmt: skip
    namespaces = [kube_namespace, *release.values.get("watchNamespaces", [])]
    wait_for(lambda: not leftovers(kube_rest, instance=release.name, namespaces=namespaces),
             what="no object of the release left",
             timeout=60)  # fmt: skip
    # Helm never deletes what it installed from crds/: jobs survive an uninstall.
    assert kube_rest.get(f"{crds}/{CRD_NAME}")["metadata"]["name"] == CRD_NAME


def leftovers(client: RestClient, *, instance: str, namespaces: list[str]) -> list[str]:
    """Live objects labelled with the release, in its namespaces and at cluster scope."""
    query = {"labelSelector": f"app.kubernetes.io/instance={instance}"}
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    admission = "/apis/admissionregistration.k8s.io/v1"
    paths = [f"{rbac}/clusterroles", f"{rbac}/clusterrolebindings",
             f"{admission}/validatingadmissionpolicies",
             f"{admission}/validatingadmissionpolicybindings"]  # fmt: skip
    for ns in namespaces:
        paths += [f"/api/v1/namespaces/{ns}/{kind}"
                  for kind in ("pods", "services", "serviceaccounts", "configmaps")]
        paths += [f"/apis/apps/v1/namespaces/{ns}/{kind}"
                  for kind in ("deployments", "replicasets")]
        paths += [f"{rbac}/namespaces/{ns}/{kind}" for kind in ("roles", "rolebindings")]
        paths += [f"/apis/kopf.dev/v1/namespaces/{ns}/kopfpeerings"]
    paths.append("/apis/kopf.dev/v1/clusterkopfpeerings")
    found = []
    for path in paths:
        for item in client.get(path, query=query)["items"]:
            if not item["metadata"].get("deletionTimestamp"):
                found.append(f"{path}/{item['metadata']['name']}")
    return found


# --- RBAC as the apiserver enforces it ---------------------------------------------------


def driver_objects(*, namespace: str, master: str) -> list[Manifest]:
    job = parse_job({
        "apiVersion": "checkpointed.io/v1alpha1",
        "kind": "CheckpointedJob",
        "metadata": {"name": "rbac-probe", "namespace": namespace, "uid": "u-rbac"},
        "spec": {
            "image": "example.org/clicks:1.0",
            "job": {"entrypoint": "clicks.job:build"},
            "spark": {"master": master},
            "checkpoint": {"storage": "s3://ckpt/jobs"},
        },
    })  # fmt: skip
    objects = [build_service_account(job), build_role(job), build_role_binding(job)]
    for obj in objects:
        # The owner (a CheckpointedJob) does not exist here; the rights are the point.
        obj["metadata"].pop("ownerReferences", None)
    return objects


def _pod_properties(crd: dict[str, Any]) -> dict[str, Any]:
    version = crd["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    properties: dict[str, Any] = spec["properties"]["pod"]["properties"]
    return properties


def _documented_crd_upgrade() -> list[str]:
    """The chart README's command that upgrades the CRDs, as a user would copy it."""
    readme = (CHART_DIR / "README.md").read_text()
    section = readme.split("## Upgrade", 1)[1].split("\n## ", 1)[0]
    (line,) = [ln for ln in section.splitlines() if ln.startswith("kubectl apply")]
    words = line.split()
    return [word.replace("charts/checkpointed-jobs", str(CHART_DIR)) for word in words[1:]]


def test_helm_upgrade_keeps_an_old_crd_and_the_documented_command_brings_the_new_one(
    chart_crds: None, installed_chart: InstallChart, kubectl: Kubectl, kube_rest: RestClient,
    kube_namespace: str,
) -> None:
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
    current = yaml.safe_load((CHART_DIR / "crds" / "checkpointedjob.yaml").read_text())
    # The CRD as an older chart left it: without a field this chart's operator reads,
    # written by another field manager than the user's kubectl (as Helm's create is).
    old = json.loads(json.dumps(current))
    del _pod_properties(old)["driverTemplate"]
    old["metadata"]["resourceVersion"] = kube_rest.get(path)["metadata"]["resourceVersion"]
    kubectl("replace", "-f", "-", stdin=yaml.safe_dump(old))
    try:
        release = installed_chart(NOWHERE)
        release.upgrade(values={**NOWHERE, "logLevel": "DEBUG"})
        assert "driverTemplate" not in _pod_properties(kube_rest.get(path)), \
            "helm upgraded the CRD: the README's advice is no longer needed"
        kubectl(*_documented_crd_upgrade())
    finally:
        # Whatever happened, the session's other tests get the current CRD back.
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CHART_DIR / "crds"))
    assert "driverTemplate" in _pod_properties(kube_rest.get(path))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{CRD_NAME}")
    # A job using the new field keeps it: the API server no longer prunes it.
    job = yaml.safe_load((REPO / "examples" / "running_sum" / "running-sum.yaml").read_text())
    job["metadata"] = {"name": "crd-upgrade", "namespace": kube_namespace}
    job["spec"].setdefault("pod", {})["driverTemplate"] = {"metadata": {"labels": {"a": "b"}}}
    applied = json.loads(kubectl("apply", "--dry-run=server", "-o", "json", "-f", "-",
                                 stdin=yaml.safe_dump(job)))
    assert applied["spec"]["pod"]["driverTemplate"] == {"metadata": {"labels": {"a": "b"}}}


def test_the_operator_account_may_grant_a_drivers_role_in_a_watched_namespace(
    installed_chart: InstallChart,
    kubectl: Kubectl,
    extra_namespaces: Callable[[int], list[str]],
) -> None:
    """Kubernetes' escalation check, for real: the operator creates the driver's Role
    and RoleBinding without holding 'escalate' or 'bind'."""
    (watched,) = extra_namespaces(1)
    release = installed_chart({"watchNamespaces": [watched], **NOWHERE})
    operator = f"system:serviceaccount:{release.namespace}:{release.fullname}"
    stream = yaml.safe_dump_all(driver_objects(namespace=watched, master="k8s"))
    out = kubectl("create", "--namespace", watched, "-f", "-", stdin=stream, as_user=operator)
    assert "role.rbac.authorization.k8s.io/rbac-probe" in out
    assert out.count("created") == 3


def test_the_operator_account_is_confined_to_what_it_needs(
    installed_chart: InstallChart,
    kubectl: Kubectl,
    extra_namespaces: Callable[[int], list[str]],
) -> None:
    watched, other = extra_namespaces(2)
    release = installed_chart({"watchNamespaces": [watched], **NOWHERE})
    operator = f"system:serviceaccount:{release.namespace}:{release.fullname}"
    allowed = [
        ("watch", "checkpointedjobs.checkpointed.io", watched),
        ("patch", "checkpointedjobs.checkpointed.io/status", watched),
        ("create", "pods", watched),
        ("delete", "pods", watched),
        ("update", "configmaps", watched),
        ("create", "roles.rbac.authorization.k8s.io", watched),
        ("create", "events", watched),
        ("create", "networkpolicies.networking.k8s.io", watched),
        ("list", "customresourcedefinitions.apiextensions.k8s.io", None),
        ("watch", "namespaces", None),
    ]
    for verb, resource, namespace in allowed:
        assert kubectl.can_i(verb, resource, as_user=operator, namespace=namespace), (
            verb, resource, namespace)  # fmt: skip
    denied = [
        ("get", "secrets", watched),
        ("list", "secrets", watched),
        ("deletecollection", "configmaps", watched),
        ("create", "pods", other),
        ("watch", "checkpointedjobs.checkpointed.io", other),
        ("get", "secrets", other),
        ("escalate", "roles.rbac.authorization.k8s.io", watched),
        ("bind", "roles.rbac.authorization.k8s.io", watched),
        ("delete", "customresourcedefinitions.apiextensions.k8s.io", None),
        ("create", "deployments.apps", watched),
        ("list", "nodes", None),
    ]
    for verb, resource, namespace in denied:
        assert not kubectl.can_i(verb, resource, as_user=operator, namespace=namespace), (
            verb, resource, namespace)  # fmt: skip


@pytest.mark.parametrize("scope", ["namespaced", "cluster-wide"])
def test_the_operator_may_not_read_or_change_secrets_anywhere(
    scope: str,
    installed_chart: InstallChart,
    kubectl: Kubectl,
    extra_namespaces: Callable[[int], list[str]],
) -> None:
    """Checkpoint data is deleted by a cleanup pod the kubelet gives the credentials to;
    the operator only creates Secrets (each k8s job's Spark RPC key)."""
    watched, other = extra_namespaces(2)
    namespaces: dict[str, Any] = {"watchNamespaces": [watched]} if scope == "namespaced" else {}
    release = installed_chart({**namespaces, **NOWHERE})
    operator = f"system:serviceaccount:{release.namespace}:{release.fullname}"
    for namespace in (watched, other, release.namespace):
        for verb in ("get", "list", "watch", "update", "patch", "delete"):
            assert not kubectl.can_i(verb, "secrets", as_user=operator, namespace=namespace), (
                verb, namespace)  # fmt: skip


def test_the_operator_pod_is_admitted_where_pod_security_is_restricted(
    render: Render, kube_rest: RestClient, kube_namespace: str
) -> None:
    labels = {"pod-security.kubernetes.io/enforce": "restricted",
              "pod-security.kubernetes.io/enforce-version": "latest"}
    kube_rest.request("PATCH", f"/api/v1/namespaces/{quote(kube_namespace)}",
                      body={"metadata": {"labels": labels}},
                      content_type="application/strategic-merge-patch+json")
    deployment = next(o for o in render(namespace=kube_namespace) if o["kind"] == "Deployment")
    template = deployment["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "operator-probe", "labels": template["metadata"]["labels"]},
           "spec": {**template["spec"], "serviceAccountName": "default"}}
    kube_rest.request("POST", f"/api/v1/namespaces/{quote(kube_namespace)}/pods",
                      body=pod, query={"dryRun": "All"})
    pod["spec"]["containers"][0]["securityContext"] = {}
    with pytest.raises(ApiError, match="violates PodSecurity"):
        kube_rest.request("POST", f"/api/v1/namespaces/{quote(kube_namespace)}/pods",
                          body=pod, query={"dryRun": "All"})


def test_a_second_release_with_its_own_name_installs_side_by_side(
    installed_chart: InstallChart, kube_rest: RestClient
) -> None:
    """Cluster-scoped names derive from the release, so two releases never collide."""
    first = installed_chart(dict(NOWHERE))
    second = installed_chart(dict(NOWHERE))
    roles = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
    for release in (first, second):
        assert kube_rest.get(f"{roles}/{release.fullname}")["rules"]
    assert json.dumps(first.status()["info"]["status"]) == '"deployed"'


# --- the operator the chart installs, running ----------------------------------------


@pytest.mark.parametrize("peering", [False, True], ids=["standalone", "peering"])
def test_the_installed_operator_runs_and_serves_health_and_metrics(
    peering: bool,
    installed_chart: InstallChart,
    process_node: Any,
    kube_rest: RestClient,
    kube_namespace: str,
) -> None:
    """The chart's pod spec as the process node runs it: command, arguments, service
    account, RBAC and ports are enough for the operator to start and become healthy.
    (Only namespaced: an operator watching every namespace would act on other tests'
    jobs. One replica: the process node shares the host's ports between pods.)"""
    release = installed_chart(
        {"watchNamespaces": [kube_namespace], "peering": {"enabled": peering}}
    )
    health = release.values["health"]["port"]
    metrics = release.values["metrics"]["port"]

    def answers(port: int, path: str) -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
                return str(resp.read().decode()) if resp.status == 200 else None
        except OSError:
            return None

    wait_for(lambda: answers(health, "/healthz"), what="the operator's /healthz", timeout=120)
    exposition = wait_for(lambda: answers(metrics, "/metrics"), what="/metrics", timeout=60)
    assert "cjob_operator_" in exposition
    pods = kube_rest.get(
        f"/api/v1/namespaces/{kube_namespace}/pods",
        query={"labelSelector": f"app.kubernetes.io/instance={release.name}"},
    )["items"]
    assert [p["status"]["phase"] for p in pods] == ["Running"]
    assert pods[0]["spec"]["nodeName"] == "process-node"
    # Least privilege, but enough: the operator met no refusal while starting.
    log = process_node.read_pod_log(namespace=kube_namespace, name=pods[0]["metadata"]["name"])
    refusals = [line for line in log.splitlines() if "forbidden" in line.lower()
                or "Not enough permissions" in line]  # fmt: skip
    assert refusals == [], "\n".join(refusals)
    if peering:
        peerings = f"/apis/kopf.dev/v1/namespaces/{kube_namespace}/kopfpeerings"
        wait_for(lambda: kube_rest.get(f"{peerings}/{release.fullname}").get("status"),
                 what="the operator's entry in its KopfPeering", timeout=60)  # fmt: skip
