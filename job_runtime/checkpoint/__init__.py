"""What a checkpoint is, as data: the ``_metadata`` model and its typed JSON reader.

Nothing here talks to storage, Spark or the network, so the coordinator, the
subtasks, the driver's restore resolution and tests all read one shape.
"""
