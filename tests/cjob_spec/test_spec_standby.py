"""spec.standby: a warm standby driver is off unless asked for, and mistakes are named."""

from __future__ import annotations

import pytest
from spec_documents import minimal

from cjob_spec import SpecError, parse_job, spec_hash


def test_a_job_has_no_standby_unless_it_asks_for_one() -> None:
    assert parse_job(minimal()).spec.standby.enabled is False


def test_standby_enabled_true_asks_for_a_standby_driver() -> None:
    document = minimal()
    document["spec"]["standby"] = {"enabled": True}
    assert parse_job(document).spec.standby.enabled is True


def test_an_empty_standby_section_keeps_the_default() -> None:
    document = minimal()
    document["spec"]["standby"] = {}
    assert parse_job(document).spec.standby.enabled is False


def test_standby_enabled_that_is_not_a_boolean_is_refused_with_its_field() -> None:
    document = minimal()
    document["spec"]["standby"] = {"enabled": "yes"}
    with pytest.raises(SpecError) as caught:
        parse_job(document)
    assert caught.value.field == "spec.standby.enabled"


def test_an_unknown_standby_field_is_refused_with_its_name() -> None:
    document = minimal()
    document["spec"]["standby"] = {"enable": True}
    with pytest.raises(SpecError, match="enable"):
        parse_job(document)


def test_standby_that_is_not_a_mapping_is_refused() -> None:
    document = minimal()
    document["spec"]["standby"] = True
    with pytest.raises(SpecError, match=r"spec\.standby"):
        parse_job(document)


def test_turning_the_standby_on_or_off_does_not_restart_the_running_driver() -> None:
    document = minimal()
    before = spec_hash(parse_job(document))
    document["spec"]["standby"] = {"enabled": True}
    assert spec_hash(parse_job(document)) == before


@pytest.mark.parametrize("value", ["250m", "0.5", "2"])
def test_the_driver_pods_cpu_request_may_be_a_fraction_of_a_core(value: str) -> None:
    # A standby doubles the driver's requests; a fractional request keeps it schedulable.
    document = minimal()
    document["spec"]["spark"] = {"conf": {"spark.kubernetes.driver.request.cores": value}}
    assert parse_job(document).spec.spark.conf["spark.kubernetes.driver.request.cores"] == value


@pytest.mark.parametrize("value", ["half", "0", "0m", "-1", "1.5.2"])
def test_a_driver_cpu_request_that_is_no_quantity_is_refused_with_its_field(value: str) -> None:
    document = minimal()
    document["spec"]["spark"] = {"conf": {"spark.kubernetes.driver.request.cores": value}}
    with pytest.raises(SpecError) as caught:
        parse_job(document)
    assert caught.value.field == "spec.spark.conf.spark.kubernetes.driver.request.cores"
