"""Channels between subtasks: framed batches and events over TCP, with credit-based flow control."""
