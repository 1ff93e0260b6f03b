"""The kind scenarios' own parts that need no engine: the runc shim's rewrite of what a
privileged container asks for, the engine's command line, the cluster configuration,
the node image's inputs, the routes a run sets and puts back, and a stop that runs
every step whatever the others did."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from e2e.controlplane.pytest_plugin import is_ci
from e2e.kind import runc_shim
from e2e.kind.cluster import KindCluster, cluster_config
from e2e.kind.engine import NODE_BRIDGE, SystemEngine, dockerd_argv
from e2e.kind.engine_record import EngineRecord
from e2e.kind.node_image import KUBEADM_PATCH, NODE_DIR, control_plane_images, input_key
from e2e.kind.pytest_plugin import HostNotRestoredWarning, tear_down_kind_session
from e2e.kind.routes import (
    RouteRepair,
    SavedRoute,
    gateway,
    plan_repair,
    restore_route,
    routes_for,
    save_route,
    set_route,
    words,
)
from e2e.realnode.host import Teardown
from e2e.realnode.lease import HostLease, decode_record

ALL_BUT_SYS_RESOURCE = "CapBnd:\t000001fffeffffff\n"
EVERYTHING = ["CAP_CHOWN", "CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_NET_ADMIN"]


def _process() -> dict[str, object]:
    return {"args": ["/sbin/init"], "capabilities": {
        key: list(EVERYTHING) for key in ("bounding", "effective", "inheritable", "permitted")}}


class TestRuncShim:
    def test_the_held_capabilities_are_read_from_the_bounding_set(self) -> None:
        held = runc_shim.held_capabilities(status="Name:\tx\n" + ALL_BUT_SYS_RESOURCE)
        assert "CAP_SYS_RESOURCE" not in held
        assert {"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_BPF"} <= held

    def test_create_drops_the_capabilities_the_engine_lacks_from_the_bundle(
        self, tmp_path: Path
    ) -> None:
        (tmp_path / "config.json").write_text(json.dumps({"ociVersion": "1.0.2",
                                                          "process": _process()}))
        held = runc_shim.held_capabilities(status=ALL_BUT_SYS_RESOURCE)
        runc_shim.adjust(["--root", "/run/x", "--log", "l.json", "create", "--bundle",
                          str(tmp_path), "--pid-file", "p", "abc"], held=held)  # fmt: skip
        config = json.loads((tmp_path / "config.json").read_text())
        for names in config["process"]["capabilities"].values():
            assert names == ["CAP_CHOWN", "CAP_SYS_ADMIN", "CAP_NET_ADMIN"]
        assert config["ociVersion"] == "1.0.2"

    def test_exec_drops_them_from_the_process_file(self, tmp_path: Path) -> None:
        process = tmp_path / "process.json"
        process.write_text(json.dumps(_process()))
        held = runc_shim.held_capabilities(status=ALL_BUT_SYS_RESOURCE)
        runc_shim.adjust(["exec", "--process", str(process), "--detach", "abc"], held=held)
        assert "CAP_SYS_RESOURCE" not in json.loads(process.read_text())["capabilities"]["bounding"]

    def test_other_commands_and_held_capabilities_leave_the_files_untouched(
        self, tmp_path: Path
    ) -> None:
        text = json.dumps({"process": _process()})
        (tmp_path / "config.json").write_text(text)
        runc_shim.adjust(["delete", "--force", "abc"], held=set())
        everything = runc_shim.held_capabilities(status="CapBnd:\t000001ffffffffff\n")
        runc_shim.adjust(["create", "--bundle", str(tmp_path), "abc"], held=everything)
        assert (tmp_path / "config.json").read_text() == text

    def test_unknown_capability_names_are_left_for_runc_to_judge(self) -> None:
        process: dict[str, object] = {"capabilities": {"bounding": ["CAP_FUTURE", "CAP_CHOWN"]}}
        assert runc_shim.without_missing(process, held={"CAP_CHOWN"}) is False
        assert process["capabilities"] == {"bounding": ["CAP_FUTURE", "CAP_CHOWN"]}

    def test_the_shim_runs_on_the_standard_library_alone(self, tmp_path: Path) -> None:
        # The engine runs it with the host's python3 -I, outside the virtualenv.
        proc = subprocess.run(
            [sys.executable, "-I", str(Path(runc_shim.__file__)), "state", "abc"],
            env={"CJOB_RUNC": "/bin/echo"}, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "state abc"


class TestEngine:
    def test_the_engine_changes_nothing_of_the_hosts_network_and_uses_the_shim(
        self, tmp_path: Path
    ) -> None:
        argv = dockerd_argv(run_dir=tmp_path / "run", root=tmp_path / "root",
                            runtime=tmp_path / "runc")  # fmt: skip
        for flag in ("--bridge=none", "--iptables=false", "--ip-forward=false", "--ip-masq=false"):
            assert flag in argv
        assert argv[argv.index("--default-runtime") + 1] == "cjob-runc"
        assert f"cjob-runc={tmp_path / 'runc'}" in argv
        assert argv[argv.index("--data-root") + 1] == str(tmp_path / "root")
        assert argv[argv.index("--host") + 1] == f"unix://{tmp_path / 'run' / 'docker.sock'}"


class TestClusterConfig:
    def test_one_node_that_accepts_cgroup_v1_and_keeps_oom_scores(self) -> None:
        config = cluster_config(local_image=False)
        assert config["nodes"] == [{"role": "control-plane"}]
        kubelet = yaml.safe_load(config["kubeadmConfigPatches"][0])
        assert kubelet == {"kind": "KubeletConfiguration", "failCgroupV1": False}
        assert "restrict_oom_score_adj = true" in config["containerdConfigPatches"][0]
        assert KUBEADM_PATCH not in config["kubeadmConfigPatches"]

    def test_the_local_node_image_tells_kubeadm_the_names_of_its_images(self) -> None:
        config = cluster_config(local_image=True)
        patch = yaml.safe_load(config["kubeadmConfigPatches"][-1])
        repository = patch["imageRepository"]
        tags = {image.tag for image in control_plane_images(bin_dir=Path("/nonexistent"))}
        assert f"{repository}/etcd:{patch['etcd']['local']['imageTag']}" in tags
        assert f"{repository}/coredns:{patch['dns']['imageTag']}" in tags
        # The sandbox image containerd pins in the node is one of them too.
        containerd = (NODE_DIR / "files" / "etc" / "containerd" / "config.toml").read_text()
        pinned = containerd.split('sandbox = "', 1)[1].split('"', 1)[0]
        assert pinned in tags


class TestNodeImage:
    @pytest.fixture
    def bin_dir(self, tmp_path: Path) -> Path:
        names = ("containerd", "containerd-shim-runc-v2", "ctr", "kubelet", "kubeadm", "kubectl",
                 "kube-proxy", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                 "etcd", "coredns", "pause")  # fmt: skip
        for name in names:
            (tmp_path / name).write_text(name)
        return tmp_path

    def test_the_image_key_changes_with_a_binary_and_with_the_base(self, bin_dir: Path) -> None:
        first = input_key(bin_dir=bin_dir, base_reference="base:1")
        assert input_key(bin_dir=bin_dir, base_reference="base:1") == first
        assert input_key(bin_dir=bin_dir, base_reference="base:2") != first
        (bin_dir / "kubelet").write_text("another kubelet")
        assert input_key(bin_dir=bin_dir, base_reference="base:1") != first

    def test_the_entrypoint_is_valid_bash(self) -> None:
        entrypoint = NODE_DIR / "files" / "usr" / "local" / "bin" / "entrypoint"
        subprocess.run(["bash", "-n", str(entrypoint)], check=True)
        assert entrypoint.stat().st_mode & 0o111


SERVICES = "10.96.0.0/16"
THEIRS = "10.96.0.0/16 via 192.0.2.9 dev eth0"
OURS = "10.96.0.0/16 via 172.18.0.2 dev br-1a2b"


class TestRoutesPutBack:
    """The route a run sets replaces whatever held the destination; putting it back
    deletes only the run's route and adds back the one it replaced."""

    def _saved(self, *previous: str) -> SavedRoute:
        return SavedRoute(destination=SERVICES, via="172.18.0.2", previous=previous)

    def test_the_runs_route_is_deleted_and_the_one_it_replaced_added_back(self) -> None:
        repair = plan_repair(self._saved(THEIRS), current=[OURS])
        assert repair == RouteRepair(delete=(OURS,), add=(THEIRS,), foreign=())

    def test_a_destination_that_had_no_route_is_left_without_one(self) -> None:
        assert plan_repair(self._saved(), current=[OURS]) == RouteRepair(
            delete=(OURS,), add=(), foreign=())

    def test_a_replaced_route_that_went_with_the_runs_link_is_added_back(self) -> None:
        # Deleting kind's bridge takes the routes via the node with it.
        assert plan_repair(self._saved(THEIRS), current=[]) == RouteRepair(
            delete=(), add=(THEIRS,), foreign=())

    def test_putting_back_twice_changes_nothing_the_second_time(self) -> None:
        assert plan_repair(self._saved(THEIRS), current=[THEIRS]) == RouteRepair(
            delete=(), add=(), foreign=())
        assert plan_repair(self._saved(), current=[]) == RouteRepair(delete=(), add=(), foreign=())

    def test_a_route_via_the_same_gateway_that_was_there_before_is_kept(self) -> None:
        before = "10.96.0.0/16 via 172.18.0.2 dev br-1a2b proto static"
        assert plan_repair(self._saved(before), current=[before]).delete == ()

    def test_a_route_someone_else_set_meanwhile_is_left_alone_and_reported(self) -> None:
        other = "10.96.0.0/16 via 10.0.0.9 dev eth1"
        assert plan_repair(self._saved(), current=[other]) == RouteRepair(
            delete=(), add=(), foreign=(other,))

    def test_the_state_ip_prints_is_not_part_of_the_route(self) -> None:
        assert words(THEIRS + " linkdown") == tuple(THEIRS.split())
        assert plan_repair(self._saved(THEIRS), current=[THEIRS + " linkdown"]).add == ()
        assert gateway(OURS) == "172.18.0.2" and gateway("10.0.0.0/8 dev eth0") is None

    def test_routes_are_saved_replaced_and_put_back_for_real(self) -> None:
        """In a network namespace of its own: the host's routes are never touched."""
        if os.geteuid() != 0:
            message = "routes in a network namespace need root"
            if is_ci():
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
        name = f"cjob-routes-{secrets.token_hex(3)}"
        ip = ("ip", "-n", name)
        subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
        try:
            for argv in (["link", "add", "v0", "type", "veth", "peer", "name", "v1"],
                         ["link", "set", "v0", "up"], ["link", "set", "v1", "up"],
                         ["addr", "add", "192.0.2.1/24", "dev", "v0"],
                         ["addr", "add", "172.18.0.1/16", "dev", "v0"],
                         ["route", "add", SERVICES, "via", "192.0.2.9", "metric", "0"]):
                subprocess.run([*ip, *argv], check=True, capture_output=True)
            before = routes_for(SERVICES, ip=ip)
            assert [gateway(line) for line in before] == ["192.0.2.9"]

            saved = [save_route(destination=SERVICES, via="172.18.0.2", ip=ip),
                     save_route(destination="10.244.0.0/16", via="172.18.0.2", ip=ip)]
            assert (saved[0].previous, saved[1].previous) == (tuple(before), ())
            for route in saved:
                set_route(route, ip=ip)
            assert [gateway(line) for line in routes_for(SERVICES, ip=ip)] == ["172.18.0.2"]

            for _ in range(2):  # the cluster's delete, then the engine's stop
                for route in saved:
                    assert restore_route(route, ip=ip) == []
                assert routes_for(SERVICES, ip=ip) == before
                assert routes_for("10.244.0.0/16", ip=ip) == []
        finally:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)


