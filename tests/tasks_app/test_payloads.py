"""Payloads out of row (`tasks_app.payloads`, `store.blobs`): a large tool
output is stored once per tenant and content, its step holds a reference, and
every reader (the API, the next model context) gets it back identical; the
per-task limit is a business error the model is told, an oversized input a 400
that writes nothing; a blob is read only through a task that uses it; archive,
restore and erasure carry the blobs with their tasks. The tool ledger's copy
of a large output is a reference to the same blob, on every path that writes
it, and every reader (a replayed call, a retry, an evaluation, the console)
gets the value back."""
from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from foundations.actors import SYSTEM
from retention_app.services.archive import archive_sweep
from retention_app.services.erasure import subject_erasure
from retention_app.services.restore import task_restore
from tasks_app.context.builder import _truncate, build_context, context_limits
from tasks_app.machine import TaskStatus
from tasks_app.models import PayloadBlob, PayloadUse, Step, Task
from tasks_app.payloads import REF, is_reference, resolve_steps
from tasks_app.snapshot import TaskSnapshot
from tests.api.conftest import client_for
from tests.factories import TenantFactory, make_user, submit
from tests.fakes import python_tools
from tests.fakes.runtime import add_agent, add_tool
from tests.helpers import drive
from tools_app.executor.ledger import claim_or_answer
from tools_app.executor.types import OutcomeKind, ToolCall, ToolContext, ToolOutcome
from tools_app.models import LedgerStatus, ToolExecution
from tools_app.registry import tool_specs

pytestmark = pytest.mark.django_db

SIZE = 100_000
EXPECTED = python_tools.big({"size": SIZE}, None)  # type: ignore[arg-type]


@pytest.fixture
def bulky(world: Any) -> Any:
    add_tool(world.tenant, "big", "big")
    add_agent(world.tenant, "bulky", ["big"])
    return world


def _script(*markers: str, final: Any = None) -> list[dict[str, Any]]:
    # each call's arguments differ (a nonce), its output only by `marker`
    return [*({"tool": "big", "args": {"size": SIZE, "marker": m, "nonce": i}}
              for i, m in enumerate(markers)), {"final": final or {"ok": True}}]


def _run(world: Any, script: list[dict[str, Any]], **kw: Any) -> Task:
    return drive(submit(world.tenant, script, agent="bulky", **kw).pk)


def _raw_outputs(task_id: int) -> list[Any]:
    return list(Step.objects.filter(task_id=task_id, kind="tool").order_by("step_no")
                .values_list("output", flat=True))


def test_a_100_kb_tool_output_is_stored_out_of_row_once_and_reads_back_identical(bulky):
    task = _run(bulky, _script("big", "big"))
    assert task.status == TaskStatus.SUCCEEDED

    raw = _raw_outputs(task.pk)
    assert len(raw) == 2 and all(is_reference(value) for value in raw), raw
    assert raw[0] == raw[1] and raw[0]["size"] > SIZE
    assert len(json.dumps(raw[0])) < 1000  # the row holds a reference, not the output
    blobs = PayloadBlob.objects.filter(tenant=bulky.tenant)
    assert [b.sha256 for b in blobs] == [raw[0][REF]]  # the same output once
    assert PayloadUse.objects.filter(task=task).count() == 2

    steps = client_for(bulky.users["operator"]).get(f"/api/v1/tasks/{task.pk}/steps").json()
    outputs = [s["output"] for s in steps["results"] if s["kind"] == "tool"]
    assert outputs == [EXPECTED, EXPECTED]

    # What the model is shown of the steps is what it would be shown of the
    # output kept inline: the same truncation, the same preview.
    snap = TaskSnapshot.of(Task.objects.get(pk=task.pk))
    context = build_context(snap, tools=tool_specs(tenant_id=bulky.tenant.pk, names=["big"]))
    shown = {view["step_no"]: view.get("output") for view in context.window}
    limit = context_limits()["result_chars"]
    assert shown[1] == _truncate(EXPECTED, limit, "step:1")
    assert shown[2] == _truncate(EXPECTED, limit, "step:2")
    assert shown[1]["preview"] == json.dumps(EXPECTED)[:limit]


