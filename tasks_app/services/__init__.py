"""Writes. `transitions.task_transition` is the only place a task's status changes."""
