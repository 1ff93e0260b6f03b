"""A kind run killed with its cluster up (``kill -9`` of its whole process group, as a
cancelled CI job ends) is put back by the next run: once that run has stopped, the
kernel settings, routes, links and iptables rules are those from before the killed run.

The killed run is a child process running the same engine and cluster code as the
session (``DockerEngine`` or ``SystemEngine``, the node image, ``KindCluster``), until
its node is Ready. The next run is the session's own ``kind_cluster``: a second
cluster start and stop of the test's own would cost the tier a minute more, so the
killed run happens before the session's cluster starts (this module is collected
before the scenarios, and the test asks for ``kind_cluster`` only after the kill).
Its start takes the host lease, finds the killed run's record and puts the host back
before recording the host itself, which the test checks at once; the comparison of
the whole host with its state before the killed run is made after the session's
cluster and engine stopped, in the teardown of the session fixture
``killed_kind_run`` (set up before ``kind_cluster``, so torn down after it). The test
costs the tier the killed run's start (under a minute with the node image cached) and
the clear-up of it (seconds).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from paths import REPO

from e2e.controlplane.binaries import ALL_BINARIES
from e2e.controlplane.pytest_plugin import require_binaries, unavailable
from e2e.kind.cluster import SERVICE_CIDR, KindCluster
from e2e.kind.engine import NODE_BRIDGE, missing_tools, system_engine_answers
from e2e.kind.engine_record import EngineRecord, recorded_dockerd, running
from e2e.kind.routes import gateway, routes_for
from e2e.realnode.host import SYSCTLS, read_sysctl
from e2e.realnode.lease import LEASE_PATH, claim_host, decode_record

pytestmark = [pytest.mark.timeout(1800)]

READY = "killed-run: cluster ready"

#: The killed run: the session's engine, the node image built here (or
#: ``KIND_NODE_IMAGE``), a cluster; then it waits to be killed.
CHILD = textwrap.dedent(f"""
    import os, sys, time
    from pathlib import Path
    from e2e.kind.cluster import KindCluster
    from e2e.kind.engine import choose_engine
    from e2e.kind.node_image import build_node_image

    bin_dir, work, name = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    work.mkdir(parents=True, exist_ok=True)
    say = lambda line: print(line, flush=True)
    engine = choose_engine(log=say)
    engine.start()
    configured = os.environ.get("KIND_NODE_IMAGE")
    image = configured or build_node_image(engine=engine, bin_dir=bin_dir, log=say)
    cluster = KindCluster(name=name, engine=engine, kind=bin_dir / "kind", bin_dir=bin_dir,
                          node_image=image, local_image=configured is None, log=say,
                          work_dir=work)
    cluster.create()
    nodes = cluster.rest().get("/api/v1/nodes")["items"]
    ready = [c["status"] for n in nodes for c in n["status"]["conditions"]
             if c["type"] == "Ready"]
    assert ready == ["True"], nodes
    say({READY!r})
    time.sleep(3600)
""")


@dataclass(frozen=True)
class HostState:
    """What the test compares: the kernel settings a node changes, the routes of both
    families, the links' names, and both families' iptables rules (without counters)."""

    sysctls: dict[str, str | None]
    routes: tuple[str, ...]
    links: tuple[str, ...]
    rules: tuple[str, ...]

    @classmethod
    def read(cls) -> HostState:
        return cls(
            sysctls={name: read_sysctl(name) for name in SYSCTLS},
            routes=tuple(_route(line) for family in ("-4", "-6")
                         for line in _lines("ip", family, "route", "show")),
            links=tuple(sorted(_link_name(line) for line in _lines("ip", "-o", "link", "show"))),
            rules=_rules(_output("iptables-save")) + _rules(_output("ip6tables-save")),
        )

    def differences(self, other: HostState) -> list[str]:
        found = [f"sysctl {name}: {value} before, {other.sysctls[name]} now"
                 for name, value in self.sysctls.items() if other.sysctls[name] != value]
        for what in ("routes", "links", "rules"):
            mine, theirs = set(getattr(self, what)), set(getattr(other, what))
            found += [f"{what}: gone: {line}" for line in sorted(mine - theirs)]
            found += [f"{what}: added: {line}" for line in sorted(theirs - mine)]
        return found


def _output(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout


def _lines(*argv: str) -> list[str]:
    return [line.rstrip() for line in _output(*argv).splitlines() if line.strip()]


def _route(line: str) -> str:
    """A route without the seconds an IPv6 route learned from the network has left."""
    return re.sub(r" expires \d+sec", "", line)


def _link_name(line: str) -> str:
    """``3: veth1@if2: <...>`` -> ``veth1``."""
    return line.split(": ")[1].split("@")[0]


def _rules(dump: str | None) -> tuple[str, ...]:
    """``iptables-save``'s rules without comments (dates) or packet and byte counters."""
    return tuple(re.sub(r" \[\d+:\d+\]$", "", line) for line in (dump or "").splitlines()
                 if line.strip() and not line.startswith("#"))


