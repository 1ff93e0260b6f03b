"""The schema of ``spec.pod``: volumes, mounts, placement and the security contexts.

Volumes and affinity are Kubernetes objects passed to the pod as given, so their
schema keeps unknown fields and the API server checks them when the pod is created;
the security contexts are spelled out, because they adjust the restricted defaults of
``cjob_spec.security`` field by field.
"""

from __future__ import annotations

from collections.abc import Mapping

from cjob_spec import security
from cjob_spec.schema.openapi import (
    ArraySchema,
    BooleanSchema,
    IntegerSchema,
    ObjectSchema,
    Rule,
    Schema,
    StringSchema,
)

TEXT = StringSchema()
FLAG = BooleanSchema()
ID = IntegerSchema(minimum=0, maximum=security.MAX_ID)
"""A user or group id."""


def _texts(*keys: str) -> dict[str, Schema]:
    return {key: TEXT for key in keys}


def _profile(types: tuple[str, ...]) -> ObjectSchema:
    """A seccomp or AppArmor profile: a type, and a file only for ``Localhost``."""
    return ObjectSchema(
        required=("type",),
        properties={"type": StringSchema(enum=types),
                    "localhostProfile": StringSchema(min_length=1)},
        rules=(Rule(rule="(self.type == 'Localhost') == has(self.localhostProfile)",
                    message="localhostProfile is required with type Localhost, and only "
                            "valid with it"),))


SE_LINUX_OPTIONS = ObjectSchema(properties=_texts(*security.SE_LINUX_FIELDS))

POD_SECURITY_FIELDS: Mapping[str, Schema] = {
    "runAsNonRoot": FLAG,
    "runAsUser": ID,
    "runAsGroup": ID,
    "fsGroup": ID,
    "fsGroupChangePolicy": StringSchema(enum=security.FS_GROUP_CHANGE_POLICIES),
    "supplementalGroups": ArraySchema(items=ID),
    "seccompProfile": _profile(security.SECCOMP_TYPES),
    "appArmorProfile": _profile(security.APPARMOR_TYPES),
    "seLinuxOptions": SE_LINUX_OPTIONS,
    "sysctls": ArraySchema(items=ObjectSchema(
        required=("name", "value"),
        properties={"name": StringSchema(pattern=security.SYSCTL_PATTERN.pattern),
                    "value": TEXT})),
}

CAPABILITY_LIST = ArraySchema(items=StringSchema(pattern=security.CAPABILITY_PATTERN.pattern))

CONTAINER_SECURITY_FIELDS: Mapping[str, Schema] = {
    "runAsNonRoot": FLAG,
    "runAsUser": ID,
    "runAsGroup": ID,
    "allowPrivilegeEscalation": FLAG,
    "privileged": FLAG,
    "readOnlyRootFilesystem": FLAG,
    "capabilities": ObjectSchema(properties={"add": CAPABILITY_LIST, "drop": CAPABILITY_LIST}),
    "seccompProfile": _profile(security.SECCOMP_TYPES),
    "appArmorProfile": _profile(security.APPARMOR_TYPES),
    "seLinuxOptions": SE_LINUX_OPTIONS,
    "procMount": StringSchema(enum=security.PROC_MOUNTS),
}

def _template(role: str, container: str) -> ObjectSchema:
    return ObjectSchema(
        description=f"A Pod (metadata and spec) the {role} pods are built on. Everything it "
        "sets stays, except what the operator or Spark sets (name, owners, their labels, "
        "restartPolicy, service account, security contexts, the job container's image, "
        "command, args, resources and ports) or spec.pod gives every pod: such a field is "
        f"refused, with where its value comes from. The job's own container is named "
        f"{container!r}; other containers run beside it.",
        preserve_unknown=True,
        properties={"apiVersion": StringSchema(enum=("v1",)),
                    "kind": StringSchema(enum=("Pod",)),
                    # Kept whole, so that a field the operator sets is refused with
                    # a sentence rather than dropped by the API server.
                    "metadata": ObjectSchema(preserve_unknown=True, properties={
                        "labels": ObjectSchema(values=TEXT),
                        "annotations": ObjectSchema(values=TEXT)}),
                    "spec": ObjectSchema(preserve_unknown=True)})


