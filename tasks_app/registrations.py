"""tasks_app's registrations with its own lower layers, made once from
`TasksAppConfig.ready`: what the services must trigger above them is handed to
them here, so that no service imports the runner or the Celery entry points.

- `services.dispatch`: who runs a task's slices and compensations, per
  `TETHER_RUNNER` mode (Celery workers, or the embedded runner);
- `services.hooks.on_slot_freed`: admission, after a task leaves RUNNING.
"""
from __future__ import annotations

from .runner.embedded import EMBEDDED
from .services.admission import admission_after_commit
from .services.dispatch import register_executor
from .services.hooks import on_slot_freed
from .tasks import CELERY


def register() -> None:
    register_executor("celery", CELERY)
    register_executor("embedded", EMBEDDED)
    on_slot_freed(admission_after_commit)
