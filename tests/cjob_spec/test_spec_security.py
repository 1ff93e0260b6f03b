"""spec.pod.securityContext and containerSecurityContext: restricted defaults that the
user may adjust, checked with one-line errors by the parser and the same bounds by the
CRD schema."""

from __future__ import annotations

from typing import Any

import pytest
from spec_documents import minimal, with_field
from test_crd import SCHEMA, apply_defaults, validate

from cjob_spec import SpecError, parse_job
from cjob_spec.security import container_security_context, pod_security_context

POD = "spec.pod.securityContext"
CONTAINER = "spec.pod.containerSecurityContext"


def contexts(document: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    pod = parse_job(document).spec.pod
    return (pod_security_context(pod.security_context),
            container_security_context(pod.container_security_context))


# --- defaults and adjustments ---------------------------------------------------------


def test_a_job_without_settings_runs_restricted_as_the_runtime_images_user() -> None:
    pod, container = contexts(minimal())
    assert pod == {"runAsNonRoot": True, "runAsUser": 185, "runAsGroup": 185, "fsGroup": 185,
                   "seccompProfile": {"type": "RuntimeDefault"}}
    assert container == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                         "runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def test_a_field_the_user_sets_replaces_its_default_and_the_others_stay() -> None:
    document = with_field(minimal(), POD, {"runAsUser": 1000, "fsGroup": 2000})
    document = with_field(document, CONTAINER, {"capabilities": {"add": ["NET_RAW"]}})
    pod, container = contexts(document)
    assert pod["runAsUser"] == 1000 and pod["fsGroup"] == 2000 and pod["runAsGroup"] == 185
    assert container["capabilities"] == {"add": ["NET_RAW"]}
    assert container["allowPrivilegeEscalation"] is False


def test_running_as_root_needs_run_as_non_root_switched_off_explicitly() -> None:
    document = with_field(minimal(), POD, {"runAsUser": 0, "runAsNonRoot": False})
    document = with_field(document, CONTAINER, {"runAsNonRoot": False})
    pod, container = contexts(document)
    assert pod["runAsUser"] == 0 and container["runAsNonRoot"] is False


def test_a_job_without_security_settings_keeps_its_spec_hash() -> None:
    """Jobs running under an older operator are not restarted by the upgrade."""
    from cjob_spec import spec_hash
    assert parse_job(minimal()).spec.pod.is_default
    changed = with_field(minimal(), POD, {"runAsUser": 1000})
    assert spec_hash(parse_job(changed)) != spec_hash(parse_job(minimal()))


# --- refusals -------------------------------------------------------------------------

REFUSED: list[tuple[str, str, Any, str]] = [
    ("unknown pod field", POD, {"runAsUsr": 1},
     "spec.pod.securityContext.runAsUsr: unknown field"),
    ("container field at pod level", POD, {"privileged": True},
     "spec.pod.securityContext.privileged: unknown field"),
    ("negative user", POD, {"runAsUser": -1},
     "spec.pod.securityContext.runAsUser: must be between 0 and 2147483647"),
    ("user as a string", POD, {"runAsUser": "185"},
     "spec.pod.securityContext.runAsUser: must be an integer id"),
    ("huge group", CONTAINER, {"runAsGroup": 2**31},
     "spec.pod.containerSecurityContext.runAsGroup: must be between 0 and 2147483647"),
    ("non-root as a string", POD, {"runAsNonRoot": "true"},
     "spec.pod.securityContext.runAsNonRoot: must be true or false"),
    ("unknown seccomp type", POD, {"seccompProfile": {"type": "Default"}},
     "spec.pod.securityContext.seccompProfile.type: must be one of RuntimeDefault"),
    ("localhost seccomp without a profile", CONTAINER, {"seccompProfile": {"type": "Localhost"}},
     "spec.pod.containerSecurityContext.seccompProfile.localhostProfile: is required"),
    ("profile with runtime default", POD,
     {"seccompProfile": {"type": "RuntimeDefault", "localhostProfile": "x"}},
     "spec.pod.securityContext.seccompProfile.localhostProfile: is only valid"),
    ("lower-case capability", CONTAINER, {"capabilities": {"drop": ["all"]}},
     "spec.pod.containerSecurityContext.capabilities.drop[0]: must be a capability name"),
    ("capabilities as a string", CONTAINER, {"capabilities": {"add": "NET_RAW"}},
     "spec.pod.containerSecurityContext.capabilities.add: must be a list"),
    ("unknown fsGroupChangePolicy", POD, {"fsGroupChangePolicy": "Sometimes"},
     "spec.pod.securityContext.fsGroupChangePolicy: must be one of OnRootMismatch, Always"),
    ("sysctl value as a number", POD, {"sysctls": [{"name": "net.core.somaxconn", "value": 1}]},
     "spec.pod.securityContext.sysctls[0].value: must be a string"),
    ("root with runAsNonRoot", POD, {"runAsUser": 0},
     "spec.pod.securityContext.runAsUser: is 0 (root) while runAsNonRoot is true"),
    ("root container with runAsNonRoot", CONTAINER, {"runAsUser": 0},
     "spec.pod.containerSecurityContext.runAsUser: is 0 (root) while runAsNonRoot is true"),
    ("privileged without escalation", CONTAINER, {"privileged": True},
     "spec.pod.containerSecurityContext.privileged: needs allowPrivilegeEscalation: true"),
    ("security context as a list", POD, [],
     "spec.pod.securityContext: must be a mapping"),
]


@pytest.mark.parametrize(("path", "value", "message"),
                         [pytest.param(p, v, m, id=name) for name, p, v, m in REFUSED])
def test_the_parser_refuses_bad_security_settings_with_one_line(
        path: str, value: Any, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_job(with_field(minimal(), path, value))
    text = str(caught.value)
    assert text.startswith(message), text
    assert "\n" not in text


SCHEMA_ALSO_REFUSES = {"unknown seccomp type", "negative user", "user as a string",
                       "huge group", "non-root as a string", "lower-case capability",
                       "capabilities as a string", "unknown fsGroupChangePolicy",
                       "sysctl value as a number", "security context as a list"}
"""The schema's CEL rules (Localhost profiles, privileged) run only in an API server:
``test_crd_api_server.py`` checks them there."""


@pytest.mark.parametrize(("path", "value"), [
    pytest.param(p, v, id=name) for name, p, v, _ in REFUSED if name in SCHEMA_ALSO_REFUSES])
def test_the_crd_schema_refuses_the_same_bad_settings(path: str, value: Any) -> None:
    assert validate(apply_defaults(SCHEMA, with_field(minimal(), path, value))) != []
