"""Keyed state: the hashmap backend, the handles user functions see, reading a
checkpoint's state from Python (:func:`read`, :func:`operators`) and writing a snapshot
from a table (:func:`write`)."""

from job_runtime.state.checkpoint_reader import OperatorState, StateReadError, operators, read
from job_runtime.state.handles import MapState, ValueState
from job_runtime.state.hashmap import HashMapStateBackend, KeyedStateSnapshot
from job_runtime.state.snapshot_writer import StateWriteError, write

__all__ = ["HashMapStateBackend", "KeyedStateSnapshot", "MapState", "OperatorState",
           "StateReadError", "StateWriteError", "ValueState", "operators", "read", "write"]
