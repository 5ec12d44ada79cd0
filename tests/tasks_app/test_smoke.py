import pytest

from tasks_app.machine import TaskStatus
from tests.factories import submit
from tests.helpers import drive


@pytest.mark.django_db(transaction=True)
def test_a_scripted_task_runs_to_success(world):
    task = submit(world.tenant, [
        {"tool": "lookup_order", "args": {"order_id": "A-1"}},
        {"final": {"ok": True}},
    ])
    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED
    assert task.result == {"ok": True}
    assert task.steps.count() == 2
