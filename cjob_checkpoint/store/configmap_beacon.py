"""The driver beacon's two records on the job's checkpoint ConfigMap (see
:mod:`cjob_spec.driver_beacon`).

- Where the active driver's beacon listens, which a standby reads from the watch it
  holds for its promotion anyway.
- A standby's report that the active driver is lost: every change of the ConfigMap
  wakes the operator's pass over the job.

Every driver may already patch this one ConfigMap, so neither needs a right of its
own. A merge patch touches only its annotation, never the pointers or the fence; a
driver's next compare-and-swap of the store reads the object again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from cjob_checkpoint.store.configmap_client import (
    DEFAULT_REQUEST_TIMEOUT,
    core_v1_api,
    new_api_client,
)
from cjob_spec.driver_beacon import (
    BEACON_ANNOTATION,
    DRIVER_LOST_ANNOTATION,
    BeaconAddress,
    BeaconSignalError,
    DriverLost,
)

log = logging.getLogger(__name__)


def beacon_in(annotations: Mapping[str, str]) -> BeaconAddress | None:
    """The beacon a ConfigMap's ``annotations`` record; ``None`` if none, or unreadable
    (a newer release's: the standby then only waits for its promotion, as before)."""
    text = annotations.get(BEACON_ANNOTATION)
    if not text:
        return None
    try:
        return BeaconAddress.decode(text)
    except BeaconSignalError as exc:
        log.warning("standby: ignoring the active driver's beacon address: %s", exc)
        return None


class BeaconRecords:
    """Writes the beacon's address and loss reports, one bounded request each."""

    def __init__(self, *, api: Any, namespace: str, store: str,
                 request_timeout: tuple[float, float] = DEFAULT_REQUEST_TIMEOUT) -> None:
        self.api = api
        self.namespace = namespace
        self.store = store
        self.request_timeout = request_timeout

    def publish(self, address: BeaconAddress) -> None:
        """Record ``address`` on the store's ConfigMap."""
        body = {"metadata": {"annotations": {BEACON_ANNOTATION: address.encode()}}}
        self.api.patch_namespaced_config_map(self.store, self.namespace, body,
                                             _request_timeout=self.request_timeout)

    def report_lost(self, report: DriverLost) -> None:
        """Record ``report`` on the store's ConfigMap."""
        body = {"metadata": {"annotations": {DRIVER_LOST_ANNOTATION: report.encode()}}}
        self.api.patch_namespaced_config_map(self.store, self.namespace, body,
                                             _request_timeout=self.request_timeout)


def open_beacon_records(*, namespace: str, store: str) -> BeaconRecords:
    api = core_v1_api(new_api_client(where=f"configmap:{namespace}/{store}"))
    return BeaconRecords(api=api, namespace=namespace, store=store)
