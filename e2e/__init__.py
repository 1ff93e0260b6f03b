"""Whole-system scenarios: the local control plane with a process node, and kind."""
