"""Which nodes of the job's pods stopped reporting: read on demand, remembered briefly.

A pod on a node that died keeps saying Running: the node controller marks the Node's
``Ready`` condition ``Unknown`` after its grace period (about 40 s), and evicts the
pods only when their tolerations of the ``unreachable`` taint run out (300 s by
default), and even then no kubelet is left to finish the deletion. So the operator
asks the Node itself, for the nodes its drivers run on, and replaces a driver whose
node went silent at once: the store's fence, advanced for the next attempt, stops
the old driver should its node come back.

Reading nodes needs ``get`` on ``nodes``, which the chart grants. Without it (an
operator installed by other means) a refused read is logged once and the node is
taken for alive: the job then recovers when the cluster evicts the pod, as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from cjob_operator.cluster import ClusterError
from cjob_operator.observed import node_lost_since

_log = logging.getLogger(__name__)

GONE = datetime.fromtimestamp(0, UTC)
"""The "since" of a node that no longer exists."""
REMEMBER_SECONDS = 5.0
"""How long a reading of a node is reused: passes of every job on it share one read."""


class NodeHealth:
    def __init__(self, *, read_node: Callable[[str], Mapping[str, Any] | None],
                 remember_seconds: float = REMEMBER_SECONDS,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._read = read_node
        self._remember = remember_seconds
        self._monotonic = monotonic
        self._readings: dict[str, tuple[float, datetime | None]] = {}
        self._reported: set[str] = set()
        self._lock = threading.Lock()

    def lost(self, names: Iterable[str]) -> dict[str, datetime]:
        """The nodes among ``names`` that stopped reporting, and since when."""
        found: dict[str, datetime] = {}
        for name in sorted(set(names)):
            since = self._since(name)
            if since is not None:
                found[name] = since
        return found

    def _since(self, name: str) -> datetime | None:
        now = self._monotonic()
        with self._lock:
            remembered = self._readings.get(name)
        if remembered is not None and now - remembered[0] < self._remember:
            return remembered[1]
        try:
            node = self._read(name)
        except ClusterError as exc:
            self._report(name, f"cannot read node {name}, so its loss is noticed only when "
                               f"the cluster evicts its pods: {exc}")
            return None
        # A node deleted outright is as gone as one that went silent; its pods are
        # deleted by the garbage collector soon, but they may still say Running.
        since = node_lost_since(node) if node is not None else GONE
        with self._lock:
            self._readings[name] = (now, since)
        return since

    def _report(self, name: str, message: str) -> None:
        with self._lock:
            first = name not in self._reported
            self._reported.add(name)
        if first:
            _log.warning("%s", message)
