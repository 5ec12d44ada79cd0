"""Tools: the registry, the executor (python and http kinds), the idempotency
ledger and the demo tools."""
