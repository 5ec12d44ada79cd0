"""The human loop: approvals, questions and reconciliations."""
