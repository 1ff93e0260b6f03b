"""The chart's ValidatingAdmissionPolicy as a real kube-apiserver enforces it.

Any holder of ``pods/create`` in a job's namespace (another job's driver account, which
creates its executors) must not make a pod the operator would adopt as a job's driver,
standby or cleanup pod, nor write the standby promotion on a job's checkpoint
ConfigMap; the operator's ServiceAccount may. The policy and its binding are rendered
by the pinned helm and applied to the local control plane, bound to one fresh
namespace only, so no other test meets them. Requests impersonate the two accounts,
each given the RBAC rights to write pods and ConfigMaps there, so every refusal seen
here comes from the policy, not from RBAC.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e.controlplane.namespaces import (
    create_test_namespace,
    delete_namespace,
    wait_for_default_service_account,
)
from e2e.controlplane.rest import MERGE_PATCH, ApiError, RestClient, quote
from e2e.controlplane.waiting import wait_for
from e2e.kind.chart import Manifest, render_chart

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
JOB = "clicks"
STORE = f"{JOB}-checkpoints"
PROMOTION = "checkpointed.io/standby-promotion"
OPERATOR_ONLY = "only the checkpointed-jobs operator"
NOWHERE = {"checkpointed.io/test-node": "none"}
"""A node selector no node matches: the pods created here never run."""


@dataclass(frozen=True)
class Guarded:
    """A namespace the chart's policy is bound to, and clients acting in it."""

    namespace: str
    policy: str
    operator_user: str
    operator: RestClient
    neighbour_user: str
    neighbour: RestClient
    admin: RestClient

    def pods(self) -> str:
        return f"/api/v1/namespaces/{quote(self.namespace)}/pods"

    def config_maps(self) -> str:
        return f"/api/v1/namespaces/{quote(self.namespace)}/configmaps"


def service_account_user(namespace: str, name: str) -> tuple[str, list[str]]:
    """The user name and groups the API server gives a ServiceAccount's token."""
    user = f"system:serviceaccount:{namespace}:{name}"
    return user, ["system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                  "system:authenticated"]  # fmt: skip


def pod(name: str, labels: dict[str, str] | None = None) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {
            "nodeSelector": NOWHERE,
            "containers": [{"name": "main", "image": "example.org/none:1"}],
        },
    }


def job_pod(name: str, role: str | None = None) -> Manifest:
    labels = {"checkpointed.io/job": JOB}
    if role is not None:
        labels["checkpointed.io/role"] = role
    return pod(name, labels)


def config_map(
    name: str = STORE, *, labelled: bool = True, annotations: dict[str, str] | None = None
) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {"checkpointed.io/job": JOB} if labelled else {},
            "annotations": dict(annotations or {}),
        },
        "data": {"pointer": "checkpoint-1"},
    }


def create(client: RestClient, path: str, body: Manifest, *, dry_run: bool = False) -> Any:
    return client.request("POST", path, body=body, query={"dryRun": "All"} if dry_run else None)


def merge_patch(client: RestClient, path: str, metadata: dict[str, Any]) -> Any:
    return client.request("PATCH", path, body={"metadata": metadata}, content_type=MERGE_PATCH)


def refusal(action: Any) -> ApiError:
    """The API server's refusal of ``action()``, which must come from the policy."""
    with pytest.raises(ApiError) as refused:
        action()
    return refused.value


def assert_refused_by_the_policy(error: ApiError, guarded: Guarded, *, what: str) -> None:
    """A 403 from the policy, naming what only the operator may do and who asked."""
    assert error.status == 403, error
    assert error.reason == "Forbidden", error
    assert "ValidatingAdmissionPolicy" in error.message, error
    assert f"{OPERATOR_ONLY} ({guarded.operator_user}) may {what}" in error.message, error
    assert error.message.endswith(f", not {guarded.neighbour_user}"), error
    assert "\n" not in error.message


def grant_pods_and_config_maps(admin: RestClient, namespace: str, users: list[str]) -> None:
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{quote(namespace)}"
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "pods-and-config-maps"},
        "rules": [{"apiGroups": [""], "resources": ["pods", "configmaps"],
                   "verbs": ["get", "list", "create", "update", "patch", "delete"]}],
    }  # fmt: skip
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "pods-and-config-maps"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "pods-and-config-maps"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                     for user in users],
    }  # fmt: skip
    admin.request("POST", f"{rbac}/roles", body=role)
    admin.request("POST", f"{rbac}/rolebindings", body=binding)


