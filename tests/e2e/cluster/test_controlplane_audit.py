"""The apiserver's audit log counts the requests of the audited identity, and only those."""

from __future__ import annotations

from e2e.controlplane import RestClient
from e2e.controlplane.audit import OPERATOR_USER, count_by_kind, read_audit_records
from e2e.controlplane.controlplane import ControlPlane
from e2e.controlplane.rest import quote
from e2e.controlplane.waiting import wait_for


def operator_rest(plane: ControlPlane) -> RestClient:
    pair = plane.issue_client_cert(name="audit-test-operator", user=OPERATOR_USER,
                                   groups=("system:masters",))
    return RestClient(server=plane.server, ca_file=plane.ca_file, client_cert=pair.cert,
                      client_key=pair.key)


def test_the_audit_log_holds_each_request_of_the_audited_user_once_with_its_verb(
    control_plane: ControlPlane, kube_rest: RestClient, kube_namespace: str
) -> None:
    start = read_audit_records(control_plane.audit_log).end
    operator = operator_rest(control_plane)
    path = f"/api/v1/namespaces/{quote(kube_namespace)}/configmaps"
    operator.request("POST", path, body={"apiVersion": "v1", "kind": "ConfigMap",
                                         "metadata": {"name": "counted"}})
    for _ in range(3):
        operator.get(f"{path}/counted")
    kube_rest.get(f"{path}/counted")  # the admin is not audited

    def counted() -> dict[str, int] | None:
        reading = read_audit_records(control_plane.audit_log, offset=start, user=OPERATOR_USER)
        mine = [r for r in reading.records if r.namespace == kube_namespace]
        kinds = count_by_kind(mine)
        return kinds if sum(kinds.values()) >= 4 else None

    kinds = wait_for(counted, what="the operator's requests in the audit log", timeout=30)
    assert kinds == {"get configmaps": 3, "create configmaps": 1}
    everyone = read_audit_records(control_plane.audit_log, offset=start).records
    assert {record.user for record in everyone} == {OPERATOR_USER}