def test_small_outputs_stay_in_their_rows(bulky):
    task = _run(bulky, [{"tool": "big", "args": {"size": 100}}, {"final": {"ok": True}}])
    assert task.status == TaskStatus.SUCCEEDED
    assert _raw_outputs(task.pk) == [python_tools.big({"size": 100}, None)]  # type: ignore[arg-type]
    assert not PayloadBlob.objects.exists() and not PayloadUse.objects.exists()


def test_a_tool_output_past_the_task_limit_is_a_business_error_the_model_is_told(
        bulky, settings):
    settings.TETHER = {**settings.TETHER, "TASK_PAYLOAD_MAX_BYTES": 150_000}
    task = _run(bulky, _script("first", "second"))
    assert task.status == TaskStatus.SUCCEEDED  # the task goes on: the model decides
    first, second = Step.objects.filter(task=task, kind="tool").order_by("step_no")
    assert first.status == "SUCCEEDED" and is_reference(first.output)
    assert second.status == "FAILED" and second.output is None
    assert second.error["type"] == "payload_too_large"
    assert second.error["limit"] == 150_000 and second.error["used"] == first.output["size"]
    assert PayloadBlob.objects.count() == 1

    snap = TaskSnapshot.of(Task.objects.get(pk=task.pk))
    context = build_context(snap, tools=tool_specs(tenant_id=bulky.tenant.pk, names=["big"]))
    told = next(view for view in context.window if view["step_no"] == 2)
    assert told["error"]["type"] == "payload_too_large"


def test_an_oversized_input_is_a_400_and_writes_nothing(bulky, settings):
    settings.TETHER = {**settings.TETHER, "TASK_PAYLOAD_MAX_BYTES": 100_000}
    client = client_for(bulky.users["requester"])
    body = {"agent": "bulky", "goal": "too much", "input": {"text": "x" * 150_000},
            "script": [{"final": {}}]}
    answer = client.post("/api/v1/tasks", body, format="json")
    assert answer.status_code == 400, answer.content
    assert "input" in answer.json()["error"]["details"]
    assert not Task.objects.filter(goal="too much").exists()
    assert not PayloadBlob.objects.exists() and not PayloadUse.objects.exists()


def test_a_large_input_is_stored_out_of_row_and_read_back(bulky):
    data = {"text": "y" * 80_000}
    client = client_for(bulky.users["requester"])
    created = client.post("/api/v1/tasks", {"agent": "bulky", "goal": "large input",
                                            "input": data, "script": [{"final": {}}]},
                          format="json")
    assert created.status_code == 201, created.content
    task_id = created.json()["id"]
    assert is_reference(Task.objects.values_list("input", flat=True).get(pk=task_id))
    assert client.get(f"/api/v1/tasks/{task_id}").json()["input"] == data
    assert TaskSnapshot.of(Task.objects.get(pk=task_id)).input == data  # what the model sees


def test_another_tenant_cannot_read_a_blob(bulky):
    task = _run(bulky, _script("secret"))
    [ref] = _raw_outputs(task.pk)
    other = TenantFactory(name="t-other")
    stranger = client_for(make_user(other, "admin"))
    assert stranger.get(f"/api/v1/tasks/{task.pk}/steps").status_code == 404

    # A task of the other tenant whose row names the blob (forged) gets nothing back.
    forged = Task.objects.create(tenant=other, goal="forged", input={}, trace_id="f" * 32)
    step = Step.objects.create(task=forged, step_no=1, kind="tool", status="SUCCEEDED",
                               decision={}, model_log={}, output=ref)
    resolve_steps(forged.pk, [step])
    assert step.output == ref  # still the reference: no blob of its own tenant, no use


