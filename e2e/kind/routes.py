"""Routes a kind run sets on the host, and the routes they replace, put back after.

The host reaches a Service or a pod of the kind cluster at the address a real node's
host uses because the run routes the cluster's Service and pod ranges to the node
container (``ip route replace <range> via <node>``). ``replace`` overwrites whatever
route the host had for that destination, and a stop that only deleted ours would
leave the host without it. So before the route changes, :func:`save_route` keeps the
routes that held exactly that destination (:class:`SavedRoute`, which the engine
writes into the host lease), and :func:`restore_route` deletes only the route the run
set and adds back the saved ones that are missing. Restoring twice is harmless: a
killed run's routes are put back by the next run, and a stopped run's by both its
cluster and its engine.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from e2e.realnode.host import text_of

#: Words ``ip route show`` prints about a route's state, never accepted as input.
STATE_WORDS = frozenset({"linkdown", "dead", "offload", "trap", "rt_offload", "rt_trap",
                         "rt_offload_failed", "pervasive", "notify", "unresolved"})  # fmt: skip
#: The command that changes routes (a test runs it in a network namespace of its own
#: with ``("ip", "-n", name)``).
IP: tuple[str, ...] = ("ip",)


class RouteError(RuntimeError):
    """A route could not be read or set; says which and why."""


@dataclass(frozen=True)
class SavedRoute:
    """A route a run sets (``destination`` via ``via``) and the routes that held that
    destination before it, as ``ip -o route show exact`` printed them (main table)."""

    destination: str
    via: str
    previous: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"destination": self.destination, "via": self.via,
                "previous": list(self.previous)}  # fmt: skip

    @classmethod
    def from_json(cls, data: Any) -> SavedRoute:
        if not isinstance(data, dict):
            raise TypeError("a route is not an object")
        previous = data["previous"]
        if not isinstance(previous, list):
            raise TypeError("previous is not a list")
        return cls(destination=text_of(data["destination"]), via=text_of(data["via"]),
                   previous=tuple(text_of(line) for line in previous))  # fmt: skip


@dataclass(frozen=True)
class RouteRepair:
    """What putting a destination back takes: the routes to delete (the run's), the
    saved ones to add again, and those that are neither (left alone, reported)."""

    delete: tuple[str, ...]
    add: tuple[str, ...]
    foreign: tuple[str, ...]


def words(line: str) -> tuple[str, ...]:
    """A route as ``ip route`` takes it back: the printed line without its state words
    (``linkdown``...) and the line breaks ``-o`` marks with a backslash."""
    return tuple(w for w in line.split() if w not in STATE_WORDS and w != "\\")


def gateway(line: str) -> str | None:
    found = words(line)
    for index, word in enumerate(found[:-1]):
        if word == "via":
            return found[index + 1]
    return None


def plan_repair(route: SavedRoute, *, current: Sequence[str]) -> RouteRepair:
    """Compare the routes now held for the destination with the saved ones.

    A route via the run's gateway that was not there before is the run's: delete it.
    A saved route that is missing (replaced by the run's, or gone with the link it
    used) is added again. Anything else was set by someone else meanwhile.
    """
    before = {words(line) for line in route.previous}
    now = {words(line) for line in current}
    ours = tuple(line for line in current
                 if words(line) not in before and gateway(line) == route.via)  # fmt: skip
    foreign = tuple(line for line in current if words(line) not in before and line not in ours)
    missing = tuple(line for line in route.previous if words(line) not in now)
    return RouteRepair(delete=ours, add=missing, foreign=foreign)


def _ip(destination: str, ip: Sequence[str]) -> list[str]:
    return [*ip, "-6"] if ":" in destination else [*ip]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)


def routes_for(destination: str, *, ip: Sequence[str] = IP) -> list[str]:
    """The routes of the main table for exactly ``destination``, one line each."""
    proc = _run([*_ip(destination, ip), "-o", "route", "show", "exact", destination])
    if proc.returncode != 0:
        raise RouteError(f"ip route show exact {destination}: {proc.stderr.strip()}")
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()]


def save_route(*, destination: str, via: str, ip: Sequence[str] = IP) -> SavedRoute:
    """The route about to be set, with what holds its destination now."""
    return SavedRoute(destination=destination, via=via,
                      previous=tuple(routes_for(destination, ip=ip)))  # fmt: skip


def set_route(route: SavedRoute, *, ip: Sequence[str] = IP) -> None:
    """``ip route replace``: the destination via the run's gateway."""
    proc = _run([*_ip(route.destination, ip), "route", "replace", route.destination,
                 "via", route.via])  # fmt: skip
    if proc.returncode != 0:
        raise RouteError(f"ip route replace {route.destination} via {route.via}: "
                         f"{proc.stderr.strip()}")  # fmt: skip


def restore_route(route: SavedRoute, *, ip: Sequence[str] = IP) -> list[str]:
    """Delete the run's route, add the saved ones back; return what stays different."""
    repair = plan_repair(route, current=routes_for(route.destination, ip=ip))
    problems = []
    for verb, lines in (("del", repair.delete), ("add", repair.add)):
        for line in lines:
            proc = _run([*_ip(route.destination, ip), "route", verb, *words(line)])
            if proc.returncode != 0:
                problems.append(f"ip route {verb} {line}: {proc.stderr.strip()}")
    problems.extend(f"{line} was set by something else meanwhile; left as it is"
                    for line in repair.foreign)  # fmt: skip
    return problems
