"""Pods on the process node behave as a kubelet would report them."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from e2e.controlplane import ApiError, ProcessNode, RestClient
from e2e.controlplane.manifests import python_pod
from e2e.controlplane.rest import quote
from e2e.controlplane.waiting import (
    container_state,
    get_pod,
    pod_condition,
    wait_for,
    wait_for_pod_gone,
    wait_for_pod_phase,
)


def create_pod(rest: RestClient, namespace: str, pod: dict[str, Any]) -> None:
    rest.request("POST", f"/api/v1/namespaces/{quote(namespace)}/pods", body=pod)


def delete_pod(rest: RestClient, namespace: str, name: str, *, grace: int | None = None) -> None:
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if grace is not None:
        body["gracePeriodSeconds"] = grace
    rest.request("DELETE", f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}", body=body)


def wait_running(rest: RestClient, namespace: str, name: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        pod = get_pod(rest, namespace=namespace, name=name)
        if pod and "running" in container_state(pod):
            return pod
        return None

    return wait_for(check, what=f"{namespace}/{name} running", timeout=60)


class TestExitCodes:
    def test_a_python_command_that_fails_reports_its_exit_code_and_error(
        self, kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
    ) -> None:
        code = "import sys; print('about to fail', flush=True); sys.exit(3)"
        create_pod(kube_rest, kube_namespace, python_pod(name="fails", code=code))

        pod = wait_for_pod_phase(
            kube_rest, namespace=kube_namespace, name="fails", phases=("Failed",)
        )

        terminated = container_state(pod)["terminated"]
        assert terminated["exitCode"] == 3
        assert terminated["reason"] == "Error"
        assert pod["status"]["podIP"] == "127.0.0.1"
        assert "about to fail" in process_node.read_pod_log(namespace=kube_namespace, name="fails")

    def test_a_command_that_exits_zero_completes_the_pod(
        self, kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
    ) -> None:
        code = "import sys; print(sys.prefix)"
        create_pod(kube_rest, kube_namespace, python_pod(name="ok", code=code))

        pod = wait_for_pod_phase(
            kube_rest, namespace=kube_namespace, name="ok", phases=("Succeeded", "Failed")
        )

        assert pod["status"]["phase"] == "Succeeded"
        terminated = container_state(pod)["terminated"]
        assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
        assert terminated["startedAt"] and terminated["finishedAt"]
        # "python" in a command is the test run's own interpreter.
        log = process_node.read_pod_log(namespace=kube_namespace, name="ok")
        assert log.strip() == sys.prefix

    def test_a_missing_executable_fails_the_pod_with_a_start_error(
        self, kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
    ) -> None:
        pod = python_pod(name="no-such-binary", code="")
        pod["spec"]["containers"][0]["command"] = ["no-such-binary-anywhere"]
        create_pod(kube_rest, kube_namespace, pod)

        done = wait_for_pod_phase(
            kube_rest, namespace=kube_namespace, name="no-such-binary", phases=("Failed",)
        )

        assert container_state(done)["terminated"]["reason"] == "StartError"


class TestEnvironment:
    def test_env_comes_from_values_secrets_config_maps_and_the_downward_api(
        self, kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
    ) -> None:
        ns = kube_namespace
        kube_rest.request(
            "POST",
            f"/api/v1/namespaces/{ns}/secrets",
            body={"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
                  "stringData": {"password": "s3cr3t"}},
        )  # fmt: skip
        kube_rest.request(
            "POST",
            f"/api/v1/namespaces/{ns}/configmaps",
            body={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
                  "data": {"mode": "fast"}},
        )  # fmt: skip
        env: list[dict[str, Any]] = [
            {"name": "EARLY", "value": "x-$(POD_NAME)"},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "LATE", "value": "y-$(POD_NAME)"},
            {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "PASSWORD",
             "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "mode"}}},
        ]  # fmt: skip
        code = textwrap.dedent(
            """
            import json, os
            keys = ["EARLY", "LATE", "POD_NAME", "POD_NS", "POD_IP", "PASSWORD", "MODE",
                    "KUBERNETES_SERVICE_HOST", "KUBECONFIG", "CJOB_SERVICEACCOUNT_DIR"]
            print(json.dumps({k: os.environ.get(k) for k in keys}))
            """
        )
        create_pod(kube_rest, ns, python_pod(name="env", code=code, env=env))

        wait_for_pod_phase(kube_rest, namespace=ns, name="env", phases=("Succeeded",))

        seen = json.loads(process_node.read_pod_log(namespace=ns, name="env"))
        assert seen["POD_NAME"] == "env"
        # $(VAR) expands only variables defined earlier in the list, as in Kubernetes.
        assert seen["EARLY"] == "x-$(POD_NAME)"
        assert seen["LATE"] == "y-env"
        assert seen["POD_NS"] == ns
        assert seen["POD_IP"] == "127.0.0.1"
        assert seen["PASSWORD"] == "s3cr3t"
        assert seen["MODE"] == "fast"
        assert seen["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
        assert os.path.isfile(seen["KUBECONFIG"])
        sa_dir = Path(seen["CJOB_SERVICEACCOUNT_DIR"])
        assert (sa_dir / "namespace").read_text() == ns
        assert (sa_dir / "token").read_text().count(".") == 2  # a JWT

    def test_a_missing_secret_holds_the_container_until_the_secret_exists(
        self, kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
    ) -> None:
        ns = kube_namespace
        env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "late", "key": "t"}}}]
        code = "import os; print(os.environ['TOKEN'])"
        create_pod(kube_rest, ns, python_pod(name="waits", code=code, env=env))

        def config_error() -> bool:
            pod = get_pod(kube_rest, namespace=ns, name="waits")
            waiting = container_state(pod or {}).get("waiting") or {}
            return waiting.get("reason") == "CreateContainerConfigError"

        wait_for(config_error, what="CreateContainerConfigError", timeout=60)
        kube_rest.request(
            "POST",
            f"/api/v1/namespaces/{ns}/secrets",
            body={"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "late"},
                  "stringData": {"t": "arrived"}},
        )  # fmt: skip

        wait_for_pod_phase(kube_rest, namespace=ns, name="waits", phases=("Succeeded",))
        assert process_node.read_pod_log(namespace=ns, name="waits").strip() == "arrived"


class TestCrashesAndRestarts:
    def test_a_killed_process_makes_the_pod_failed(
        self, kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
    ) -> None:
        code = "import time\nwhile True: time.sleep(1)"
        create_pod(kube_rest, kube_namespace, python_pod(name="victim", code=code))
        running = wait_running(kube_rest, kube_namespace, "victim")
        assert running["status"]["phase"] == "Running"
        assert container_state(running)["running"]["startedAt"]

        killed = process_node.kill_pod_process(namespace=kube_namespace, name="victim")

        assert killed == 1
        pod = wait_for_pod_phase(
            kube_rest, namespace=kube_namespace, name="victim", phases=("Failed",)
        )
        terminated = container_state(pod)["terminated"]
        assert (terminated["exitCode"], terminated["signal"]) == (137, 9)
        assert terminated["reason"] == "Error"

    def test_on_failure_restarts_until_success_and_counts_restarts(
        self, kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
    ) -> None:
        # The working directory survives restarts, like an emptyDir volume.
        code = textwrap.dedent(
            """
            import os, sys
            first = not os.path.exists("attempted")
            open("attempted", "w").close()
            print("first" if first else "second", flush=True)
            sys.exit(1 if first else 0)
            """
        )
        create_pod(
            kube_rest,
            kube_namespace,
            python_pod(name="flaky", code=code, restart_policy="OnFailure"),
        )

        pod = wait_for_pod_phase(
            kube_rest, namespace=kube_namespace, name="flaky", phases=("Succeeded", "Failed")
        )

        assert pod["status"]["phase"] == "Succeeded"
        status = pod["status"]["containerStatuses"][0]
        assert status["restartCount"] == 1
        assert status["lastState"]["terminated"]["exitCode"] == 1
        logs = (kube_namespace, "flaky")
        assert process_node.read_pod_log(namespace=logs[0], name=logs[1]).strip() == "second"
        previous = process_node.read_pod_log(namespace=logs[0], name=logs[1], previous=True)
        assert previous.strip() == "first"

    def test_restart_policy_always_restarts_a_crashed_process(
        self, kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
    ) -> None:
        code = "import time\nwhile True: time.sleep(1)"
        create_pod(
            kube_rest,
            kube_namespace,
            python_pod(name="phoenix", code=code, restart_policy="Always"),
        )
        wait_running(kube_rest, kube_namespace, "phoenix")

        process_node.kill_pod_process(namespace=kube_namespace, name="phoenix")

        def restarted() -> dict[str, Any] | None:
            pod = get_pod(kube_rest, namespace=kube_namespace, name="phoenix")
            status = (pod or {}).get("status", {}).get("containerStatuses", [{}])[0]
            ok = status.get("restartCount") == 1 and "running" in status.get("state", {})
            return pod if ok else None

        pod = wait_for(restarted, what="phoenix restarted", timeout=60)
        assert pod["status"]["phase"] == "Running"


class TestDeletion:
    def test_deleting_a_pod_sends_sigterm_and_waits_for_a_clean_exit(
        self, kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
    ) -> None:
        code = textwrap.dedent(
            """
            import os, signal, sys, time
            def stop(signum, frame):
                # os.write, not print: the signal may land while print("ready") still
                # holds stdout's buffer, and print from the handler would then fail.
                os.write(1, b"got SIGTERM, flushing\\n")
                sys.exit(0)
            signal.signal(signal.SIGTERM, stop)
            print("ready", flush=True)
            while True:
                time.sleep(0.1)
            """
        )
        create_pod(kube_rest, kube_namespace, python_pod(name="polite", code=code))
        wait_running(kube_rest, kube_namespace, "polite")
        wait_for(
            lambda: "ready" in process_node.read_pod_log(namespace=kube_namespace, name="polite"),
            what="handler installed",
        )

        delete_pod(kube_rest, kube_namespace, "polite", grace=30)

        wait_for_pod_gone(kube_rest, namespace=kube_namespace, name="polite")
        log = process_node.read_pod_log(namespace=kube_namespace, name="polite")
        assert "got SIGTERM, flushing" in log

    def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period(
        self, kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
    ) -> None:
        code = textwrap.dedent(
            """
            import signal, time
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print("ignoring", flush=True)
            while True:
                time.sleep(0.1)
            """
        )
        create_pod(kube_rest, kube_namespace, python_pod(name="stubborn", code=code))
        wait_running(kube_rest, kube_namespace, "stubborn")
        wait_for(
            lambda: (
                "ignoring" in process_node.read_pod_log(namespace=kube_namespace, name="stubborn")
            ),
            what="SIGTERM ignored",
        )
        pid = process_node.pod_pids(namespace=kube_namespace, name="stubborn")["main"]

        delete_pod(kube_rest, kube_namespace, "stubborn", grace=1)

        wait_for_pod_gone(kube_rest, namespace=kube_namespace, name="stubborn")
        assert not _is_alive(pid)


def _is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers; look at its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


class TestLogsThroughTheApi:
    def test_the_api_serves_container_logs_like_kubectl_logs(
        self, kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
    ) -> None:
        code = "for i in range(5): print('line', i)"
        create_pod(kube_rest, kube_namespace, python_pod(name="chatty", code=code))
        wait_for_pod_phase(
            kube_rest, namespace=kube_namespace, name="chatty", phases=("Succeeded",)
        )
        path = f"/api/v1/namespaces/{kube_namespace}/pods/chatty/log"

        full = kube_rest.get_text(path)
        tail = kube_rest.get_text(path + "?tailLines=2")

        assert full.splitlines() == [f"line {i}" for i in range(5)]
        assert tail.splitlines() == ["line 3", "line 4"]

    def test_logs_of_an_unknown_container_are_not_found(
        self, kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
    ) -> None:
        create_pod(kube_rest, kube_namespace, python_pod(name="quiet", code="pass"))
        wait_for_pod_phase(kube_rest, namespace=kube_namespace, name="quiet", phases=("Succeeded",))

        with pytest.raises(ApiError) as missing:
            kube_rest.get_text(f"/api/v1/namespaces/{kube_namespace}/pods/quiet/log?container=nope")

        assert missing.value.status in (400, 404)


class TestReadiness:
    def test_an_exec_readiness_probe_holds_ready_until_its_command_succeeds(
        self, kube_rest: RestClient, kube_namespace: str, process_node: ProcessNode
    ) -> None:
        # Each pod has a temporary directory of its own, as a container has its own
        # /tmp: the probe, run with the container's environment, finds the file there.
        code = textwrap.dedent("""\
            import os, pathlib, time
            time.sleep(1.5)
            pathlib.Path(os.environ["TMPDIR"], "up").write_text("")
            time.sleep(600)
            """)
        pod = python_pod(name="warming", code=code)
        pod["spec"]["containers"][0]["readinessProbe"] = {
            "exec": {"command": ["sh", "-c", 'test -f "${TMPDIR:-/tmp}/up"']},
            "periodSeconds": 1,
        }
        other = python_pod(name="other", code="import time; time.sleep(600)")
        create_pod(kube_rest, kube_namespace, pod)
        create_pod(kube_rest, kube_namespace, other)
        running = wait_running(kube_rest, kube_namespace, "warming")
        assert pod_condition(running, "Ready") == "False", "ready before the probe passed"

        ready = wait_for(
            lambda: (p := get_pod(kube_rest, namespace=kube_namespace, name="warming"))
            and pod_condition(p, "Ready") == "True" and p,
            what="the probe to pass", timeout=30)
        assert ready["status"]["containerStatuses"][0]["ready"] is True
        other_pod = wait_running(kube_rest, kube_namespace, "other")
        pods_tmp = {process_node.pod_dir(namespace=kube_namespace, name=name) / "tmp"
                    for name in ("warming", "other")}
        assert len(pods_tmp) == 2 and all(path.is_dir() for path in pods_tmp)
        assert pod_condition(other_pod, "Ready") == "True", "no probe: ready when running"

