"""``python -m e2e.controlplane up|down|status|serve``: a control plane for manual use.

``up`` starts a control plane and a process node in the background and prints the
admin kubeconfig path (``export KUBECONFIG=$(python -m e2e.controlplane up)``);
``down`` stops them; ``status`` says whether they run. ``serve`` is the foreground
process that ``up`` starts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from e2e.controlplane.binaries import CONTROL_PLANE_BINARIES, cache_dir, ensure_binaries
from e2e.controlplane.controlplane import ControlPlane
from e2e.controlplane.process_node import ProcessNode
from e2e.controlplane.rest import ApiError, RestClient
from e2e.repo import REPO_ROOT


def default_state_dir() -> Path:
    return cache_dir() / "controlplane"


def read_state(state_dir: Path) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads((state_dir / "state.json").read_text())
        return state
    except (OSError, ValueError):
        return None


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def serve(*, state_dir: Path, with_node: bool) -> int:
    """Run the control plane (and node) in the foreground until SIGTERM/SIGINT."""
    state_dir.mkdir(parents=True, exist_ok=True)
    cluster_dir = state_dir / "cluster"
    shutil.rmtree(cluster_dir, ignore_errors=True)
    (state_dir / "state.json").unlink(missing_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    bin_dir = ensure_binaries(names=CONTROL_PLANE_BINARIES)
    plane = ControlPlane(work_dir=cluster_dir, bin_dir=bin_dir)
    node: ProcessNode | None = None
    try:
        plane.start()
        if with_node:
            node = ProcessNode(control_plane=plane, work_dir=state_dir / "node")
            node.start()
            node.wait_until_ready(timeout=120)
        kubeconfig = state_dir / "kubeconfig"
        shutil.copyfile(plane.kubeconfig, kubeconfig)
        state = {
            "pid": os.getpid(),
            "kubeconfig": str(kubeconfig),
            "server": plane.server,
            "node": node.name if node else None,
            "logs": str(plane.log_dir),
        }
        (state_dir / "state.json").write_text(json.dumps(state, indent=2))
        while not stop.wait(1.0):
            if not plane.is_running():
                print("a control plane component exited; stopping", file=sys.stderr)
                return 1
        return 0
    finally:
        if node is not None:
            node.stop()
        plane.stop()
        (state_dir / "state.json").unlink(missing_ok=True)


def up(*, state_dir: Path, with_node: bool, timeout: float) -> int:
    state = read_state(state_dir)
    if state and is_alive(int(state["pid"])):
        print(state["kubeconfig"])
        return 0
    state_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "e2e.controlplane", "serve", "--state-dir", str(state_dir)]
    if not with_node:
        argv.append("--no-node")
    log_path = state_dir / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_state(state_dir)
        if state and state.get("pid") == proc.pid:
            print(f"control plane up at {state['server']}", file=sys.stderr)
            print(state["kubeconfig"])
            return 0
        if proc.poll() is not None:
            print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
            print(f"control plane failed to start (see {log_path})", file=sys.stderr)
            return 1
        time.sleep(0.5)
    proc.terminate()
    print(f"control plane not up after {timeout:.0f}s (see {log_path})", file=sys.stderr)
    return 1


def down(*, state_dir: Path, timeout: float = 60.0) -> int:
    state = read_state(state_dir)
    if not state or not is_alive(int(state["pid"])):
        print("no control plane running", file=sys.stderr)
        return 0
    pid = int(state["pid"])
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while is_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if is_alive(pid):
        os.killpg(pid, signal.SIGKILL)
    print("control plane stopped", file=sys.stderr)
    return 0


def status(*, state_dir: Path) -> int:
    state = read_state(state_dir)
    if not state or not is_alive(int(state["pid"])):
        print("stopped")
        return 1
    cluster = state_dir / "cluster"
    client = RestClient(
        server=state["server"],
        ca_file=cluster / "pki" / "ca.crt",
        client_cert=cluster / "pki" / "admin.crt",
        client_key=cluster / "pki" / "admin.key",
    )
    try:
        ready = client.get_text("/readyz").strip() == "ok"
    except (ApiError, OSError):
        ready = False
    print(f"{'running' if ready else 'not ready'} {state['server']}")
    print(f"kubeconfig: {state['kubeconfig']}")
    print(f"node: {state['node']}")
    print(f"logs: {state['logs']}")
    return 0 if ready else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.controlplane")
    parser.add_argument("command", choices=["up", "down", "status", "serve"])
    parser.add_argument("--state-dir", type=Path, default=None)
    parser.add_argument("--no-node", action="store_true", help="do not start a process node")
    parser.add_argument("--timeout", type=float, default=180.0)
    args = parser.parse_args(argv)
    state_dir: Path = args.state_dir or default_state_dir()
    if args.command == "serve":
        return serve(state_dir=state_dir, with_node=not args.no_node)
    if args.command == "up":
        return up(state_dir=state_dir, with_node=not args.no_node, timeout=args.timeout)
    if args.command == "down":
        return down(state_dir=state_dir)
    return status(state_dir=state_dir)


if __name__ == "__main__":
    sys.exit(main())
