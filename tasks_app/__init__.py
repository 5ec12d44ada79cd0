"""Tasks: the state machine, the step loop, leases, recovery, budgets and the live trace."""