def is_policy(obj: Manifest) -> bool:
    return obj["kind"] in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def collection(obj: Manifest) -> str:
    plural = {"ValidatingAdmissionPolicy": "validatingadmissionpolicies",
              "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}
    return f"{ADMISSION}/{plural[obj['kind']]}"  # fmt: skip


def is_enforced(guarded: Guarded) -> bool:
    """Whether a standby pod from the neighbour is refused yet (dry run: nothing stays)."""
    try:
        create(guarded.neighbour, guarded.pods(), job_pod("probe", "standby"), dry_run=True)
    except ApiError as exc:
        if exc.status == 403 and OPERATOR_ONLY in exc.message:
            return True
        raise
    return False


@pytest.fixture(scope="module")
def guarded(kube_rest: RestClient, helm_bin: Path, helm_home: Path) -> Iterator[Guarded]:
    namespace = f"t-admission-{secrets.token_hex(4)}"
    create_test_namespace(kube_rest, namespace)
    applied: list[Manifest] = []
    try:
        wait_for_default_service_account(kube_rest, namespace)
        # A release in the namespace, watching only it: the policy binds nowhere else.
        rendered = render_chart(helm=helm_bin, home=helm_home, namespace=namespace,
                                release=f"guard-{secrets.token_hex(3)}",
                                values={"watchNamespaces": [namespace]})  # fmt: skip
        (account,) = [o for o in rendered if o["kind"] == "ServiceAccount"]
        operator, operator_groups = service_account_user(namespace, account["metadata"]["name"])
        neighbour, neighbour_groups = service_account_user(namespace, "job-b-driver")
        grant_pods_and_config_maps(kube_rest, namespace, [operator, neighbour])
        for obj in filter(is_policy, rendered):
            create(kube_rest, collection(obj), obj)
            applied.append(obj)
        result = Guarded(
            namespace=namespace,
            policy=applied[0]["metadata"]["name"],
            operator_user=operator,
            operator=kube_rest.impersonating(operator, operator_groups),
            neighbour_user=neighbour,
            neighbour=kube_rest.impersonating(neighbour, neighbour_groups),
            admin=kube_rest,
        )
        # A new policy takes a moment to reach the admission plugin.
        wait_for(lambda: is_enforced(result), what="the admission policy to be enforced",
                 timeout=60, interval=0.5)  # fmt: skip
        yield result
    finally:
        for obj in reversed(applied):
            try:
                kube_rest.request("DELETE", f"{collection(obj)}/{quote(obj['metadata']['name'])}")
            except ApiError as exc:
                if exc.status != 404:
                    raise
        delete_namespace(kube_rest, namespace)


def fresh(name: str) -> str:
    return f"{name}-{secrets.token_hex(3)}"


# --- the policy itself -----------------------------------------------------------------


def test_the_api_server_type_checks_every_expression_of_the_policy_without_a_warning(
    guarded: Guarded,
) -> None:
    path = f"{ADMISSION}/validatingadmissionpolicies/{quote(guarded.policy)}"

    def checked() -> dict[str, Any] | None:
        found: dict[str, Any] = guarded.admin.get(path)
        status: dict[str, Any] = found.get("status") or {}
        done = status.get("observedGeneration") == found["metadata"]["generation"]
        return status if done and "typeChecking" in status else None

    status = wait_for(checked, what="the policy's type checking", timeout=60)
    assert status["typeChecking"].get("expressionWarnings", []) == []


# --- pods ------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["driver", "standby", "cleanup"])
def test_another_jobs_driver_account_cannot_create_a_pod_with_a_role_only_the_operator_gives(
    guarded: Guarded, role: str
) -> None:
    error = refusal(lambda: create(guarded.neighbour, guarded.pods(),
                                   job_pod(fresh(role), role)))  # fmt: skip
    assert_refused_by_the_policy(
        error, guarded, what="create pods with role driver, standby or cleanup"
    )


def test_even_the_cluster_admin_cannot_create_a_standby_pod(guarded: Guarded) -> None:
    error = refusal(lambda: create(guarded.admin, guarded.pods(), job_pod(fresh("admin"),
                                                                          "standby"),
                                   dry_run=True))  # fmt: skip
    assert error.status == 403
    assert f"{OPERATOR_ONLY} ({guarded.operator_user})" in error.message
    assert error.message.endswith(", not admin")


@pytest.mark.parametrize("role", ["executor", None], ids=["executor", "no-role"])
def test_another_jobs_driver_account_can_create_executors_and_pods_without_a_role(
    guarded: Guarded, role: str | None
) -> None:
    name = fresh(role or "plain")
    created = create(guarded.neighbour, guarded.pods(), job_pod(name, role))
    assert created["metadata"]["name"] == name
    unlabelled = create(guarded.neighbour, guarded.pods(),
                        pod(fresh("unlabelled"), {"checkpointed.io/role": "driver"}),
                        dry_run=True)  # fmt: skip
    # Without the job label the operator never looks at a pod: the policy does not either.
    assert unlabelled["metadata"]["labels"]["checkpointed.io/role"] == "driver"


@pytest.mark.parametrize("role", ["driver", "standby", "cleanup"])
def test_the_operator_account_can_create_driver_standby_and_cleanup_pods(
    guarded: Guarded, role: str
) -> None:
    created = create(guarded.operator, guarded.pods(), job_pod(fresh(role), role), dry_run=True)
    assert created["metadata"]["labels"]["checkpointed.io/role"] == role


def test_another_account_cannot_relabel_its_own_pod_as_a_driver_but_may_change_other_labels(
    guarded: Guarded,
) -> None:
    name = fresh("own")
    create(guarded.neighbour, guarded.pods(), job_pod(name, "executor"))
    path = f"{guarded.pods()}/{name}"
    error = refusal(lambda: merge_patch(guarded.neighbour, path,
                                        {"labels": {"checkpointed.io/role": "driver"}}))  # fmt: skip
    assert_refused_by_the_policy(
        error, guarded, what="give a pod role driver, standby or cleanup or take it away"
    )
    changed = merge_patch(guarded.neighbour, path, {"labels": {"team": "b"},
                                                    "annotations": {"note": "mine"}})  # fmt: skip
    assert changed["metadata"]["labels"]["team"] == "b"
    assert changed["metadata"]["labels"]["checkpointed.io/role"] == "executor"
    # Dropping the executor role (never one of the three) is fine too.
    dropped = merge_patch(guarded.neighbour, path, {"labels": {"checkpointed.io/role": None}})
    assert "checkpointed.io/role" not in dropped["metadata"]["labels"]


def test_a_pod_gaining_the_job_label_and_a_protected_role_in_one_update_is_refused(
    guarded: Guarded,
) -> None:
    """The object selector matches the new object here: the old one had no job label."""
    name = fresh("bare")
    create(guarded.neighbour, guarded.pods(), pod(name))
    path = f"{guarded.pods()}/{name}"
    labels = {"checkpointed.io/job": JOB, "checkpointed.io/role": "standby"}
    error = refusal(lambda: merge_patch(guarded.neighbour, path, {"labels": labels}))
    assert_refused_by_the_policy(
        error, guarded, what="give a pod role driver, standby or cleanup or take it away"
    )
    joined = merge_patch(guarded.neighbour, path, {"labels": {"checkpointed.io/job": JOB}})
    assert joined["metadata"]["labels"] == {"checkpointed.io/job": JOB}


def test_a_standby_pod_made_outside_any_job_cannot_join_one(guarded: Guarded) -> None:
    name = fresh("stray")
    create(guarded.neighbour, guarded.pods(), pod(name, {"checkpointed.io/role": "standby"}))
    path = f"{guarded.pods()}/{name}"
    error = refusal(lambda: merge_patch(guarded.neighbour, path,
                                        {"labels": {"checkpointed.io/job": JOB}}))  # fmt: skip
    assert_refused_by_the_policy(
        error, guarded,
        what="set the checkpointed.io/job label of a pod with role driver, standby or cleanup",
    )  # fmt: skip


def test_another_account_cannot_take_a_role_away_nor_move_the_pod_but_may_edit_the_rest(
    guarded: Guarded,
) -> None:
    name = fresh("standby")
    create(guarded.operator, guarded.pods(), job_pod(name, "standby"))
    path = f"{guarded.pods()}/{name}"
    for labels in ({"checkpointed.io/role": "executor"}, {"checkpointed.io/role": None},
                   {"checkpointed.io/role": "driver"}):  # fmt: skip
        error = refusal(lambda labels=labels: merge_patch(guarded.neighbour, path,
                                                          {"labels": labels}))  # fmt: skip
        assert_refused_by_the_policy(
            error, guarded, what="give a pod role driver, standby or cleanup or take it away"
        )
    error = refusal(lambda: merge_patch(guarded.neighbour, path,
                                        {"labels": {"checkpointed.io/job": "other"}}))  # fmt: skip
    assert_refused_by_the_policy(
        error, guarded,
        what="set the checkpointed.io/job label of a pod with role driver, standby or cleanup",
    )  # fmt: skip
    # What the garbage collector, the kubelet's owners and users do stays allowed.
    edited = merge_patch(guarded.neighbour, path, {"labels": {"team": "b"},
                                                   "annotations": {"note": "x"}})  # fmt: skip
    assert edited["metadata"]["labels"]["checkpointed.io/role"] == "standby"
    replaced = dict(edited)
    replaced["metadata"] = {**edited["metadata"], "annotations": {"note": "y"}}
    put = guarded.neighbour.request("PUT", path, body=replaced)
    assert put["metadata"]["annotations"]["note"] == "y"


def test_the_operator_account_promotes_its_standby_by_relabelling_it(guarded: Guarded) -> None:
    name = fresh("standby")
    create(guarded.operator, guarded.pods(), job_pod(name, "standby"))
    promoted = merge_patch(guarded.operator, f"{guarded.pods()}/{name}",
                           {"labels": {"checkpointed.io/role": "driver"}})  # fmt: skip
    assert promoted["metadata"]["labels"]["checkpointed.io/role"] == "driver"


# --- the checkpoint ConfigMap's promotion annotation ---------------------------------------


def test_another_account_cannot_create_a_job_config_map_holding_a_promotion(
    guarded: Guarded,
) -> None:
    body = config_map(fresh(STORE), annotations={PROMOTION: '{"pod": "evil"}'})
    error = refusal(lambda: create(guarded.neighbour, guarded.config_maps(), body))
    assert_refused_by_the_policy(
        error, guarded, what="write the annotation checkpointed.io/standby-promotion"
    )
    created = create(guarded.operator, guarded.config_maps(), body, dry_run=True)
    assert created["metadata"]["annotations"][PROMOTION] == '{"pod": "evil"}'


def test_another_account_cannot_set_change_or_remove_the_promotion_but_may_write_the_rest(
    guarded: Guarded,
) -> None:
    name = fresh(STORE)
    create(guarded.neighbour, guarded.config_maps(), config_map(name))
    path = f"{guarded.config_maps()}/{name}"
    what = "write the annotation checkpointed.io/standby-promotion"
    error = refusal(lambda: merge_patch(guarded.neighbour, path,
                                        {"annotations": {PROMOTION: '{"pod": "mine"}'}}))  # fmt: skip
    assert_refused_by_the_policy(error, guarded, what=what)

    set_by_operator = merge_patch(guarded.operator, path,
                                  {"annotations": {PROMOTION: '{"pod": "standby-1"}'}})  # fmt: skip
    assert set_by_operator["metadata"]["annotations"][PROMOTION] == '{"pod": "standby-1"}'
    for change in ('{"pod": "mine"}', None, ""):
        error = refusal(lambda change=change: merge_patch(
            guarded.neighbour, path, {"annotations": {PROMOTION: change}}))  # fmt: skip
        assert_refused_by_the_policy(error, guarded, what=what)

    # The driver's compare-and-swap: a whole replace keeping the promotion as it is.
    current = guarded.neighbour.get(path)
    current["data"] = {"pointer": "checkpoint-2"}
    current["metadata"]["annotations"]["example.org/other"] = "now"
    replaced = guarded.neighbour.request("PUT", path, body=current)
    assert replaced["data"] == {"pointer": "checkpoint-2"}
    assert replaced["metadata"]["annotations"][PROMOTION] == '{"pod": "standby-1"}'
    patched = merge_patch(guarded.neighbour, path, {"annotations": {"beacon": "10.0.0.1:1"}})
    assert patched["metadata"]["annotations"]["beacon"] == "10.0.0.1:1"

    changed_by_operator = merge_patch(guarded.operator, path,
                                      {"annotations": {PROMOTION: '{"pod": "standby-2"}'}})  # fmt: skip
    assert changed_by_operator["metadata"]["annotations"][PROMOTION] == '{"pod": "standby-2"}'


def test_a_config_map_holding_a_promotion_made_outside_any_job_cannot_join_one(
    guarded: Guarded,
) -> None:
    name = fresh(STORE)
    stray = config_map(name, labelled=False, annotations={PROMOTION: '{"pod": "evil"}'})
    # Without the job label the operator never reads it: the policy leaves it alone.
    create(guarded.neighbour, guarded.config_maps(), stray)
    path = f"{guarded.config_maps()}/{name}"
    error = refusal(lambda: merge_patch(guarded.neighbour, path,
                                        {"labels": {"checkpointed.io/job": JOB}}))  # fmt: skip
    assert_refused_by_the_policy(
        error, guarded,
        what="set the checkpointed.io/job label of a ConfigMap with a standby promotion",
    )  # fmt: skip
