"""The driver side: everything ``python -m job_runtime run`` does in its own process.

``run`` takes a driver through its phases; the other modules are the roles it
calls on: starting Spark, opening the store named by ``--store``, resolving the
restore point, the barrier stage's thread, the status file, the exit codes, and a
warm standby's wait with its watch over the active driver's beacon.
"""
