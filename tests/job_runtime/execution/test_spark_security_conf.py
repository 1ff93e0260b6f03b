"""Spark's own RPC between the driver and executor pods: authenticated and encrypted on
Kubernetes unless the job's ``spark.conf`` says otherwise; untouched in local mode."""

from __future__ import annotations

from job_runtime.execution.driver.spark_start import security_conf

K8S = "k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"


def test_on_kubernetes_spark_authenticates_and_encrypts_its_rpc() -> None:
    assert security_conf(master=K8S, user_conf={}) == {
        "spark.authenticate": "true", "spark.network.crypto.enabled": "true"}


def test_local_mode_leaves_spark_rpc_alone() -> None:
    assert security_conf(master="local[2,4]", user_conf={}) == {}


def test_the_users_choice_of_encryption_wins() -> None:
    conf = security_conf(master=K8S, user_conf={"spark.network.crypto.enabled": "false"})
    assert conf == {"spark.authenticate": "true"}


def test_a_user_who_turns_authentication_off_gets_no_encryption_forced_on() -> None:
    assert security_conf(master=K8S, user_conf={"spark.authenticate": "false"}) == {}
