"""Manifests of the objects the operator creates for a CheckpointedJob, as pure functions.

One module per kind of object: :mod:`~cjob_operator.builders.pods` (an attempt's
driver, a standby driver, the cleanup pod), :mod:`~cjob_operator.builders.spark` (the
Spark settings the operator owns, the executors' pod template),
:mod:`~cjob_operator.builders.companions` (the Service, account, rights, secret,
NetworkPolicy and checkpoint ConfigMap a driver runs with), and
:mod:`~cjob_operator.builders.metadata` (the labels and owner every object carries).
"""

from cjob_operator.builders.companions import (
    build_checkpoint_configmap,
    build_driver_service,
    build_network_policy,
    build_role,
    build_role_binding,
    build_service_account,
    build_spark_auth_secret,
)
from cjob_operator.builders.metadata import Manifest, owner_reference, standard_labels
from cjob_operator.builders.pods import build_cleanup_pod, build_driver_pod, build_standby_pod

__all__ = [
    "Manifest",
    "build_checkpoint_configmap",
    "build_cleanup_pod",
    "build_driver_pod",
    "build_driver_service",
    "build_network_policy",
    "build_role",
    "build_role_binding",
    "build_service_account",
    "build_spark_auth_secret",
    "build_standby_pod",
    "owner_reference",
    "standard_labels",
]
