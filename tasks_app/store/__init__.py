"""The store: the one place that writes tasks, steps, events and ledger rows.

Everything above it (the runner, admission, retries, the context summaries,
the human-decision services, the API) calls these modules and writes none of
those rows itself (the ledger's own statements are `tools_app.executor.ledger`,
in the same layer):

- `tasks`: a task's transitions (`task_transition`, through the state machine's
  guard) and the guarded writes that are not transitions;
- `creation`: a task's row, a retry's copies of its inherited steps, and the
  `task_created` event;
- `leases`: the lease's statements (take, extend, release; one heartbeat for
  a process's many leases);
- `counters`: plain counters that never move the version (model calls and
  usage, a step's errors, a model's failures in a row);
- `writes`: a commit described once as a `Commit` (version guard, rows,
  ledger claim or record, event, and the effects of the transition); from it
  come the one PostgreSQL statement and the ORM path (SQLite);
- `commits`: the runner's decision, outcome and final answer, admission's start;
- `steps`: the step state machine (`STEP_TRANSITIONS`, one guard) and every
  write of a step's status;
- `events`: the one way an event row is written, and its publication after commit;
- `effects`: what a transition brings with it (lease and timestamps, closing
  open work, admission after an end, compensation scheduling);
- `hooks`: what layers above register to follow the store (event hooks,
  publication, sweep hooks, admission, compensation, open human requests);
- `statement`: the PostgreSQL statement of a commit's shape; `sql`: table
  names from the models' `_meta`, and running one statement.
"""
