"""Workflows: a tenant's versioned DAGs of tool, agent, human and map nodes,
run as ordinary tasks by the same runner (the orchestrator is the run's
decision maker, in place of a model)."""
