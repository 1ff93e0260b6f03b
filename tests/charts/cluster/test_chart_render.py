"""The chart rendered by the pinned helm: lint, schema enforcement, and the objects each
combination of values produces (labels, security, arguments, RBAC, monitoring)."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cjob_operator.builders import build_role
from cjob_operator.options import parse_options

from cjob_spec import parse_job
from e2e.kind.chart import (
    CHART_DIR,
    HelmCommandError,
    Manifest,
    helm_environment,
    lint_chart,
    run_command,
)

Render = Callable[..., list[Manifest]]
FULL_VALUES = CHART_DIR / "ci" / "full-values.yaml"
CHART = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
STANDARD_LABEL_KEYS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)


def of_kind(objects: list[Manifest], kind: str) -> list[Manifest]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[Manifest], kind: str) -> Manifest:
    found = of_kind(objects, kind)
    assert len(found) == 1, f"{len(found)} objects of kind {kind}"
    return found[0]


def operator_cluster_role(objects: list[Manifest]) -> Manifest:
    """The operator's own ClusterRole, not the ones aggregated into the default roles."""
    found = [o for o in of_kind(objects, "ClusterRole")
             if not any(k.startswith("rbac.authorization.k8s.io/aggregate-to-")
                        for k in o["metadata"]["labels"])]
    assert len(found) == 1, f"{len(found)} operator ClusterRoles"
    return found[0]


