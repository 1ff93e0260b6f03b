"""Operators as they run inside a task: record chains and keyed, stateful operators."""
