"""The kind scenarios' own parts that need no engine: the runc shim's rewrite of what a
privileged container asks for, the engine's command line, the cluster configuration
and the node image's inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from e2e.kind import runc_shim
from e2e.kind.cluster import cluster_config
from e2e.kind.engine import dockerd_argv
from e2e.kind.node_image import KUBEADM_PATCH, NODE_DIR, control_plane_images, input_key

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