def container(objects: list[Manifest]) -> dict[str, Any]:
    result: dict[str, Any] = one(objects, "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]
    return result


def rules_grant(rules: list[dict[str, Any]], *, group: str, resource: str, verb: str) -> bool:
    return any(
        group in r.get("apiGroups", [])
        and resource in r.get("resources", [])
        and verb in r.get("verbs", [])
        and not r.get("resourceNames")
        for r in rules
    )


# --- lint and schema -------------------------------------------------------------------


def test_helm_lint_passes_with_the_default_values(helm_bin: Path, helm_home: Path) -> None:
    report = lint_chart(helm=helm_bin, home=helm_home)
    assert "0 chart(s) failed" in report


def test_helm_lint_passes_with_every_feature_switched_on(
    helm_bin: Path, helm_home: Path
) -> None:
    report = lint_chart(helm=helm_bin, home=helm_home, values_files=[FULL_VALUES])
    assert "0 chart(s) failed" in report


@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"replicaCount": "two"}, "replicaCount"),
        ({"replicas": 2}, "replicas"),
        ({"image": {"repository": "x", "pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"watchNamespaces": ["Not_A_Namespace"]}, "watchNamespaces"),
        ({"rbac": {"create": True, "readSecrets": True}}, "readSecrets"),
        ({"admissionPolicy": {"enabled": "yes"}}, "admissionPolicy"),
    ],
    ids=["replica-count-as-a-word", "unknown-top-level-key", "bad-pull-policy",
         "invalid-namespace-name", "secret-reads-are-gone", "admission-policy-as-a-word"],
)  # fmt: skip
def test_helm_refuses_values_the_schema_forbids(
    render: Render, values: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(HelmCommandError) as failure:
        render(values)
    assert "schema" in failure.value.stderr
    assert complaint in failure.value.stderr


def test_a_missing_service_account_name_is_refused_when_the_chart_does_not_create_it(
    render: Render,
) -> None:
    with pytest.raises(HelmCommandError) as failure:
        render({"serviceAccount": {"create": False}})
    assert "serviceAccount.name is required" in failure.value.stderr


# --- what gets rendered --------------------------------------------------------------


def test_the_defaults_render_the_operator_its_account_rbac_metrics_and_admission_policy(
    render: Render,
) -> None:
    kinds = sorted(o["kind"] for o in render())
    assert kinds == sorted(
        ["Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service",
         "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
         "ClusterRole", "ClusterRole"]  # the rights aggregated into admin/edit and view
    )  # fmt: skip


def test_the_default_roles_may_use_jobs_snapshots_and_kubectl_scale_but_never_write_status(
    render: Render,
) -> None:
    aggregated = {
        tuple(sorted(k for k in o["metadata"]["labels"] if k.startswith("rbac."))): o["rules"]
        for o in render() if o["kind"] == "ClusterRole"
        and any(k.startswith("rbac.authorization.k8s.io/aggregate-to-")
                for k in o["metadata"]["labels"])}
    edit = aggregated[("rbac.authorization.k8s.io/aggregate-to-admin",
                       "rbac.authorization.k8s.io/aggregate-to-edit")]
    view = aggregated[("rbac.authorization.k8s.io/aggregate-to-view",)]
    for rules, verbs in ((edit, {"create", "patch", "delete"}), (view, {"get", "list"})):
        resources = {r for rule in rules for r in rule["resources"]}
        assert resources == {"checkpointedjobs", "checkpointedjobs/scale",
                             "checkpointedjobsnapshots"}
        assert verbs <= {v for rule in rules for v in rule["verbs"]}
    assert not {v for rule in view for v in rule["verbs"]} & {"create", "patch", "delete"}


def test_every_feature_renders_monitors_dashboard_peering_and_policy_but_no_rbac(
    render: Render,
) -> None:
    objects = render(values_files=[FULL_VALUES])
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(
        ["Deployment", "ServiceAccount", "Service", "ServiceMonitor", "PodMonitor",
         "ConfigMap", "KopfPeering", "KopfPeering", "PodDisruptionBudget", "PrometheusRule",
         "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    )  # fmt: skip
    assert {p["metadata"]["namespace"] for p in of_kind(objects, "KopfPeering")} == {
        "team-a",
        "team-b",
    }


def test_several_replicas_get_a_disruption_budget_over_exactly_the_operator_pods(
    render: Render,
) -> None:
    objects = render({"replicaCount": 3, "podDisruptionBudget": {"enabled": True,
                                                                 "maxUnavailable": 2}})
    budget = one(objects, "PodDisruptionBudget")
    deployment = one(objects, "Deployment")
    assert budget["spec"]["maxUnavailable"] == 2
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert budget["metadata"]["namespace"] == deployment["metadata"]["namespace"]


@pytest.mark.parametrize("values", [{}, {"replicaCount": 1, "peering": {"enabled": True}},
                                    {"replicaCount": 2, "podDisruptionBudget": {
                                        "enabled": False, "maxUnavailable": 1}}],
                         ids=["one-replica", "one-replica-peering", "switched-off"])
def test_no_disruption_budget_blocks_the_drain_of_a_single_operator_pod(
    render: Render, values: dict[str, Any]
) -> None:
    assert of_kind(render(values), "PodDisruptionBudget") == []


@pytest.mark.parametrize("values_file", [None, FULL_VALUES], ids=["defaults", "full"])
def test_every_object_carries_the_standard_labels(
    render: Render, values_file: Path | None
) -> None:
    objects = render(values_files=[values_file] if values_file else [], release="prod")
    for obj in objects:
        labels = obj["metadata"]["labels"]
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        for key in STANDARD_LABEL_KEYS:
            assert key in labels, f"{where} lacks {key}"
        assert labels["app.kubernetes.io/name"] == "checkpointed-jobs", where
        assert labels["app.kubernetes.io/instance"] == "prod", where
        assert labels["app.kubernetes.io/version"] == CHART["appVersion"], where
        assert labels["app.kubernetes.io/managed-by"] == "Helm", where
        assert labels["helm.sh/chart"] == f"checkpointed-jobs-{CHART['version']}", where


def test_the_pods_carry_the_standard_labels_and_match_the_selectors(render: Render) -> None:
    objects = render(values_files=[FULL_VALUES])
    deployment = one(objects, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    for key in STANDARD_LABEL_KEYS:
        assert key in pod_labels
    assert pod_labels["team"] == "data"  # podLabels
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    # The selector holds only labels that never change across upgrades.
    assert set(selector) == {"app.kubernetes.io/name", "app.kubernetes.io/instance"}
    service = one(objects, "Service")
    assert service["spec"]["selector"].items() <= pod_labels.items()
    monitor = one(objects, "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"][
        "labels"
    ].items()


def test_a_release_named_after_the_chart_does_not_repeat_the_name(render: Render) -> None:
    names = {o["metadata"]["name"] for o in render(release="checkpointed-jobs")}
    assert "checkpointed-jobs" in names
    assert not any("checkpointed-jobs-checkpointed-jobs" in n for n in names)


def test_the_operator_runs_locked_down(render: Render) -> None:
    objects = render()
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = container(objects)
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    # The read-only root still gets a writable /tmp.
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert c["resources"]["limits"]["memory"]


def test_the_probes_ask_the_health_port_the_operator_listens_on(render: Render) -> None:
    c = container(render({"health": {"port": 9999}}))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["health"] == 9999
    assert "--health-port=9999" in c["args"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "health"}


def test_by_default_the_operator_watches_all_namespaces_standalone(render: Render) -> None:
    objects = render()
    c = container(objects)
    assert c["command"] == ["python", "-m", "cjob_operator"]
    assert c["args"] == [
        "--all-namespaces",
        "--standalone",
        "--metrics-port=8080",
        "--health-port=8081",
        f"--runtime-image=checkpointed-jobs/runtime:{CHART['appVersion']}",
    ]
    # Without peering two operators must never overlap during an upgrade.
    assert one(objects, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}
    env = {e["name"]: e for e in c["env"]}
    assert env["CJOB_LOG_LEVEL"]["value"] == "INFO"
    for name in ("POD_ID", "POD_NAME"):  # kopf's peering identity, the operator's own
        assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


@pytest.mark.parametrize(
    "values",
    [{}, {"watchNamespaces": ["team-a", "team-b"], "replicaCount": 2},
     {"peering": {"enabled": True}, "logLevel": "DEBUG", "metrics": {"port": 9100}},
     {"networkPolicy": {"enabled": False}}],
    ids=["defaults", "namespaced-peering", "cluster-peering-debug", "no-network-policies"],
)  # fmt: skip
def test_the_operator_accepts_the_arguments_the_chart_gives_it(
    render: Render, values: dict[str, Any]
) -> None:
    c = container(render(values, release="cjob"))
    assert c["command"] == ["python", "-m", "cjob_operator"]
    options = parse_options(c["args"])
    assert options.namespaces == tuple(values.get("watchNamespaces", ()))
    assert options.all_namespaces is not bool(values.get("watchNamespaces"))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert (options.metrics_port, options.health_port) == (ports["metrics"], ports["health"])
    peering = bool(values.get("replicaCount", 1) > 1 or values.get("peering", {}).get("enabled"))
    assert options.peering == ("cjob-checkpointed-jobs" if peering else None)
    assert options.standalone is (not peering)
    assert options.verbose is (values.get("logLevel") == "DEBUG")
    assert options.network_policies is values.get("networkPolicy", {}).get("enabled", True)


def test_the_runtime_image_reaches_the_operator_with_the_app_version_as_its_tag(
    render: Render,
) -> None:
    default = f"checkpointed-jobs/runtime:{CHART['appVersion']}"
    args = container(render())["args"]
    assert f"--runtime-image={default}" in args
    assert parse_options(args, environ={}).runtime_image == default
    tagged = container(render({"runtimeImage": {"repository": "team/runtime", "tag": "2.0"}}))
    assert parse_options(tagged["args"], environ={}).runtime_image == "team/runtime:2.0"


def test_an_empty_runtime_image_repository_leaves_the_operator_without_a_default(
    render: Render,
) -> None:
    args = container(render({"runtimeImage": {"repository": ""}}))["args"]
    assert not any(arg.startswith("--runtime-image") for arg in args)
    assert parse_options(args, environ={}).runtime_image is None


def test_the_image_tag_defaults_to_the_app_version(render: Render) -> None:
    assert container(render())["image"] == f"checkpointed-jobs/operator:{CHART['appVersion']}"
    c = container(render({"image": {"repository": "r.example/op", "tag": "1.2.3",
                                    "pullPolicy": "Always"}}))  # fmt: skip
    assert (c["image"], c["imagePullPolicy"]) == ("r.example/op:1.2.3", "Always")


def test_watched_namespaces_become_flags_and_one_role_per_namespace(render: Render) -> None:
    objects = render({"watchNamespaces": ["team-a", "team-b"]}, namespace="ops")
    args = container(objects)["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args
    assert "--all-namespaces" not in args
    roles = of_kind(objects, "Role")
    bindings = of_kind(objects, "RoleBinding")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    account = one(objects, "ServiceAccount")["metadata"]
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": account["name"], "namespace": "ops"}
        ]
        assert binding["roleRef"]["name"] == roles[0]["metadata"]["name"]
    # Cluster scope keeps only what kopf needs there (reading CRDs and namespaces) and
    # reading the node of a driver (a node that stopped reporting ends its attempt).
    cluster_rules = operator_cluster_role(objects)["rules"]
    assert [r["resources"] for r in cluster_rules] == [
        ["customresourcedefinitions"],
        ["nodes"],
        ["namespaces"],
    ]
    assert set(cluster_rules[0]["verbs"]) == {"get", "list", "watch"}
    assert set(cluster_rules[1]["verbs"]) == {"get"}
    assert set(cluster_rules[2]["verbs"]) == {"list", "watch"}


def test_the_cluster_role_of_an_all_namespaces_operator_holds_the_namespaced_rules(
    render: Render,
) -> None:
    rules = operator_cluster_role(render())["rules"]
    for resource, verb in [("pods", "create"), ("configmaps", "update"),
                           ("roles", "create"), ("rolebindings", "delete")]:  # fmt: skip
        group = "rbac.authorization.k8s.io" if resource.startswith("role") else ""
        assert rules_grant(rules, group=group, resource=resource, verb=verb)
    assert rules_grant(rules, group="checkpointed.io", resource="checkpointedjobs/status",
                       verb="patch")  # fmt: skip


def test_the_operator_gets_no_broad_or_dangerous_rights(render: Render) -> None:
    for values in ({}, {"watchNamespaces": ["team-a"], "replicaCount": 2}):
        objects = render(values)
        rules = [r for o in objects if o["kind"] in ("Role", "ClusterRole") for r in o["rules"]]
        for rule in rules:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), rule
        # A driver's node is read by name, to see that it stopped reporting; nodes are
        # never listed, watched or changed.
        for verb in ("list", "watch", "update", "patch", "delete"):
            assert not rules_grant(rules, group="", resource="nodes", verb=verb), verb


@pytest.mark.parametrize(
    "values",
    [{}, {"watchNamespaces": ["team-a"], "replicaCount": 2}, "full"],
    ids=["defaults", "namespaced", "every-feature"],
)
def test_no_values_let_the_operator_read_or_change_a_secret(
    render: Render, values: dict[str, Any] | str
) -> None:
    """Deleting checkpoint data is the cleanup pod's job: the kubelet hands it the
    credentials, so the operator never reads a Secret. It only creates each k8s job's
    Spark RPC key, and never touches one that exists."""
    chosen = yaml.safe_load(FULL_VALUES.read_text()) if values == "full" else values
    objects = render({**chosen, "rbac": {"create": True}})
    rules = [r for o in objects if o["kind"] in ("Role", "ClusterRole") for r in o["rules"]]
    assert rules
    for verb in ("get", "list", "watch", "update", "patch", "delete", "deletecollection"):
        assert not rules_grant(rules, group="", resource="secrets", verb=verb), verb
    assert rules_grant(rules, group="", resource="secrets", verb="create")


@pytest.mark.parametrize("master", ["k8s", "local[2]"])
def test_the_operator_holds_every_right_it_grants_a_driver(render: Render, master: str) -> None:
    """Kubernetes refuses a Role (and a binding to it) that grants more than its creator
    holds; the chart avoids 'escalate' by holding the driver's rights itself."""
    job = parse_job({
        "apiVersion": "checkpointed.io/v1alpha1",
        "kind": "CheckpointedJob",
        "metadata": {"name": "clicks", "namespace": "team-a", "uid": "u-1"},
        "spec": {
            "image": "example.org/clicks:1.0",
            "job": {"entrypoint": "clicks.job:build"},
            "spark": {"master": master},
            "checkpoint": {"storage": "s3://ckpt/jobs"},
        },
    })  # fmt: skip
    driver_rules = build_role(job)["rules"]
    for values in ({}, {"watchNamespaces": ["team-a"]}):
        objects = render(values)
        held = [r for o in objects if o["kind"] in ("Role", "ClusterRole") for r in o["rules"]]
        for rule in driver_rules:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert rules_grant(held, group=group, resource=resource, verb=verb), (
                            f"the operator cannot grant {verb} {resource}.{group} "
                            f"(values {values})"
                        )


def test_several_replicas_switch_on_cluster_peering_and_rolling_updates(
    render: Render,
) -> None:
    objects = render({"replicaCount": 2}, release="cjob")
    args = container(objects)["args"]
    assert "--peering=cjob-checkpointed-jobs" in args and "--standalone" not in args
    peering = one(objects, "ClusterKopfPeering")
    assert peering["metadata"]["name"] == "cjob-checkpointed-jobs"
    strategy = one(objects, "Deployment")["spec"]["strategy"]
    assert strategy["type"] == "RollingUpdate"
    assert strategy["rollingUpdate"]["maxUnavailable"] == 0
    rules = operator_cluster_role(objects)["rules"]
    assert rules_grant(rules, group="kopf.dev", resource="clusterkopfpeerings", verb="patch")
    assert not rules_grant(rules, group="kopf.dev", resource="kopfpeerings", verb="patch")


def test_peering_can_be_switched_on_for_one_replica_with_a_chosen_name(
    render: Render,
) -> None:
    objects = render({"peering": {"enabled": True, "name": "ops-peering"},
                      "watchNamespaces": ["team-a"]})  # fmt: skip
    assert "--peering=ops-peering" in container(objects)["args"]
    peering = one(objects, "KopfPeering")
    assert (peering["metadata"]["name"], peering["metadata"]["namespace"]) == (
        "ops-peering",
        "team-a",
    )
    assert not of_kind(objects, "ClusterKopfPeering")
    role = one(objects, "Role")
    assert rules_grant(role["rules"], group="kopf.dev", resource="kopfpeerings", verb="patch")


def test_without_rbac_create_no_rbac_objects_are_rendered(render: Render) -> None:
    objects = render({"rbac": {"create": False}, "watchNamespaces": ["team-a"]})
    assert not [o for o in objects if o["kind"] in
                ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")]  # fmt: skip


def test_an_existing_service_account_is_used_and_not_created(render: Render) -> None:
    objects = render({"serviceAccount": {"create": False, "name": "platform-operator"}})
    assert not of_kind(objects, "ServiceAccount")
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "platform-operator"
    binding = one(objects, "ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == "platform-operator"


def test_the_metrics_service_exposes_the_operators_metrics_port(render: Render) -> None:
    objects = render({"metrics": {"port": 9100, "service": {"type": "ClusterIP", "port": 80},
                                  "serviceMonitor": {"enabled": True},
                                  "podMonitor": {"enabled": False}}})  # fmt: skip
    c = container(objects)
    assert "--metrics-port=9100" in c["args"]
    assert {"name": "metrics", "containerPort": 9100, "protocol": "TCP"} in c["ports"]
    port = one(objects, "Service")["spec"]["ports"][0]
    assert (port["port"], port["targetPort"]) == (80, "metrics")
    endpoint = one(objects, "ServiceMonitor")["spec"]["endpoints"][0]
    assert (endpoint["port"], endpoint["path"]) == ("metrics", "/metrics")


def test_the_pod_monitor_scrapes_the_driver_pods_of_the_managed_namespaces(
    render: Render,
) -> None:
    enabled = {"podMonitor": {"enabled": True}}
    everywhere = one(render({"metrics": enabled}), "PodMonitor")["spec"]
    assert everywhere["namespaceSelector"] == {"any": True}
    assert everywhere["selector"]["matchLabels"]["checkpointed.io/role"] == "driver"
    assert everywhere["podMetricsEndpoints"][0]["port"] == "metrics"
    # A driver runs the user's code: its series must not overwrite the target's labels
    # (its namespace among them).
    assert not everywhere["podMetricsEndpoints"][0].get("honorLabels", False)
    some = one(render({"metrics": enabled, "watchNamespaces": ["team-a"]}), "PodMonitor")
    assert some["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}


def test_the_dashboard_config_map_holds_the_dashboard_for_the_grafana_sidecar(
    render: Render,
) -> None:
    objects = render({"grafana": {"dashboard": {"enabled": True, "namespace": "monitoring"}}})
    config_map = one(objects, "ConfigMap")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "monitoring"
    (content,) = config_map["data"].values()
    expected = json.loads((CHART_DIR / "dashboards" / "checkpointed-jobs.json").read_text())
    assert json.loads(content) == expected


def test_extra_arguments_and_environment_are_passed_through(render: Render) -> None:
    c = container(render({"extraArgs": ["--dev"], "logLevel": "DEBUG",
                          "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://p:3128"}]}))  # fmt: skip
    assert c["args"][-2:] == ["--verbose", "--dev"]  # DEBUG turns on verbose logging
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["HTTPS_PROXY"] == "http://p:3128"
    assert env["CJOB_LOG_LEVEL"] == "DEBUG"


def test_the_chart_crds_are_included_for_install(render: Render) -> None:
    crds = of_kind(render(include_crds=True), "CustomResourceDefinition")
    assert sorted(c["metadata"]["name"] for c in crds) == [
        "checkpointedjobs.checkpointed.io",
        "checkpointedjobsnapshots.checkpointed.io",
        "clusterkopfpeerings.kopf.dev",
        "kopfpeerings.kopf.dev",
    ]


def test_the_packaged_chart_holds_the_dashboard_and_crds_but_not_the_test_inputs(
    helm_bin: Path, helm_home: Path, tmp_path: Path
) -> None:
    run_command([str(helm_bin), "package", str(CHART_DIR), "--destination", str(tmp_path)],
                env=helm_environment(home=helm_home))  # fmt: skip
    (archive,) = tmp_path.glob("checkpointed-jobs-*.tgz")
    assert archive.name == f"checkpointed-jobs-{CHART['version']}.tgz"
    with tarfile.open(archive) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames()}
    for wanted in ("Chart.yaml", "values.yaml", "values.schema.json", "README.md",
                   "crds/checkpointedjob.yaml", "crds/kopf-peerings.yaml",
                   "dashboards/checkpointed-jobs.json", "templates/NOTES.txt"):  # fmt: skip
        assert wanted in names, wanted
    assert not [n for n in names if n.startswith("ci/")]


# --- the admission policy ---------------------------------------------------------------


def operator_user(objects: list[Manifest], namespace: str) -> str:
    """The user name of the operator's ServiceAccount, as the API server knows it."""
    account = one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    return f"system:serviceaccount:{namespace}:{account}"


def policy_variables(policy: Manifest) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


def test_the_admission_policy_and_its_binding_are_rendered_by_default_for_every_namespace(
    render: Render,
) -> None:
    objects = render(release="prod")
    policy = one(objects, "ValidatingAdmissionPolicy")
    binding = one(objects, "ValidatingAdmissionPolicyBinding")
    assert policy["apiVersion"] == binding["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert policy["metadata"]["name"] == "prod-checkpointed-jobs-operator-only"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert "matchResources" not in binding["spec"]  # every namespace
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["objectSelector"] == {
        "matchExpressions": [{"key": "checkpointed.io/job", "operator": "Exists"}]
    }
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == [""]
    assert sorted(rule["resources"]) == ["configmaps", "pods"]  # no subresources
    assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]


@pytest.mark.parametrize(
    ("values", "account"),
    [({}, "prod-checkpointed-jobs"),
     ({"serviceAccount": {"create": True, "name": "cjob-operator"}}, "cjob-operator"),
     ({"serviceAccount": {"create": False, "name": "platform-operator"}}, "platform-operator")],
    ids=["release-name", "chosen-name", "existing-account"],
)  # fmt: skip
def test_the_admission_policy_lets_only_the_operator_account_of_the_release_through(
    render: Render, values: dict[str, Any], account: str
) -> None:
    objects = render(values, release="prod", namespace="ops")
    user = f"system:serviceaccount:ops:{account}"
    assert operator_user(objects, "ops") == user
    policy = one(objects, "ValidatingAdmissionPolicy")
    variables = policy_variables(policy)
    assert variables["operator"] == json.dumps(user)
    assert variables["isOperator"] == "request.userInfo.username == variables.operator"
    for validation in policy["spec"]["validations"]:
        assert "variables.isOperator" in validation["expression"]
        assert validation["reason"] == "Forbidden"
        assert user in validation["message"]
        assert "\n" not in validation["message"]
        assert validation["message"].startswith(f"only the checkpointed-jobs operator ({user})")


def test_the_admission_policy_guards_the_three_roles_and_the_promotion_annotation(
    render: Render,
) -> None:
    policy = one(render(), "ValidatingAdmissionPolicy")
    variables = policy_variables(policy)
    for name in ("newRoleProtected", "oldRoleProtected"):
        assert "['driver', 'standby', 'cleanup']" in variables[name]
    assert "executor" not in json.dumps(policy["spec"]["variables"])
    for name in ("newPromotion", "oldPromotion"):
        assert "'checkpointed.io/standby-promotion'" in variables[name]
    messages = " ".join(v["message"] for v in policy["spec"]["validations"])
    assert "may create pods with role driver, standby or cleanup" in messages
    assert "may write the annotation checkpointed.io/standby-promotion" in messages


def test_the_admission_policy_binding_follows_the_watched_namespaces(render: Render) -> None:
    objects = render({"watchNamespaces": ["team-a", "team-b"]})
    binding = one(objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["matchResources"] == {
        "namespaceSelector": {
            "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                  "values": ["team-a", "team-b"]}]
        }
    }  # fmt: skip


@pytest.mark.parametrize("values", [{}, {"watchNamespaces": ["team-a"]}], ids=["all", "some"])
def test_no_admission_policy_is_rendered_when_it_is_switched_off(
    render: Render, values: dict[str, Any]
) -> None:
    objects = render({**values, "admissionPolicy": {"enabled": False}})
    assert not of_kind(objects, "ValidatingAdmissionPolicy")
    assert not of_kind(objects, "ValidatingAdmissionPolicyBinding")
    assert of_kind(objects, "Deployment")
