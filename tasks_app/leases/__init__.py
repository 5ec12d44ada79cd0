"""Resource leases: two tool calls on one resource never run at the same time.

A tool that declares `resource` (a template over its arguments,
`tools_app.resources`) takes the lease of the rendered resource, within its
tenant, before each call and gives it back after. The runner's hook is two
calls around a tool call (`tasks_app.runner.executing.admit_call` and `execute`):

    hold = lease_for_call(...)          # before: take it, or wait
    if hold.waiting: ... return LATER   # the task goes back to the queue
    with hold: ...call, commit...       # after: released, whatever happened

- `core`: taking (a row lock for an instant, never across the call), waiting,
  releasing, waking the waiters; events `lease_acquired`, `lease_waiting`,
  `lease_released`, `lease_expired`.
- `takeover`: a lease whose holder died is settled through the ledger first.
- `selectors`: what the API and the console show.
"""
from .core import ResourceHold, lease_for_call

__all__ = ["ResourceHold", "lease_for_call"]
