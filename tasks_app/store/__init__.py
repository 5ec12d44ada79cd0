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
- `shapes` and `writes`: a commit described once as a `Commit` (version
  guard, rows, ledger claim or record, event, and the effects of the
  transition), checked by `write` and written by the connection's backend;
- `backends`: the one interface (`base.Backend`, the ORM's way) and its two
  backends, PostgreSQL's (one prepared statement per commit, lease and
  admission read) and SQLite's; the only place that knows the database;
- `commits`: the runner's decision, outcome and final answer, every other
  kind of decision (`commit_recorded`), admission's start;
- `steps`: the step state machine (`STEP_TRANSITIONS`, one guard) and every
  write of a step's status;
- `events`: the one way an event row is written (and an informational one at
  the task's current version, `event_note`), and its publication after commit;
- `effects`: what a transition brings with it (lease and timestamps,
  admission after an end, compensation scheduling and its marks);
- `hooks`: what layers above register to follow the store (event hooks,
  publication, sweep hooks, admission, compensation, open human requests);
- `sql`: table and column names from the models' `_meta`.
"""