def test_an_output_that_looks_like_a_reference_is_stored_as_a_blob(bulky):
    add_tool(bulky.tenant, "mirror", "mirror")
    add_agent(bulky.tenant, "bulky", ["big", "mirror"])
    fake = {REF: "0" * 64, "size": 1}
    task = _run(bulky, [{"tool": "mirror", "args": fake}, {"final": {"ok": True}}])
    [raw] = _raw_outputs(task.pk)
    assert raw[REF] != "0" * 64 and PayloadBlob.objects.filter(sha256=raw[REF]).exists()
    steps = client_for(bulky.users["operator"]).get(f"/api/v1/tasks/{task.pk}/steps").json()
    assert steps["results"][0]["output"] == fake


@pytest.fixture
def archive_dir(settings: Any, tmp_path: Path) -> Path:
    settings.STORAGES = {**settings.STORAGES, "archive": {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": str(tmp_path)}}}
    return tmp_path


def test_archive_and_restore_round_trip_a_task_with_a_blob(bulky, archive_dir, settings):
    from datetime import timedelta

    from django.utils import timezone

    settings.TETHER = {**settings.TETHER, "RETENTION_DAYS": 30}
    old = _run(bulky, _script("archived"))
    kept = _run(bulky, _script("archived"))  # the same output, in a task not archived
    lone = _run(bulky, _script("alone"))
    Task.objects.filter(pk__in=[old.pk, lone.pk]).update(
        finished_at=timezone.now() - timedelta(days=40))
    assert PayloadBlob.objects.count() == 2

    assert archive_sweep().tasks == 2
    assert not Task.objects.filter(pk__in=[old.pk, lone.pk]).exists()
    # the blob a remaining task uses stays, the other goes with its last task
    assert [b.sha256 for b in PayloadBlob.objects.all()] == [_raw_outputs(kept.pk)[0][REF]]

    task_restore(lone.pk)
    task_restore(old.pk)
    assert PayloadBlob.objects.count() == 2
    operator = client_for(bulky.users["operator"])
    for task in (old, lone):
        steps = operator.get(f"/api/v1/tasks/{task.pk}/steps").json()["results"]
        marker = "archived" if task is old else "alone"
        assert steps[0]["output"] == python_tools.big(  # type: ignore[arg-type]
            {"size": SIZE, "marker": marker}, None)
        # the ledger's copy came back with it: a replay of the call gets the value
        assert _replayed(_ledger_row(task.pk)).result == _big(marker)


def test_erasure_removes_the_subjects_blobs(bulky, archive_dir):
    mine = _run(bulky, _script("ada-only"), subject="ada")
    _run(bulky, _script("shared"), subject="ada")
    other = _run(bulky, _script("shared"), subject="bob")
    assert PayloadBlob.objects.count() == 2

    counts = subject_erasure(tenant_id=bulky.tenant.pk, subject="ada", actor=SYSTEM)
    assert counts["payload_blobs"] == 1
    assert not Task.objects.filter(pk=mine.pk).exists()
    # what another subject's task also holds stays, with it
    assert [b.sha256 for b in PayloadBlob.objects.all()] == [_raw_outputs(other.pk)[0][REF]]


def test_a_batch_stores_a_large_input_out_of_row_and_refuses_one_past_the_limit(
        bulky, settings):
    settings.TETHER = {**settings.TETHER, "TASK_PAYLOAD_MAX_BYTES": 100_000}
    client = client_for(bulky.users["requester"])

    def item(key: str, size: int) -> dict[str, Any]:
        return {"agent": "bulky", "goal": f"batch {key}", "input": {"text": key * size},
                "script": [{"final": {}}], "idempotency_key": key}

    refused = client.post("/api/v1/tasks/batch", {"tasks": [item("a", 10), item("b", 150_000)]},
                          format="json")
    assert refused.status_code == 400, refused.content
    assert refused.json()["error"]["details"]["tasks"][0]["index"] == 1
    assert "input" in refused.json()["error"]["details"]["tasks"][0]["errors"]
    assert not Task.objects.filter(goal__startswith="batch").exists()

    created = client.post("/api/v1/tasks/batch", {"tasks": [item("c", 10), item("d", 80_000)]},
                          format="json")
    assert created.status_code == 201, created.content
    small, large = (entry["task_id"] for entry in created.json()["tasks"])
    assert not is_reference(Task.objects.values_list("input", flat=True).get(pk=small))
    assert is_reference(Task.objects.values_list("input", flat=True).get(pk=large))
    assert client.get(f"/api/v1/tasks/{large}").json()["input"] == {"text": "d" * 80_000}


def test_a_retry_inherits_the_blobs_of_its_steps_and_input(bulky):
    from tasks_app.retries.services import task_retry
    from tasks_app.services.admission import admit_created_tasks
    from tasks_app.services.tasks import task_cancel
    from tests.fakes.runtime import advance

    data = {"text": "z" * 80_000}
    original = submit(bulky.tenant, _script("kept", "later"), agent="bulky", input=data)
    admit_created_tasks()
    advance(original.pk)  # the first call, then the task is canceled
    task_cancel(task_id=original.pk, actor=SYSTEM)

    retry = task_retry(tenant_id=bulky.tenant.pk, task_id=original.pk, actor=SYSTEM,
                       from_step=2).task
    # the retry's own uses: the inherited step's blob, and its input's
    assert PayloadUse.objects.filter(task=retry).count() == 2
    assert PayloadBlob.objects.count() == 2
    done = drive(retry.pk)
    assert done.status == TaskStatus.SUCCEEDED
    steps = client_for(bulky.users["operator"]).get(f"/api/v1/tasks/{retry.pk}/steps").json()
    outputs = [s["output"] for s in steps["results"] if s["kind"] == "tool"]
    assert outputs == [python_tools.big({"size": SIZE, "marker": m}, None)  # type: ignore[arg-type]
                       for m in ("kept", "later")]
    assert TaskSnapshot.of(Task.objects.get(pk=retry.pk)).input == data


def test_a_large_final_answer_is_stored_out_of_row_and_read_back(bulky):
    answer = {"report": "r" * 90_000}
    task = _run(bulky, [{"final": answer}])
    assert task.status == TaskStatus.SUCCEEDED
    assert is_reference(Task.objects.values_list("result", flat=True).get(pk=task.pk))
    # the final step's output and the task's result: one blob, two uses
    assert PayloadBlob.objects.count() == 1 and PayloadUse.objects.filter(task=task).count() == 2
    detail = client_for(bulky.users["operator"]).get(f"/api/v1/tasks/{task.pk}").json()
    assert detail["result"] == answer


def test_the_console_shows_a_large_output_not_its_reference(bulky):
    from django.test import Client

    task = _run(bulky, _script("console-marker"))
    [ref] = _raw_outputs(task.pk)
    console = Client()
    console.force_login(bulky.users["operator"])
    html = console.get(f"/tasks/{task.pk}/").content.decode()
    assert "console-marker line of a large tool output" in html
    assert ref[REF] not in html


def test_a_large_output_counts_whole_toward_the_summary_threshold(bulky):
    from tasks_app.context.builder import recent_steps

    task = _run(bulky, _script("counted"))
    small = _run(bulky, [{"tool": "big", "args": {"size": 100}}, {"final": {"ok": True}}])
    [large_step] = [s for s in recent_steps(task.pk, after_step=0, limit=10) if s.kind == "tool"]
    [small_step] = [s for s in recent_steps(small.pk, after_step=0, limit=10)
                    if s.kind == "tool"]
    assert large_step.chars >= SIZE  # as the output's text would count inline
    assert small_step.chars < 1000


def test_a_tasks_archive_and_export_lines_hold_its_blobs_before_its_rows(bulky):
    import base64
    import zlib

    from retention_app.services.archive import task_lines

    task = _run(bulky, _script("exported"))
    rows = [json.loads(line) for line in task_lines(task)]
    models = [row["model"] for row in rows]
    assert models[0] == "tasks_app.payloadblob" and models.count("tasks_app.payloadblob") == 1
    assert "tasks_app.payloaduse" in models[1:]  # after the blob: a restore maps its id
    data = base64.b64decode(rows[0]["fields"]["data"])
    assert json.loads(zlib.decompress(data)) == python_tools.big(  # type: ignore[arg-type]
        {"size": SIZE, "marker": "exported"}, None)


# --- the tool ledger's copy of a large output ----------------------------------------------


def _big(marker: str) -> dict[str, Any]:
    return python_tools.big({"size": SIZE, "marker": marker}, None)  # type: ignore[arg-type]


def _ledger_row(task_id: int) -> ToolExecution:
    return ToolExecution.objects.get(task_id=task_id, tool="big")


def _raw_result(row: ToolExecution) -> Any:
    return ToolExecution.objects.values_list("result", flat=True).get(pk=row.pk)


def _call(row: ToolExecution) -> ToolCall:
    """The call the ledger row is of."""
    spec = tool_specs(tenant_id=row.tenant_id, names=["big"])["big"]
    return ToolCall(spec=spec, args=row.args, context=ToolContext(
        idempotency_key=row.idempotency_key, task_id=row.task_id, step_id=row.step_id,
        tenant_id=row.tenant_id, trace_id="0" * 32))


def _replayed(row: ToolExecution, *, owner: str = "another-executor") -> ToolOutcome:
    """What an executor that takes the row's key again (a resumed call) is answered."""
    outcome = claim_or_answer(_call(row), owner=owner)
    assert isinstance(outcome, ToolOutcome), outcome
    return outcome


def test_the_ledgers_copy_of_a_large_output_is_a_reference_to_the_same_blob(bulky):
    task = _run(bulky, _script("ledgered"))
    [step_ref] = _raw_outputs(task.pk)
    row = _ledger_row(task.pk)
    assert _raw_result(row) == step_ref  # the ledger and the step: one reference, one blob
    assert [b.sha256 for b in PayloadBlob.objects.all()] == [step_ref[REF]]
    assert PayloadUse.objects.filter(task=task).count() == 1  # counted once toward the limit
    cast = "result::text" if connection.vendor == "postgresql" else "result"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT length({cast}) FROM {ToolExecution._meta.db_table} "
                       "WHERE id = %s", [row.pk])
        (length,) = cursor.fetchone()
    assert length < 1000 < SIZE


def test_a_call_replayed_from_the_ledger_gets_the_whole_value(bulky):
    task = _run(bulky, _script("replayed"))
    outcome = _replayed(_ledger_row(task.pk))
    assert outcome.from_ledger and outcome.kind is OutcomeKind.OK
    assert outcome.result == _big("replayed")


def test_a_retried_task_answered_by_the_ledger_gets_the_whole_value(bulky):
    from tasks_app.models import Event
    from tasks_app.retries.services import task_retry
    from tasks_app.services.admission import admit_created_tasks
    from tasks_app.services.tasks import task_cancel
    from tests.fakes.runtime import advance

    original = submit(bulky.tenant, _script("retried", "later"), agent="bulky")
    admit_created_tasks()
    advance(original.pk)  # the first call, then the task is canceled
    task_cancel(task_id=original.pk, actor=SYSTEM)

    retry = task_retry(tenant_id=bulky.tenant.pk, task_id=original.pk, actor=SYSTEM,
                       from_step=1).task  # nothing inherited: the call is proposed again
    assert drive(retry.pk).status == TaskStatus.SUCCEEDED
    (answered,) = Event.objects.filter(task=retry, type="step_succeeded", payload__step_no=1)
    assert answered.payload["from_ledger"] is True  # not called again
    assert len(_ledger_row(original.pk).attempts) == 1
    steps = client_for(bulky.users["operator"]).get(f"/api/v1/tasks/{retry.pk}/steps").json()
    outputs = [s["output"] for s in steps["results"] if s["kind"] == "tool"]
    assert outputs == [_big("retried"), _big("later")]


def test_an_evaluation_replaying_the_task_gets_the_whole_value(bulky):
    from dataclasses import replace

    from tasks_app.runner.shadow import recorded_calls

    task = _run(bulky, _script("evaluated"))
    shadow = replace(TaskSnapshot.of(Task.objects.get(pk=task.pk)), shadow_of=task.pk)
    [(tool, _, status, result, _)] = recorded_calls(shadow)
    assert (tool, status, result) == ("big", "SUCCEEDED", _big("evaluated"))


def test_the_console_shows_the_ledgers_value_not_its_reference(bulky):
    from tasks_app.console.selectors import step_views

    task = _run(bulky, _script("console-ledger"))
    views, _ = step_views(task.pk)
    [ledger] = [view.ledger for view in views if view.ledger is not None]
    assert ledger.result == _big("console-ledger")


def test_a_result_settled_outside_a_commit_is_stored_out_of_row_too(bulky):
    from tools_app.executor.ledger import settle_by_human

    task = _run(bulky, [{"tool": "big", "args": {"size": 100}}, {"final": {"ok": True}}])
    row = _ledger_row(task.pk)
    assert not PayloadBlob.objects.exists()
    ToolExecution.objects.filter(pk=row.pk).update(status=LedgerStatus.UNCERTAIN)

    settle_by_human(row.idempotency_key, succeeded=True, result=_big("settled"))  # a reviewer
    raw = _raw_result(row)
    assert is_reference(raw)
    assert PayloadUse.objects.filter(task=task, blob__sha256=raw[REF]).count() == 1
    assert _replayed(row).result == _big("settled")


def test_a_record_whose_claim_is_lost_writes_no_blob(bulky):
    from tools_app.executor.ledger import Claim, record

    task = _run(bulky, [{"tool": "big", "args": {"size": 100}}, {"final": {"ok": True}}])
    row = _ledger_row(task.pk)
    ToolExecution.objects.filter(pk=row.pk).update(status=LedgerStatus.IN_PROGRESS,
                                                   claimed_by="the-new-owner")
    late = Claim(call=_call(row), owner="the-late-owner", attempts=list(row.attempts))
    record(late, ToolOutcome(kind=OutcomeKind.OK, result=_big("late")))
    assert not PayloadBlob.objects.exists() and not PayloadUse.objects.exists()
    assert _raw_result(row) == python_tools.big({"size": 100}, None)  # type: ignore[arg-type]

    ToolExecution.objects.filter(pk=row.pk).update(claimed_by="the-late-owner")
    record(late, ToolOutcome(kind=OutcomeKind.OK, result=_big("late")))  # the claim holds
    assert is_reference(_raw_result(row)) and PayloadBlob.objects.count() == 1
    assert _replayed(row).result == _big("late")


def _marker_found(marker: str) -> tuple[bool, bool]:
    """Whether the ledger's rows, and the blobs, hold `marker`."""
    results = ToolExecution.objects.values_list("result", flat=True)
    blobs = PayloadBlob.objects.values_list("data", flat=True)
    return (any(marker in json.dumps(value) for value in results),
            any(marker.encode() in zlib.decompress(bytes(data)) for data in blobs))


def test_an_erasure_leaves_the_subjects_output_in_neither_the_ledger_nor_the_blobs(
        bulky, archive_dir):
    _run(bulky, _script("erased-ledger-marker"), subject="ada")
    kept = _run(bulky, _script("kept-ledger-marker"), subject="bob")
    assert _marker_found("erased-ledger-marker") == (True, True)  # the reference's preview

    subject_erasure(tenant_id=bulky.tenant.pk, subject="ada", actor=SYSTEM)
    assert _marker_found("erased-ledger-marker") == (False, False)
    assert _replayed(_ledger_row(kept.pk)).result == _big("kept-ledger-marker")


def test_an_export_holds_the_ledgers_value(bulky):
    import base64

    from retention_app.services.archive import task_lines

    task = _run(bulky, _script("exported-ledger"))
    rows = [json.loads(line) for line in task_lines(task)]
    [blob] = [row for row in rows if row["model"] == "tasks_app.payloadblob"]
    [ledger] = [row for row in rows if row["model"] == "tools_app.toolexecution"]
    assert ledger["fields"]["result"][REF] == blob["fields"]["sha256"]
    data = base64.b64decode(blob["fields"]["data"])
    assert json.loads(zlib.decompress(data)) == _big("exported-ledger")
