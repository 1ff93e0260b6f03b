"""The security contexts of a job's pods: restricted by default, adjustable by the spec.

A namespace that enforces the Pod Security "restricted" profile refuses every pod
that does not say, explicitly, that it runs as a non-root user without privilege
escalation, with every capability dropped and the runtime's default seccomp
profile. The driver pod and (through Spark's executor pod template) the executor
pods therefore carry those settings unless ``spec.pod.securityContext`` or
``spec.pod.containerSecurityContext`` change them. The field names are the core
API's (``PodSecurityContext`` and ``SecurityContext``); a field the user sets
replaces the default of the same name, whole (a ``capabilities`` given replaces
the default ``drop: [ALL]``), and the others keep their defaults.

User and group 185 are the runtime image's ``spark`` user; ``fsGroup`` makes mounted
volumes (a PersistentVolumeClaim holding ``file://`` checkpoints) writable by it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cjob_spec.errors import SpecError
from cjob_spec.errors import describe_value as _describe

RUNTIME_UID = 185
"""The ``spark`` user and group of the runtime image (``docker/runtime.Dockerfile``)."""
MAX_ID = 2147483647
"""The largest user or group id the API server accepts."""

DEFAULT_POD_SECURITY_CONTEXT: Mapping[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": RUNTIME_UID,
    "runAsGroup": RUNTIME_UID,
    "fsGroup": RUNTIME_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
DEFAULT_CONTAINER_SECURITY_CONTEXT: Mapping[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}

SECCOMP_TYPES = ("RuntimeDefault", "Localhost", "Unconfined")
APPARMOR_TYPES = ("RuntimeDefault", "Localhost", "Unconfined")
FS_GROUP_CHANGE_POLICIES = ("OnRootMismatch", "Always")
PROC_MOUNTS = ("Default", "Unmasked")
SE_LINUX_FIELDS = ("user", "role", "type", "level")
CAPABILITY_PATTERN = re.compile(r"^[A-Z][A-Z0-9_]*$")
SYSCTL_PATTERN = re.compile(r"^[a-z0-9]([-_a-z0-9]*[a-z0-9])?([./][a-z0-9]([-_a-z0-9]*[a-z0-9])?)*$")

ID_FIELDS = ("runAsUser", "runAsGroup")
POD_FIELDS = ("runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup", "fsGroupChangePolicy",
              "supplementalGroups", "seccompProfile", "appArmorProfile", "seLinuxOptions",
              "sysctls")
CONTAINER_FIELDS = ("runAsNonRoot", "runAsUser", "runAsGroup", "allowPrivilegeEscalation",
                    "privileged", "readOnlyRootFilesystem", "capabilities", "seccompProfile",
                    "appArmorProfile", "seLinuxOptions", "procMount")


def pod_security_context(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The driver's and executors' pod ``securityContext``: the defaults, then the spec's."""
    return _merged(DEFAULT_POD_SECURITY_CONTEXT, overrides)


