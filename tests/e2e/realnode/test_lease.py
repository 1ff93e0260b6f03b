"""A node killed before it stopped is undone by the next one; a host that another
node holds, or whose bridge belongs to something else, is refused with a reason.
(How a record is written and read: ``tests/e2e/test_host_lease_units.py``.)

The last test changes the host for real (a bridge, a network namespace, a mount, a
surviving process) and needs root; it uses names of its own, so it can run while
the scenarios' node is up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from paths import REPO as REPO_ROOT

from e2e.controlplane.pytest_plugin import is_ci
from e2e.realnode.host import CGROUP_ROOT, HostSnapshot, cgroup_of, remove_cgroups
from e2e.realnode.lease import (
    HostBusyError,
    HostLease,
    NodeRecord,
    claim_host,
    encode_record,
)


def _record(tmp_path: Path, **snapshot: object) -> NodeRecord:
    fields: dict[str, object] = {
        "sysctls": {"net.ipv4.ip_forward": "0"},
        "iptables": "*nat\nCOMMIT\n",
        "ip6tables": None,
        "netns": frozenset({"a"}),
        "links": frozenset({"lo", "eth0"}),
        "existing": frozenset({Path("/run/containerd")}),
    }
    fields.update(snapshot)
    return NodeRecord(
        pid=1234,
        work_dir=tmp_path / "node",
        owns_work_dir=True,
        bin_dir=tmp_path / "bin",
        snapshot=HostSnapshot(**fields),  # type: ignore[arg-type]
    )


class TestTheLease:
    def test_a_second_node_is_refused_while_the_first_holds_the_lease(self, tmp_path: Path) -> None:
        path = tmp_path / "lease"
        first = HostLease.acquire(path=path)
        try:
            first.record(_record(tmp_path))
            with pytest.raises(HostBusyError,
                               match=r"another node runs on this host: a node \(pid 1234"):
                HostLease.acquire(path=path)
        finally:
            first.release()
        HostLease.acquire(path=path).release()

    def test_the_lease_of_a_killed_holder_is_free_and_keeps_its_record(
        self, tmp_path: Path
    ) -> None:
        path = tmp_path / "lease"
        record = _record(tmp_path)
        holder = subprocess.run(
            [
                sys.executable,
                "-c",
                textwrap.dedent(f"""
                import os, sys
                from pathlib import Path
                from e2e.realnode.lease import HostLease, decode_record
                lease = HostLease.acquire(path=Path({str(path)!r}))
                lease.record(decode_record(sys.stdin.read()))
                os.kill(os.getpid(), 9)
            """),
            ],
            input=encode_record(record),
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert holder.returncode == -signal.SIGKILL, holder.stderr
        lease = HostLease.acquire(path=path)
        try:
            assert lease.previous() == record
        finally:
            lease.release()

    def test_an_unreadable_record_is_refused_with_what_to_check(self, tmp_path: Path) -> None:
        path = tmp_path / "lease"
        path.write_text("garbage")
        with pytest.raises(HostBusyError, match=r"cannot read: not JSON.*check the host"):
            claim_host(bridge="cjob-none0", path=path)
        # Refused without holding on: the next try after a fix goes through.
        path.write_text("")
        claim_host(bridge="cjob-none0", path=path).release()

    def test_a_bridge_no_node_recorded_is_left_alone_and_refused(self, tmp_path: Path) -> None:
        with pytest.raises(HostBusyError, match="already has a network link 'lo'"):
            claim_host(bridge="lo", path=tmp_path / "lease")
        assert Path("/sys/class/net/lo").exists()


def _run(*argv: str) -> None:
    subprocess.run(argv, capture_output=True, check=True)


def _mounted(path: Path) -> bool:
    return any(
        line.split()[1] == str(path) for line in Path("/proc/self/mounts").read_text().splitlines()
    )


def _pod_cgroup(name: str) -> Path:
    """Where a container process of a node whose pods live in cgroup ``name`` goes."""
    memory = CGROUP_ROOT / "memory"
    return (memory if memory.is_dir() else CGROUP_ROOT) / name / "pod-1"


def test_the_next_node_undoes_what_a_killed_node_left_on_the_host(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        message = "undoing a node's changes needs root (links, namespaces, mounts, cgroups)"
        if is_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    # Names of its own, so that the scenarios' node (bridge cni0, pods under the
    # cgroup kubepods) may be up meanwhile and is left alone.
    bridge, netns, cgroup = "cjleft0", "cjleft-ns", "cjleft-pods"
    path = tmp_path / "lease"
    work = tmp_path / "node"
    mount = work / "containerd" / "state" / "shm"
    node = textwrap.dedent(f"""
        import os, subprocess, sys
        from pathlib import Path
        from e2e.realnode.host import CGROUP_ROOT, HostSnapshot, cgroup_of, remove_cgroups
        from e2e.realnode.lease import HostLease, NodeRecord
        lease = HostLease.acquire(path=Path({str(path)!r}))
        snapshot = HostSnapshot.capture()
        # Left out: the host's rules and settings, which the scenarios' node may be
        # changing while this runs.
        snapshot = HostSnapshot(sysctls={{}}, iptables=None, ip6tables=None,
                                netns=snapshot.netns, links=snapshot.links,
                                existing=snapshot.existing)
        work = Path({str(work)!r})
        lease.record(NodeRecord(pid=os.getpid(), work_dir=work, owns_work_dir=True,
                                bin_dir=Path({str(tmp_path / "bin")!r}), snapshot=snapshot,
                                cgroup={cgroup!r}))
        for argv in (["ip", "link", "add", {bridge!r}, "type", "bridge"],
                     ["ip", "netns", "add", {netns!r}]):
            subprocess.run(argv, check=True)
        Path({str(mount)!r}).mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", {str(mount)!r}], check=True)
        quiet = dict(start_new_session=True, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
        sleep = [sys.executable, "-c", "import time; time.sleep(300)"]
        # Processes that outlive the node: one naming its work dir (as containerd,
        # the kubelet and kube-proxy do), one in its pods' cgroup (a container).
        component = subprocess.Popen([*sleep, str(work)], **quiet)
        container = subprocess.Popen(sleep, **quiet)
        # And one in a cgroup whose name only starts like the pods': not the node's.
        bystander = subprocess.Popen(sleep, **quiet)
        for pid, folder in ((container.pid, {str(_pod_cgroup(cgroup))!r}),
                            (bystander.pid, {str(_pod_cgroup(cgroup + "-other"))!r})):
            Path(folder).mkdir(parents=True)
            Path(folder, "cgroup.procs").write_text(str(pid))
        print(component.pid, container.pid, bystander.pid, flush=True)
        os.kill(os.getpid(), 9)
    """)
    left: list[int] = []
    bystander = 0
    try:
        killed = subprocess.run(
            [sys.executable, "-c", node],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        *left, bystander = [int(pid) for pid in killed.stdout.split()]
        assert cgroup_of(bystander).startswith(f"/{cgroup}-other/")
        assert Path(f"/sys/class/net/{bridge}").exists() and _mounted(mount)
        assert all(_alive(pid) for pid in left)

        said: list[str] = []
        lease = claim_host(bridge=bridge, path=path, log=said.append)
        try:
            assert lease.previous() is None
        finally:
            lease.release()

        assert any("was killed before it stopped" in line for line in said), said
        assert not Path(f"/sys/class/net/{bridge}").exists()
        assert not Path("/var/run/netns", netns).exists()
        assert not _mounted(mount)
        assert not work.exists()
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in left) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(pid) for pid in left)
        assert not _pod_cgroup(cgroup).parent.exists()
        assert _alive(bystander), "a process outside the node's cgroup was killed"
    finally:
        for argv in (
            ["ip", "link", "delete", bridge],
            ["ip", "netns", "delete", netns],
            ["umount", "-l", str(mount)],
        ):
            subprocess.run(argv, capture_output=True, check=False)
        for pid in (*left, bystander):
            if pid and _alive(pid):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        for name in (cgroup, f"{cgroup}-other"):
            remove_cgroups(name=name)


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for its (init) parent to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
