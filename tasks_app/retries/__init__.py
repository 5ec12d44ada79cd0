"""Retry from a step: continue a FAILED or CANCELED task in a new task without
repeating its effects.

- `services`: the operator's use cases (retry one task, retry many by filter).
- `lineage`: which idempotency key a retried task's call gets, so that a call
  the original already made is answered from the ledger instead of run again.
"""
