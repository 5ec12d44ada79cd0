"""Orchestration: advance a task one durable step at a time, inside a lease."""
