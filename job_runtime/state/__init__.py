"""Keyed state: the hashmap backend and the handles user functions see."""

from job_runtime.state.handles import MapState, ValueState
from job_runtime.state.hashmap import HashMapStateBackend, KeyedStateSnapshot

__all__ = ["HashMapStateBackend", "KeyedStateSnapshot", "MapState", "ValueState"]
