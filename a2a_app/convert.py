"""Between A2A's messages and tasks and Tether's.

In: a message's text parts are the goal (or the answer to a question), joined
by blank lines; its data parts (JSON objects) are merged into the task's
input. Files and URLs are refused. Data parts carry numbers as doubles
(`google.protobuf.Value`): whole ones come back as integers.

Out: a Tether task as an A2A `Task`, its id and its context id both the task's
id (Tether has no conversations of several tasks): the status mapped by
`states`, with a message saying what a waiting task waits on (the question
itself for INPUT_REQUIRED) or why it failed; a succeeded task's result as the
artifact `result` (a data part, and a text part when it has a text `answer`);
the history, the message the task was asked with.
"""
from __future__ import annotations

import json
from typing import Any

from a2a.helpers.proto_helpers import get_data_parts, get_text_parts, new_data_part, new_text_part
from a2a.types.a2a_pb2 import Artifact, Message, Role, Task, TaskStatus
from a2a.utils.errors import InvalidParamsError

from approvals_app.selectors import open_request_of
from tasks_app.machine import TaskStatus as S
from tasks_app.models import Task as TetherTask
from tasks_app.payloads import resolve_task

from .states import a2a_state

RESULT_ARTIFACT = "result"


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return value


def _checked_parts(message: Message) -> None:
    for part in message.parts:
        if not (part.HasField("text") or part.HasField("data")):
            raise InvalidParamsError(message="Tether takes text and data parts only "
                                     "(no files or URLs)")


def goal_and_input(message: Message, *, goal_required: bool = True
                   ) -> tuple[str, dict[str, Any]]:
    """What a message that starts a task asks: its goal and its input."""
    _checked_parts(message)
    goal = "\n\n".join(t for t in get_text_parts(message.parts) if t.strip())
    if not goal and goal_required:
        raise InvalidParamsError(message="the message needs a text part: the task's goal")
    data: dict[str, Any] = {}
    for value in get_data_parts(message.parts):
        if not isinstance(value, dict):
            raise InvalidParamsError(message="a data part must be a JSON object "
                                     "(merged into the task's input)")
        data.update(_whole(value))
    return goal, data


def answer_of(message: Message) -> str:
    """A message that answers a question: its text, or its one data part as JSON
    (a question with an answer schema takes JSON)."""
    _checked_parts(message)
    texts = [t for t in get_text_parts(message.parts) if t.strip()]
    data = get_data_parts(message.parts)
    if texts and not data:
        return "\n\n".join(texts)
    if len(data) == 1 and not texts:
        return json.dumps(_whole(data[0]))
    raise InvalidParamsError(message="an answer is text parts, or one data part")


def _agent_message(task: TetherTask, text: str) -> Message:
    return Message(message_id=f"tether-{task.pk}-v{task.version}", role=Role.ROLE_AGENT,
                   task_id=str(task.pk), context_id=str(task.pk), parts=[new_text_part(text)])


def _status_text(task: TetherTask) -> str:
    if task.status == S.FAILED:
        return f"failed: {task.failure_reason or 'unknown'}"
    if task.status not in (S.WAITING_FOR_INPUT, S.WAITING_FOR_APPROVAL,
                           S.WAITING_FOR_RECONCILIATION, S.WAITING_FOR_HUMAN):
        return ""
    request = open_request_of(task_id=task.pk)
    if request is None:
        return ""
    if request["kind"] == "question":
        return str(request["question"])
    if request["kind"] == "approval":
        return f"waiting for a reviewer to approve a call of {request['tool']}"
    return f"waiting for a person to check a call of {request['tool']}"


def _result_artifact(result: Any) -> Artifact:
    parts = [new_data_part(result)]
    if isinstance(result, dict) and isinstance(result.get("answer"), str):
        parts.append(new_text_part(result["answer"]))
    return Artifact(artifact_id=RESULT_ARTIFACT, name=RESULT_ARTIFACT,
                    description="the task's final answer", parts=parts)


def status_of(task: TetherTask) -> TaskStatus:
    status = TaskStatus(state=a2a_state(task.status))
    status.timestamp.FromDatetime(task.updated_at)
    text = _status_text(task)
    if text:
        status.message.CopyFrom(_agent_message(task, text))
    return status


def result_artifact_of(task: TetherTask) -> Artifact | None:
    resolve_task(task)  # a result stored out of row (no query for any other)
    return _result_artifact(task.result) if task.status == S.SUCCEEDED else None


def a2a_task(task: TetherTask, *, history_length: int | None = None) -> Task:
    resolve_task(task)  # its input and result, when stored out of row
    asked = Message(message_id=f"tether-{task.pk}-asked", role=Role.ROLE_USER,
                    task_id=str(task.pk), context_id=str(task.pk),
                    parts=[new_text_part(task.goal),
                           *([new_data_part(task.input)] if task.input else [])])
    history = [asked] if history_length != 0 else []
    artifact = result_artifact_of(task)
    return Task(id=str(task.pk), context_id=str(task.pk), status=status_of(task),
                artifacts=[artifact] if artifact else [], history=history)
