"""The host lease's records: what a real node or a kind run writes before it changes the
host, read back by the next run to take the lease, and refused with a reason when this
code cannot read it. (Holding the lease and undoing a killed node on the real host:
``tests/e2e/realnode/test_lease.py``; a killed kind run: ``tests/e2e/kind/``.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from e2e.kind.engine_record import EngineKind, EngineRecord, PrivateEngine
from e2e.kind.routes import SavedRoute
from e2e.realnode.host import HostSnapshot, read_sysctl
from e2e.realnode.lease import (
    HostBusyError,
    HostLease,
    NodeRecord,
    claim_host,
    decode_record,
    encode_record,
)


def _snapshot(**changes: object) -> HostSnapshot:
    fields: dict[str, object] = {
        "sysctls": {"net.ipv4.ip_forward": "0", "vm.panic_on_oom": "0"},
        "iptables": "*nat\nCOMMIT\n",
        "ip6tables": None,
        "netns": frozenset({"a"}),
        "links": frozenset({"lo", "eth0"}),
        "existing": frozenset({Path("/run/containerd")}),
    }
    fields.update(changes)
    return HostSnapshot(**fields)  # type: ignore[arg-type]


def _node(tmp_path: Path) -> NodeRecord:
    return NodeRecord(pid=1234, work_dir=tmp_path / "node", owns_work_dir=True,
                      bin_dir=tmp_path / "bin", snapshot=_snapshot())  # fmt: skip


def _engine(tmp_path: Path) -> EngineRecord:
    run_dir = tmp_path / "docker"
    return EngineRecord(
        pid=4321, private=PrivateEngine(run_dir=run_dir, pid_file=run_dir / "dockerd.pid"),
        docker_host=f"unix://{run_dir / 'docker.sock'}", snapshot=_snapshot(),
        clusters=("cjob-e2e-abc123",),
        routes=(SavedRoute(destination="10.96.0.0/16", via="172.18.0.2",
                           previous=("10.96.0.0/16 via 192.0.2.9 dev eth0",)),
                SavedRoute(destination="10.244.0.0/16", via="172.18.0.2")),
    )  # fmt: skip


#: A node's record as the lease held it before the kind engine took part (version 1).
VERSION_1 = {
    "version": 1, "pid": 77, "workDir": "/tmp/cjob-node-x", "ownsWorkDir": True,
    "binDir": "/opt/bin", "cgroup": "kubepods",
    "snapshot": {"sysctls": {"kernel.panic": "0"}, "iptables": None, "ip6tables": None,
                 "netns": [], "links": ["lo"], "existing": []},
}  # fmt: skip


class TestTheRecord:
    def test_a_node_record_reads_back_as_it_was_written(self, tmp_path: Path) -> None:
        record = _node(tmp_path)
        assert decode_record(encode_record(record)) == record

    def test_a_private_engines_record_reads_back_with_its_clusters_and_routes(
        self, tmp_path: Path
    ) -> None:
        record = _engine(tmp_path)
        assert decode_record(encode_record(record)) == record
        written = json.loads(encode_record(record))
        assert (written["version"], written["holder"], written["engine"]) == (
            2, "kindEngine", "private")

    def test_a_system_engines_record_names_no_state_folder(self, tmp_path: Path) -> None:
        record = EngineRecord(pid=1, private=None, docker_host="", snapshot=_snapshot())
        read = decode_record(encode_record(record))
        assert read == record
        assert isinstance(read, EngineRecord) and read.kind is EngineKind.SYSTEM
        assert json.loads(encode_record(record))["runDir"] is None

    def test_a_record_grows_by_cluster_and_route_and_keeps_the_first_snapshot(
        self, tmp_path: Path
    ) -> None:
        first = EngineRecord(pid=1, private=None, docker_host="", snapshot=_snapshot())
        route = SavedRoute(destination="10.96.0.0/16", via="172.18.0.2")
        grown = first.with_cluster("c1").with_route(route)
        assert (grown.clusters, grown.routes, grown.snapshot) == (("c1",), (route,),
                                                                  first.snapshot)

    def test_a_node_record_of_version_1_is_still_read(self) -> None:
        record = decode_record(json.dumps(VERSION_1))
        assert isinstance(record, NodeRecord)
        assert (record.pid, record.work_dir, record.snapshot.sysctls) == (
            77, Path("/tmp/cjob-node-x"), {"kernel.panic": "0"})

    @pytest.mark.parametrize(
        ("text", "says"),
        [
            ("{", "not JSON"),
            ("[]", "not a JSON object"),
            ('{"version": 3, "holder": "node"}', "version 3, this code reads 1 and 2"),
            ('{"pid": 1}', "version None, this code reads 1 and 2"),
            ('{"version": 2, "holder": "kubelet"}',
             "holder 'kubelet' is unknown, this code reads kindEngine, node"),
            ('{"version": 2, "pid": 1}', "holder None is unknown"),
            ('{"version": 1, "pid": 1}', "missing or malformed"),
            ('{"version": 2, "holder": "kindEngine", "pid": 1}', "missing or malformed"),
            ('{"version": 2, "holder": "kindEngine", "pid": 1, "engine": "remote"}',
             "missing or malformed.*'remote' is not a valid EngineKind"),
        ],
    )  # fmt: skip
    def test_a_record_that_cannot_be_read_says_why(self, text: str, says: str) -> None:
        with pytest.raises(ValueError, match=says):
            decode_record(text)

    def test_a_record_with_a_wrongly_typed_field_is_refused(self, tmp_path: Path) -> None:
        data = json.loads(encode_record(_engine(tmp_path)))
        data["routes"][0]["previous"] = [1]
        with pytest.raises(ValueError, match="1 is not a string"):
            decode_record(json.dumps(data))

    def test_a_private_engines_record_without_its_pid_file_is_refused(
        self, tmp_path: Path
    ) -> None:
        data = json.loads(encode_record(_engine(tmp_path)))
        data["pidFile"] = None
        with pytest.raises(ValueError, match="None is not a string"):
            decode_record(json.dumps(data))


class TestTheLeaseWithAKindRun:
    def test_a_record_of_an_unknown_version_is_refused_with_what_to_check(
        self, tmp_path: Path
    ) -> None:
        path = tmp_path / "lease"
        path.write_text('{"version": 3, "holder": "node"}')
        with pytest.raises(HostBusyError,
                           match=r"cannot read: version 3, this code reads 1 and 2.*check the "
                                 r"host, then delete the file"):  # fmt: skip
            claim_host(bridge="cjob-none0", path=path)
        assert "version" in path.read_text(), "a record that cannot be read is kept"

    def test_a_second_run_is_told_which_kind_run_holds_the_host(self, tmp_path: Path) -> None:
        path = tmp_path / "lease"
        first = HostLease.acquire(path=path)
        try:
            first.record(_engine(tmp_path))
            with pytest.raises(HostBusyError, match=r"another node runs on this host: a kind "
                                                    r"run \(pid 4321, on a private Docker "
                                                    r"engine in .*docker\)"):  # fmt: skip
                HostLease.acquire(path=path)
        finally:
            first.release()

    def test_the_next_run_finishes_a_killed_kind_runs_stop_and_forgets_its_record(
        self, tmp_path: Path
    ) -> None:
        """A system engine's run (nothing of a private engine to stop), killed before it
        recorded a cluster or route; its kernel settings as they are now, so putting them
        back changes nothing here."""
        path = tmp_path / "lease"
        panic = read_sysctl("kernel.panic")
        settings = {} if panic is None or os.geteuid() != 0 else {"kernel.panic": panic}
        killed = EngineRecord(pid=999_999, private=None, docker_host="",
                              snapshot=_snapshot(sysctls=settings))  # fmt: skip
        lease = HostLease.acquire(path=path)
        lease.record(killed)
        lease.release()  # as the kernel does for a killed holder

        said: list[str] = []
        lease = claim_host(bridge="cjob-none0", path=path, log=said.append)
        try:
            assert lease.previous() is None
        finally:
            lease.release()
        assert said[0] == ("a kind run (pid 999999, on the system Docker engine) was killed "
                           "before it stopped; putting the host back as it found it")
