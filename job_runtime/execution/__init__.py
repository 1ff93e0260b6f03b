"""Running a pipeline: the driver side and the subtask side, and the little both read.

:mod:`~job_runtime.execution.driver` runs in the driver process: it resolves the
restore point, starts Spark and the coordinator, and runs the job's one barrier
stage (or waits as a warm standby). :mod:`~job_runtime.execution.subtask` runs in
the stage's Spark tasks: one subtask each, with a thread per stage. The driver side
imports the subtask side (its stage's function is the subtask's entry), never the
other way round. What both read stays here: the subtask's settings the driver ships
(``config``), building the pipeline from the entrypoint (``entrypoint``), cutting it
into stages (``stages``) and when the process started (``process_clock``).
"""
