"""schedules_app's registrations, made once from `SchedulesConfig.ready`: firing
due schedules as a step of the recovery sweep (`tasks_app.store.hooks.on_sweep`),
and the `agent` target kind (`starters`)."""
from __future__ import annotations

from tasks_app.store.hooks import on_sweep

from .services.agent_runs import agent_exists, agent_run_start
from .services.firing import schedules_fire
from .starters import register_target_kind


def register() -> None:
    on_sweep(schedules_fire)
    register_target_kind("agent", agent_run_start, exists=agent_exists)
