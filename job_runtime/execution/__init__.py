"""Running a pipeline: the driver side (Spark job, coordinator) and the subtask side (tasks)."""
