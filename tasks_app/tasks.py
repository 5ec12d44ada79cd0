"""Celery entry points: ids in, call a service, nothing else.

`compensate_task` hands a failed task's compensation to this process's
compensation threads (`runner.compensation.Compensations`) in the same way.

`advance_task` hands the task to this worker process's driver
(`runner.driver`), which advances it on the process's event loop; the message
is done once handed over (the pool process blocks only while the driver is
full). A slice lost with its process is found by the recovery sweep once its
lease expires; the lease makes a duplicate delivery harmless.

`CELERY` is how `services.dispatch` hands work to them (registered by
`TasksAppConfig.ready`: the services do not import their callers).
"""
from __future__ import annotations

from celery import shared_task

from .runner.compensation import compensations
from .runner.driver import driver
from .runner.sweeper import locked_sweep
from .services.admission import admit_handed_over
from .services.dispatch import Executor


@shared_task(name="tasks_app.tasks.advance_task", ignore_result=True)
def advance_task(task_id: int) -> str:
    driver.submit(int(task_id), hand_off=True)
    return "driven"


@shared_task(name="tasks_app.tasks.recovery_sweep", ignore_result=True)
def recovery_sweep() -> dict[str, int]:
    report = locked_sweep()
    if report is None:  # a worker's own sweeper is sweeping right now
        return {}
    return {"admitted": report.admitted, "requeued": report.requeued,
            "approvals_expired": report.approvals_expired}


@shared_task(name="tasks_app.tasks.compensate_task", ignore_result=True)
def compensate_task(task_id: int) -> str:
    compensations.submit(int(task_id))  # beside the slices, off this pool thread
    return "handed"


@shared_task(name="tasks_app.tasks.admit_tasks", ignore_result=True)
def admit_tasks() -> int:
    return len(admit_handed_over())


CELERY = Executor(
    advance=lambda task_id, delay_s: advance_task.apply_async(
        (task_id,), countdown=max(0.0, delay_s)),
    compensate=lambda task_id: compensate_task.apply_async((task_id,)),
    admit=lambda: admit_tasks.apply_async(),
)
