"""Checkpoint data that the operator, the runtime and the CLI all stand on.

A checkpoint outlives the process that wrote it: the driver writes it, the
operator and ``cjob`` read the store that points at it, and a later driver
restores it. Everything that must agree on its shape lives here, apart from the
engine that produces it, so that the operator can read a store without Arrow,
Spark or the runtime, and so that no package reaches into another's internals.

Layers, lowest first (kept by an import-linter contract):

* :mod:`~cjob_checkpoint.fields` and :mod:`~cjob_checkpoint.storage`: typed JSON
  fields; file systems (local and S3) and their errors;
* :mod:`~cjob_checkpoint.store`: the completed-checkpoint store and id counter
  over memory, file and ConfigMap backends;
* :mod:`~cjob_checkpoint.checkpoint_storage`: the ``chk-<id>`` directory layout,
  state files and ``_metadata``, which knows the store's pointer type;
* :mod:`~cjob_checkpoint.metadata` and :mod:`~cjob_checkpoint.driver_status`: the
  versioned ``_metadata`` model; the status file a driver writes for its supervisor.
"""
