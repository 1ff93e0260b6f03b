"""The cluster quick start: a control plane, a real node, the images, an S3 server,
a Kafka broker and the chart's operator, on this machine (``make cluster`` /
``make cluster-down``).

    python -m e2e.realnode up       start it in the background; prints how to use it
    python -m e2e.realnode status   say whether it runs
    python -m e2e.realnode down     stop it and put the host back as it was
    python -m e2e.realnode serve    run it in the foreground until SIGTERM (used by up)

It leaves ``.cjob/cluster/kubeconfig`` and ``.cjob/cluster/s3.env`` (``KEY=value``
lines: ``S3_ENDPOINT`` from this machine, ``S3_ENDPOINT_IN_CLUSTER`` from pods, the
AWS keys, and ``S3_CREDENTIALS_SECRET``, a Secret of them in namespace ``default``)
and ``.cjob/cluster/kafka.env`` (``KAFKA_BOOTSTRAP``, the broker from this machine, and
``KAFKA_BOOTSTRAP_IN_CLUSTER``, ``kafka.kafka.svc.cluster.local:9092`` from pods).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from e2e.controlplane.__main__ import is_alive, read_state
from e2e.repo import REPO_ROOT

DEFAULT_STATE_DIR = REPO_ROOT / ".cjob" / "cluster"
S3_NAMESPACE = "s3"
KAFKA_NAMESPACE = "kafka"
#: The bucket of the Kafka example's checkpoints (kafka_clicks/kafka-clicks-cluster.yaml).
KAFKA_EXAMPLE_BUCKET = "kafka-clicks"


def _say(line: str) -> None:
    print(f"[cluster {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def serve(*, state_dir: Path) -> int:
    """Bring everything up, write the files, then wait for SIGTERM and tear down."""
    from e2e.controlplane.binaries import ALL_BINARIES, ensure_binaries
    from e2e.controlplane.controlplane import ControlPlane
    from e2e.images import build_images
    from e2e.kafka.jars import ensure_jars
    from e2e.realnode.cluster_s3 import start_s3
    from e2e.realnode.kafka import start_kafka
    from e2e.realnode.node import NODE_IP, ImageArchive, RealNode
    from e2e.realnode.scenario import install_operator, prepare_quick_start

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "state.json").unlink(missing_ok=True)
    t0 = time.monotonic()
    _say("building what is missing (binaries, images); a cold build takes a while")
    bin_dir = ensure_binaries(names=ALL_BINARIES, build=True)
    built = build_images(log=_say)
    kafka_jars = ensure_jars()  # the broker's jars, mounted into its pod from the cache
    work = Path(tempfile.mkdtemp(prefix="cjob-cluster-"))
    plane = ControlPlane(bin_dir=bin_dir, node_ip=NODE_IP, work_dir=work / "plane")
    node: RealNode | None = None
    try:
        _say("starting the control plane")
        plane.start()
        node = RealNode(
            control_plane=plane,
            bin_dir=bin_dir,
            work_dir=work / "node",
            images=[
                ImageArchive(tag=built.runtime.tag, path=built.runtime.archive),
                ImageArchive(tag=built.operator.tag, path=built.operator.archive),
            ],
            log=_say,
        )
        _say("starting the node (containerd, kubelet, kube-proxy, DNS)")
        node.start()
        _say("starting the S3 server")
        s3 = start_s3(node=node, namespace=S3_NAMESPACE, data_path=state_dir / "s3-data")
        _say("starting the Kafka broker")
        kafka = start_kafka(node=node, image=built.runtime.tag, jar_dir=kafka_jars,
                            namespace=KAFKA_NAMESPACE, data_path=state_dir / "kafka-data")  # fmt: skip
        client = s3.client()
        buckets = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
        if KAFKA_EXAMPLE_BUCKET not in buckets:
            client.create_bucket(Bucket=KAFKA_EXAMPLE_BUCKET)
        (state_dir / "kafka.env").write_text(kafka.env_text())
        kubeconfig = state_dir / "kubeconfig"
        shutil.copyfile(plane.kubeconfig, kubeconfig)
        _say("installing the chart (operator from its image)")
        install_operator(
            helm=bin_dir / "helm",
            home=work / "helm",
            kubeconfig=kubeconfig,
            operator_image=built.operator.tag,
            runtime_image=built.runtime.tag,
        )
        prepare_quick_start(rest=node.rest(), s3=s3, state_dir=state_dir, kubeconfig=kubeconfig)
        state = {"pid": os.getpid(), "kubeconfig": str(kubeconfig), "server": plane.server,
                 "bin_dir": str(bin_dir), "work": str(work)}  # fmt: skip
        (state_dir / "state.json").write_text(json.dumps(state, indent=2))
        _say(f"cluster ready in {time.monotonic() - t0:.0f}s")
        while not stop.wait(1.0):
            if not plane.is_running():
                _say("a control plane component exited; stopping")
                return 1
        return 0
    finally:
        _say("stopping")
        if node is not None:
            node.stop()
        plane.stop()
        shutil.rmtree(work, ignore_errors=True)
        (state_dir / "state.json").unlink(missing_ok=True)


def up(*, state_dir: Path, timeout: float) -> int:
    state = read_state(state_dir)
    if state and is_alive(int(str(state["pid"]))):
        _print_usage(state_dir)
        return 0
    if os.geteuid() != 0:
        print("error: the cluster's node needs root (network namespaces, mounts, cgroups)",
              file=sys.stderr)  # fmt: skip
        return 1
    state_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    log_path = state_dir / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "e2e.realnode", "serve", "--state-dir", str(state_dir)],
            cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + timeout
    shown = 0
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        lines = text.splitlines()
        for line in lines[shown:]:
            if (
                line.startswith("[cluster")
                or line.startswith("[build")
                or line.startswith("[images")
            ):
                print(line, file=sys.stderr, flush=True)
        shown = len(lines)
        state = read_state(state_dir)
        if state and state.get("pid") == proc.pid:
            _print_usage(state_dir)
            return 0
        if proc.poll() is not None:
            print(text[-4000:], file=sys.stderr)
            print(f"error: the cluster did not start (log: {log_path})", file=sys.stderr)
            return 1
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGTERM)
    print(f"error: the cluster was not up after {timeout:.0f}s (log: {log_path})", file=sys.stderr)
    return 1


def _print_usage(state_dir: Path) -> None:
    rel = os.path.relpath(state_dir, Path.cwd())
    print(f"""
