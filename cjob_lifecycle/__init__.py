"""The lifecycle of a CheckpointedJob, shared by the operator and the embedded runner.

``plan(observed) -> Plan(actions, status)`` is the one state machine of a job:
phases, conditions, restarts with backoff, start timeouts, last-state upgrades,
suspend and fencing. It is pure: a backend observes the world into
:class:`~cjob_lifecycle.observed.Observed`, calls :func:`~cjob_lifecycle.plan.plan`
and carries out the returned :mod:`~cjob_lifecycle.actions`. The operator's backend
is the Kubernetes API (``cjob_operator.reconcile``); the embedded runner's is a local
process group and a file store (``cjob.local_backend``). Because both drive the same
function, a job behaves the same way on a laptop and on a cluster by construction.

This package imports no Kubernetes client, kopf or Spark (an import-linter contract
holds the line), so the ``cjob`` CLI can use it with only the base dependencies.
"""