POD = ObjectSchema(
    description="What every pod of the job runs with: the driver, a standby driver and, "
    "with Spark on Kubernetes, the executors. file:// checkpoint storage must be on a "
    "persistent volume mounted here, or a restarted driver cannot read it.",
    properties={
        "volumes": ArraySchema(
            description="Pod volumes (Kubernetes Volume objects), of the driver and the "
            "executors.",
            items=ObjectSchema(required=("name",), preserve_unknown=True,
                               properties={"name": TEXT})),
        "env": ArraySchema(
            description="Variables of the driver and executor containers (Kubernetes EnvVar "
            "objects: a value, or valueFrom a Secret's or ConfigMap's key).",
            items=ObjectSchema(required=("name",),
                               properties={"name": TEXT, "value": TEXT,
                                           "valueFrom": ObjectSchema(preserve_unknown=True)})),
        "envFrom": ArraySchema(
            description="Every key of a Secret or ConfigMap as variables of the driver and "
            "executor containers (Kubernetes EnvFromSource objects).",
            items=ObjectSchema(properties={
                "prefix": TEXT,
                **{kind: ObjectSchema(required=("name",),
                                      properties={"name": TEXT, "optional": FLAG})
                   for kind in ("secretRef", "configMapRef")}})),
        "imagePullSecrets": ArraySchema(
            description="Secrets the kubelet pulls the job's image with, for every pod of "
            "the job.",
            items=ObjectSchema(required=("name",), properties={"name": TEXT})),
        "driverTemplate": _template("driver and standby", "driver"),
        "executorTemplate": _template("executor", "spark-kubernetes-executor"),
        "volumeMounts": ArraySchema(
            description="Mounts of those volumes into the driver and executor containers.",
            items=ObjectSchema(
                required=("name", "mountPath"),
                properties={"name": TEXT, "mountPath": TEXT, "readOnly": FLAG,
                            **_texts("subPath", "subPathExpr", "mountPropagation",
                                     "recursiveReadOnly")})),
        "nodeSelector": ObjectSchema(
            description="Node labels every pod of the job must match.", values=TEXT),
        "tolerations": ArraySchema(
            description="Tolerations of every pod of the job.",
            items=ObjectSchema(properties={**_texts("key", "operator", "value", "effect"),
                                           "tolerationSeconds": IntegerSchema()})),
        "affinity": ObjectSchema(
            description="Affinity of every pod of the job (a Kubernetes Affinity object).",
            properties={kind: ObjectSchema(preserve_unknown=True)
                        for kind in ("nodeAffinity", "podAffinity", "podAntiAffinity")}),
        "priorityClassName": StringSchema(description="PriorityClass of every pod of the "
                                                         "job."),
        "securityContext": ObjectSchema(
            description="Adjusts the pod security context of the driver and executor pods (a "
            "Kubernetes PodSecurityContext). Defaults, which satisfy the Pod Security "
            "\"restricted\" profile: runAsNonRoot true, runAsUser, runAsGroup and fsGroup "
            f"{security.RUNTIME_UID} (the runtime image's user), seccompProfile "
            "RuntimeDefault. A field set here replaces the default of the same name; the "
            "others stay.",
            properties=POD_SECURITY_FIELDS),
        "containerSecurityContext": ObjectSchema(
            description="Adjusts the security context of the driver and executor containers "
            "(a Kubernetes SecurityContext). Defaults: allowPrivilegeEscalation false, "
            "capabilities drop ALL, runAsNonRoot true, seccompProfile RuntimeDefault. A field "
            "set here replaces the default of the same name, whole.",
            rules=(Rule(rule="!has(self.privileged) || !self.privileged || "
                             "(has(self.allowPrivilegeEscalation) && "
                             "self.allowPrivilegeEscalation)",
                        message="privileged needs allowPrivilegeEscalation true (the default "
                                "is false)"),),
            properties=CONTAINER_SECURITY_FIELDS),
    },
)
