"""The runtime's hooks for other apps: event hooks only where `event_append` runs,
and a sweep hook that fails does not stop the sweep or the hooks after it."""
from __future__ import annotations

import pytest

from tasks_app.runner.recovery import recovery_sweep
from tasks_app.store import hooks


@pytest.mark.parametrize("event", sorted(hooks.ONE_STATEMENT_TYPES))
def test_no_hook_for_events_written_in_one_statement(event: str) -> None:
    with pytest.raises(ValueError, match="one statement"):
        hooks.on_event_appended([event], lambda e: None)


@pytest.mark.django_db
def test_a_failing_sweep_hook_does_not_stop_the_sweep() -> None:
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("boom")

    def after() -> None:
        ran.append("after")

    hooks.on_sweep(broken)
    hooks.on_sweep(after)
    try:
        report = recovery_sweep()
    finally:
        hooks._sweep_hooks.remove(broken)
        hooks._sweep_hooks.remove(after)
    assert ran == ["after"] and report.requeued == 0
