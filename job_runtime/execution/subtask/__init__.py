"""The subtask side: what runs inside each task of the job's Spark barrier stage.

``runtime`` is one subtask (registration, channels, one thread per stage); ``task``,
``source_task`` and ``keyed_task`` are those threads; ``uploader`` takes their snapshots' slow part off them; and
``worker_daemon`` is Spark's Python worker daemon with all of it imported.
"""

SUBTASK_MODULES = ("job_runtime.execution.subtask.runtime",
                   "job_runtime.execution.subtask.source_task",
                   "job_runtime.execution.subtask.keyed_task")
"""What a subtask imports beyond PySpark: a Python worker that has these loaded (a
standby's warmed-up worker, or one forked from :mod:`.worker_daemon`) starts a
subtask without importing the runtime first."""
