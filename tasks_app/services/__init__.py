"""Use cases, one function each (tasks, agents, their versions and releases,
spend, quotas' admission and spend limits, replay, the demo), and the registries the
layers below call into (`dispatch`, `events`, `task_traces`).

They write tasks, steps and events only through the store (`tasks_app.store`),
where a task's status changes, through the state machine's guard."""