@dataclass(frozen=True)
class KilledRun:
    before: HostState
    record: EngineRecord
    seconds_to_ready: float


def _wait_ready(child: subprocess.Popen[bytes], log: Path, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while READY not in log.read_text(errors="replace"):
        if child.poll() is not None or time.monotonic() > deadline:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
            state = f"exited {child.returncode}" if child.returncode is not None else "timed out"
            pytest.fail(f"the run to be killed did not come up ({state}):\n{tail}")
        time.sleep(1)


def _check_first() -> None:
    """The killed run needs the host lease: the session's cluster must not run yet."""
    try:
        record = decode_record(LEASE_PATH.read_text())
    except (OSError, ValueError):
        return
    if isinstance(record, EngineRecord) and record.pid == os.getpid():
        pytest.fail("the session's kind cluster already runs: this test must run before any "
                    "test that uses it", pytrace=False)  # fmt: skip


@pytest.fixture(scope="session")
def killed_kind_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KilledRun]:
    """The host before, a kind run killed with its cluster Ready, and at the end of the
    session the host compared with the one before."""
    if os.geteuid() != 0:
        unavailable("putting the host back after a killed kind run needs root")
    missing = [] if system_engine_answers() else missing_tools()
    if missing:
        unavailable("kind scenarios need a Docker engine: " + "; ".join(missing))
    bin_dir = require_binaries(ALL_BINARIES)
    _check_first()
    work = tmp_path_factory.mktemp("killed-run")
    log = work / "run.log"
    before = HostState.read()
    started = time.monotonic()
    with log.open("wb") as out:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(bin_dir), str(work / "cluster"),
             f"cjob-killed-{secrets.token_hex(3)}"],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_ready(child, log, timeout=900)
        ready = time.monotonic() - started
        _kill(child)
        record = decode_record(LEASE_PATH.read_text())
        assert isinstance(record, EngineRecord) and record.pid == child.pid, record
    except BaseException:
        _kill(child)
        _put_back()
        raise
    try:
        yield KilledRun(before=before, record=record, seconds_to_ready=ready)
    finally:
        _put_back()  # had the session's run not started
    differences = before.differences(HostState.read())
    assert not differences, ("after a killed kind run and the next run to its end, the host "
                             "differs from before the killed run:\n" + "\n".join(differences))


def _kill(child: subprocess.Popen[bytes]) -> None:
    """``kill -9`` of the run's whole process group; its engine, in a session of its
    own, outlives it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _put_back() -> None:
    """What a killed run left, put back by taking the lease (a no-op once the session's
    own run took it and stopped)."""
    claim_host(bridge=NODE_BRIDGE).release()


def test_a_kind_run_killed_with_its_cluster_up_is_put_back_by_the_next_run(
    killed_kind_run: KilledRun,
    request: pytest.FixtureRequest,
    record_property: Callable[[str, object], None],
) -> None:
    killed = killed_kind_run
    # The kill left the run's changes behind: its engine, its cluster's routes.
    assert killed.record.clusters and len(killed.record.routes) == 2
    via = killed.record.routes[0].via
    assert via in [gateway(line) for line in routes_for(SERVICE_CIDR)]
    private = killed.record.private
    left_engine = None if private is None else recorded_dockerd(private.pid_file)
    assert private is None or left_engine is not None, "the killed run's dockerd outlives it"

    started = time.monotonic()
    cluster: KindCluster = request.getfixturevalue("kind_cluster")
    record_property("killed_run_seconds_to_ready", round(killed.seconds_to_ready, 1))
    record_property("next_run_start_seconds", round(time.monotonic() - started, 1))

    # The next run put the host back before recording it: what it will restore is the
    # host from before the killed run.
    assert left_engine is None or not running(left_engine)
    record = cluster.engine.record
    assert record is not None and record.pid == os.getpid()
    before = killed.before
    assert record.snapshot.sysctls == {k: v for k, v in before.sysctls.items() if v is not None}
    assert sorted(record.snapshot.links) == list(before.links)
    assert _rules(record.snapshot.iptables) + _rules(record.snapshot.ip6tables) == before.rules
    assert [route.previous for route in record.routes] == [
        route.previous for route in killed.record.routes]