def container_security_context(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The driver's and executors' container ``securityContext``."""
    return _merged(DEFAULT_CONTAINER_SECURITY_CONTEXT, overrides)


def _merged(defaults: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    result = _copy(defaults)
    result.update(_copy(overrides))
    return result


def _copy(document: Mapping[str, Any]) -> dict[str, Any]:
    def copy(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {key: copy(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [copy(item) for item in value]
        return value

    return {key: copy(item) for key, item in document.items()}


# --- validation ----------------------------------------------------------------------


def read_pod_security_context(value: object, path: str) -> dict[str, Any]:
    """Check ``spec.pod.securityContext`` and return it as given (the user's overrides)."""
    fields = _mapping(value, path, POD_FIELDS)
    for key, item in fields.items():
        at = f"{path}.{key}"
        if key in (*ID_FIELDS, "fsGroup"):
            _id(item, at)
        elif key == "runAsNonRoot":
            _boolean(item, at)
        elif key == "fsGroupChangePolicy":
            _choice(item, at, FS_GROUP_CHANGE_POLICIES)
        elif key == "supplementalGroups":
            for index, group in enumerate(_list(item, at)):
                _id(group, f"{at}[{index}]")
        elif key == "sysctls":
            _sysctls(item, at)
        else:
            _common(key, item, at)
    return fields


def read_container_security_context(value: object, path: str) -> dict[str, Any]:
    """Check ``spec.pod.containerSecurityContext`` and return it as given."""
    fields = _mapping(value, path, CONTAINER_FIELDS)
    for key, item in fields.items():
        at = f"{path}.{key}"
        if key in ID_FIELDS:
            _id(item, at)
        elif key in ("runAsNonRoot", "allowPrivilegeEscalation", "privileged",
                     "readOnlyRootFilesystem"):
            _boolean(item, at)
        elif key == "capabilities":
            _capabilities(item, at)
        elif key == "procMount":
            _choice(item, at, PROC_MOUNTS)
        else:
            _common(key, item, at)
    return fields


def check_security_contexts(
    *, pod: Mapping[str, Any], container: Mapping[str, Any], path: str
) -> None:
    """Refuse combinations that could never start, as the kubelet or API server would.

    ``runAsNonRoot`` with user 0 is refused by the kubelet at container start (the pod
    would hang in CreateContainerConfigError); ``privileged`` without privilege
    escalation is refused by the API server.
    """
    pod_context = pod_security_context(pod)
    container_context = container_security_context(container)
    non_root = container_context.get("runAsNonRoot", pod_context.get("runAsNonRoot"))
    user = container_context.get("runAsUser", pod_context.get("runAsUser"))
    if non_root is True and user == 0:
        where = "containerSecurityContext" if "runAsUser" in container else "securityContext"
        raise SpecError(
            field=f"{path}.{where}.runAsUser",
            problem="is 0 (root) while runAsNonRoot is true: the container could never start",
            hint="set runAsNonRoot: false as well to run as root",
        )
    if container_context.get("privileged") is True and (
        container_context.get("allowPrivilegeEscalation") is False
    ):
        raise SpecError(
            field=f"{path}.containerSecurityContext.privileged",
            problem="needs allowPrivilegeEscalation: true (the default here is false)",
        )


def _common(key: str, item: object, at: str) -> None:
    if key == "seccompProfile":
        _profile(item, at, SECCOMP_TYPES)
    elif key == "appArmorProfile":
        _profile(item, at, APPARMOR_TYPES)
    elif key == "seLinuxOptions":
        fields = _mapping(item, at, SE_LINUX_FIELDS)
        for name, text in fields.items():
            _string(text, f"{at}.{name}")
    else:  # pragma: no cover - the field lists and the readers agree
        raise AssertionError(key)


def _mapping(value: object, path: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(field=path, problem=f"must be a mapping, got {_describe(value)}")
    result: dict[str, Any] = {}
    for key, item in value.items():
        if key not in allowed:
            lowered = {name.lower(): name for name in allowed}
            close = lowered.get(str(key).lower())
            raise SpecError(
                field=f"{path}.{key}",
                problem="unknown field",
                hint=f"did you mean {close!r}?" if close else f"known: {', '.join(allowed)}",
            )
        if item is not None:   # null counts as absent, as everywhere in the spec
            result[str(key)] = item
    return result


def _id(value: object, at: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(field=at, problem=f"must be an integer id, got {_describe(value)}")
    if not 0 <= value <= MAX_ID:
        raise SpecError(field=at, problem=f"must be between 0 and {MAX_ID}, got {value}")


def _boolean(value: object, at: str) -> None:
    if not isinstance(value, bool):
        raise SpecError(field=at, problem=f"must be true or false, got {_describe(value)}")


def _string(value: object, at: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SpecError(field=at, problem=f"must be a non-empty string, got {_describe(value)}")
    return value


def _choice(value: object, at: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise SpecError(
            field=at, problem=f"must be one of {', '.join(choices)}, got {_describe(value)}"
        )


def _list(value: object, at: str) -> list[Any]:
    if not isinstance(value, list):
        raise SpecError(field=at, problem=f"must be a list, got {_describe(value)}")
    return value


def _profile(value: object, at: str, types: tuple[str, ...]) -> None:
    fields = _mapping(value, at, ("type", "localhostProfile"))
    if "type" not in fields:
        raise SpecError(field=f"{at}.type", problem="required field is missing")
    _choice(fields["type"], f"{at}.type", types)
    localhost = fields["type"] == "Localhost"
    if localhost and "localhostProfile" not in fields:
        raise SpecError(field=f"{at}.localhostProfile", problem="is required with type Localhost")
    if not localhost and "localhostProfile" in fields:
        raise SpecError(field=f"{at}.localhostProfile", problem="is only valid with type Localhost")
    if localhost:
        _string(fields["localhostProfile"], f"{at}.localhostProfile")


def _capabilities(value: object, at: str) -> None:
    fields = _mapping(value, at, ("add", "drop"))
    for key, names in fields.items():
        for index, name in enumerate(_list(names, f"{at}.{key}")):
            if not isinstance(name, str) or not CAPABILITY_PATTERN.match(name):
                raise SpecError(
                    field=f"{at}.{key}[{index}]",
                    problem=f"must be a capability name like NET_BIND_SERVICE or ALL, "
                    f"got {_describe(name)}",
                )


def _sysctls(value: object, at: str) -> None:
    for index, item in enumerate(_list(value, at)):
        fields = _mapping(item, f"{at}[{index}]", ("name", "value"))
        name = _string(fields.get("name"), f"{at}[{index}].name")
        if not SYSCTL_PATTERN.match(name):
            raise SpecError(field=f"{at}[{index}].name",
                            problem=f"must be a sysctl name like net.core.somaxconn, got {name!r}")
        if not isinstance(fields.get("value"), str):
            raise SpecError(field=f"{at}[{index}].value",
                            problem=f"must be a string, got {_describe(fields.get('value'))}",
                            hint="quote it")


