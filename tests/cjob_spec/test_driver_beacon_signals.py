"""The driver beacon's records read back what was written, and refuse anything else."""

from __future__ import annotations

import json

import pytest

from cjob_spec.driver_beacon import (
    MAX_LINE_BYTES,
    BeaconAddress,
    BeaconMessage,
    BeaconSignalError,
    DriverLost,
)


def test_every_record_reads_back_what_was_written() -> None:
    address = BeaconAddress(attempt=3, host="10.0.0.7", port=41234)
    assert BeaconAddress.decode(address.encode()) == address
    for kind in ("hello", "bye"):
        message = BeaconMessage(kind=kind, attempt=2)  # type: ignore[arg-type]
        assert message.encode().endswith(b"\n")
        assert BeaconMessage.decode(message.encode().strip()) == message
    lost = DriverLost(attempt=4, pod="clicks-standby-3", at=1_700_000_000.25,
                      detail="its connection closed")
    assert DriverLost.decode(lost.encode()) == lost


@pytest.mark.parametrize(("text", "says"), [
    ("", "not valid JSON"),
    ("[1]", "expected a JSON object"),
    ('{"attempt": 1, "host": "h", "port": 1}', "format version None"),
    ('{"version": 2, "attempt": 1, "host": "h", "port": 1}', "format version 2"),
    ('{"version": 1, "attempt": 0, "host": "h", "port": 1}', "attempt must be a number >= 1"),
    ('{"version": 1, "attempt": true, "host": "h", "port": 1}', "attempt must be"),
    ('{"version": 1, "attempt": 1, "host": "", "port": 1}', "host must be"),
    ('{"version": 1, "attempt": 1, "host": "h", "port": 70000}', "port must be within"),
    ('{"version": 1, "attempt": 1, "host": "h", "port": "80"}', "port must be within"),
])
def test_a_beacon_address_that_cannot_be_read_says_why(text: str, says: str) -> None:
    with pytest.raises(BeaconSignalError, match=says):
        BeaconAddress.decode(text)


def test_a_beacon_message_is_a_short_hello_or_bye() -> None:
    with pytest.raises(BeaconSignalError, match="kind must be hello or bye"):
        BeaconMessage.decode(b'{"version": 1, "kind": "promote", "attempt": 1}')
    with pytest.raises(BeaconSignalError, match="longer than"):
        BeaconMessage.decode(b"{" + b" " * MAX_LINE_BYTES + b"}")
    with pytest.raises(BeaconSignalError, match="not valid JSON"):
        BeaconMessage.decode(b"\xff\xfe")


@pytest.mark.parametrize("at", ["soon", None, -1, float("nan"), float("inf"), True,
                                pytest.param(10 ** 400, id="a-400-digit-number"),
                                pytest.param(1e300, id="beyond-any-date"),
                                pytest.param(253_402_300_800, id="after-the-year-9999")])
def test_a_loss_report_needs_a_real_time(at: object) -> None:
    text = json.dumps({"version": 1, "attempt": 1, "pod": "p", "at": at, "detail": ""})
    with pytest.raises(BeaconSignalError, match="at must be a time"):
        DriverLost.decode(text)


def test_a_loss_reports_detail_is_bounded_for_the_event_it_becomes() -> None:
    text = json.dumps({"version": 1, "attempt": 1, "pod": "p", "at": 5, "detail": "x" * 10_000})
    assert len(DriverLost.decode(text).detail) == 200
    with pytest.raises(BeaconSignalError, match="detail must be a string"):
        DriverLost.decode(json.dumps({"version": 1, "attempt": 1, "pod": "p", "at": 5,
                                      "detail": 5}))


@pytest.mark.parametrize("pod", [None, "", 5, "x" * 254])
def test_a_loss_report_names_the_standby_that_made_it(pod: object) -> None:
    text = json.dumps({"version": 1, "attempt": 1, "pod": pod, "at": 5, "detail": ""})
    with pytest.raises(BeaconSignalError, match="pod must be a pod name"):
        DriverLost.decode(text)