class TestStepByStepTeardown:
    def test_every_step_runs_after_one_that_failed_or_timed_out(self) -> None:
        ran: list[str] = []
        said: list[str] = []
        teardown = Teardown(log=said.append)

        def times_out() -> None:
            ran.append("docker rm")
            subprocess.run(["sleep", "5"], timeout=0.1, check=False)

        teardown.step("docker rm", times_out)
        teardown.step("dockerd", lambda: ran.append("dockerd"))
        teardown.step("host", lambda: ran.append("host") or ["sysctl kernel.panic stays 10"])
        assert ran == ["docker rm", "dockerd", "host"]
        problems = teardown.finish()
        assert problems[0].startswith("docker rm: TimeoutExpired: Command '['sleep', '5']'")
        assert problems[1:] == ["host: sysctl kernel.panic stays 10"]
        assert said == [f"not put back: {problem}" for problem in problems]

    def test_an_interrupt_waits_for_the_remaining_steps_then_is_raised_again(self) -> None:
        ran: list[str] = []
        teardown = Teardown()

        def interrupted() -> None:
            raise KeyboardInterrupt

        teardown.step("containers", interrupted)
        teardown.step("host", lambda: ran.append("host"))
        assert ran == ["host"] and teardown.interrupted
        with pytest.raises(KeyboardInterrupt):
            teardown.finish()

    def test_a_kind_session_whose_cluster_cannot_be_deleted_still_puts_the_host_back(
        self, tmp_path: Path
    ) -> None:
        """``kind delete`` fails; the engine's stop still runs: its record (the host as it
        was, here only read, so putting it back changes nothing) is put back and
        forgotten, the lease released, and the failure given as a warning."""
        if os.geteuid() != 0:
            message = "the system engine's run takes the host lease only as root"
            if is_ci():
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
        if Path("/sys/class/net", NODE_BRIDGE).exists():
            pytest.skip(f"a real node's bridge {NODE_BRIDGE} is up: a kind run refuses the host")
        lease = tmp_path / "lease"
        engine = SystemEngine(lease_path=lease)
        engine.start()
        assert isinstance(decode_record(lease.read_text()), EngineRecord)
        cluster = KindCluster(name="cjob-none", engine=engine, kind=Path("/bin/false"),
                              bin_dir=tmp_path, node_image="none", work_dir=tmp_path / "w")  # fmt: skip
        with pytest.warns(HostNotRestoredWarning,
                          match="kind cluster: kind delete cluster: kind exited with status 1"):
            tear_down_kind_session(cluster=cluster, engine=engine)
        assert lease.read_text() == "" and engine.record is None
        HostLease.acquire(path=lease).release()
