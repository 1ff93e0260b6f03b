"""Keyed state: the hashmap backend, the handles user functions see, and reading a
checkpoint's state from Python (:func:`read`, :func:`operators`)."""

from job_runtime.state.handles import MapState, ValueState
from job_runtime.state.hashmap import HashMapStateBackend, KeyedStateSnapshot
from job_runtime.state.reader import OperatorState, StateReadError, operators, read

__all__ = ["HashMapStateBackend", "KeyedStateSnapshot", "MapState", "OperatorState",
           "StateReadError", "ValueState", "operators", "read"]