The cluster is up. Use it from this shell with:

  export KUBECONFIG={rel}/kubeconfig
  set -a; . {rel}/s3.env; set +a
  set -a; . {rel}/kafka.env; set +a    # KAFKA_BOOTSTRAP: the cluster's broker from here
  export PATH="$(e2e/controlplane/build.sh --print-bin-dir):$PATH"    # kubectl, helm
  kubectl get nodes,pods -A

Stop it with: make cluster-down
""")


def down(*, state_dir: Path, timeout: float = 120.0) -> int:
    state = read_state(state_dir)
    if not state or not is_alive(int(str(state["pid"]))):
        print("no cluster running", file=sys.stderr)
        return 0
    pid = int(str(state["pid"]))
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.3)
    if is_alive(pid):
        os.killpg(pid, signal.SIGKILL)
        print("the cluster did not stop in time; killed", file=sys.stderr)
        return 1
    print("cluster stopped", file=sys.stderr)
    return 0


def status(*, state_dir: Path) -> int:
    state = read_state(state_dir)
    if not state or not is_alive(int(str(state["pid"]))):
        print("stopped")
        return 1
    print(f"running: {state['server']} (kubeconfig {state['kubeconfig']})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.realnode", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("command", choices=("up", "down", "status", "serve"))
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds `up` waits (a cold build is included)")  # fmt: skip
    ns = parser.parse_args(argv)
    state_dir = ns.state_dir.resolve()
    if ns.command == "serve":
        return serve(state_dir=state_dir)
    if ns.command == "up":
        return up(state_dir=state_dir, timeout=ns.timeout)
    if ns.command == "down":
        return down(state_dir=state_dir)
    return status(state_dir=state_dir)


if __name__ == "__main__":
    sys.exit(main())
