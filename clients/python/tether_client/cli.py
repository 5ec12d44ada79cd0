"""The `tether` command: Tether from a terminal, on the client (Typer and Rich).

The server and key come from --url/--api-key, else TETHER_URL/TETHER_API_KEY,
else the file `tether login` writes (tether_client.config). `tether watch`
exits with the task's outcome: 0 succeeded, 1 failed, 3 canceled; any command
exits 4 when the API refuses (the error's code is printed) and 5 when no server
or key is configured (2 is a usage error, as Click has it).
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console
from rich.table import Table

from . import config
from .client import Tether
from .errors import TetherError
from .models import TASK_STATUS_ENUM, Approval, Event, Inbox, Task, TaskDetail

OUTCOME_EXIT = {"SUCCEEDED": 0, "FAILED": 1, "CANCELED": 3}
API_ERROR_EXIT, NOT_CONFIGURED_EXIT = 4, 5

app = typer.Typer(help="Tether from the command line.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
PIPE_WIDTH = 160  # not a terminal (a pipe, a file, CI): tables are not cut to 80 columns


def out(*, stderr: bool = False) -> Console:
    """The console for this moment's stdout (or stderr), as wide as its terminal."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else PIPE_WIDTH)


class State:
    url: str | None = None
    api_key: str | None = None


state = State()


@app.callback()
def _options(
    url: Annotated[str | None, typer.Option(help="The server (default: TETHER_URL, then "
                                            "the config file).")] = None,
    api_key: Annotated[str | None, typer.Option(help="The API key (default: TETHER_API_KEY, "
                                                "then the config file).")] = None,
) -> None:
    state.url, state.api_key = url, api_key


def _fail(code: int, message: str) -> NoReturn:
    out(stderr=True).print(message, markup=False, highlight=False)
    raise typer.Exit(code)


def _client() -> Tether:
    try:
        return Tether(state.url, state.api_key)
    except config.NotConfigured as exc:
        _fail(NOT_CONFIGURED_EXIT, f"error: {exc}")


def _refused(exc: TetherError) -> NoReturn:
    lines = [f"error: {exc.status} {exc.code}: {exc.message}"]
    for name, problems in exc.field_errors.items():
        said = "; ".join(map(str, problems)) if isinstance(problems, list) else str(problems)
        lines.append(f"  {name}: {said}")
    _fail(API_ERROR_EXIT, "\n".join(lines))


def _run(work: Any) -> Any:
    """Run WORK(client), turning the API's refusals into exit code 4."""
    with _client() as client:
        try:
            return work(client)
        except TetherError as exc:
            _refused(exc)
        except httpx.TransportError as exc:
            _fail(API_ERROR_EXIT, f"error: cannot reach the server: {exc}")


def _json_option(raw: str | None, what: str) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise typer.BadParameter(f"{what} must be JSON: {exc}") from None


@app.command()
def login(
    url: Annotated[str, typer.Option(prompt="Server URL")],
    api_key: Annotated[str, typer.Option(prompt="API key", hide_input=True)],
) -> None:
    """Check a server URL and API key, then save them (mode 0600) for the next commands."""
    with Tether(url, api_key) as client:
        try:
            inbox = client.inbox(limit=1)
        except TetherError as exc:
            _refused(exc)
        except httpx.TransportError as exc:
            _fail(API_ERROR_EXIT, f"error: cannot reach {url}: {exc}")
    path = config.write_file(url, api_key)
    out().print(f"Logged in to {url} ({inbox.total} waiting for you). Saved to {path}.",
              markup=False, highlight=False)


@app.command()
def submit(
    agent: Annotated[str, typer.Argument(help="The agent that runs the task.")],
    goal: Annotated[str, typer.Argument(help="What the agent should do.")],
    input: Annotated[str | None, typer.Option("--input", help="The task's input, a JSON "
                                              "object.")] = None,
    key: Annotated[str | None, typer.Option("--key", help="An idempotency key: the same key "
                                            "and body again give the same task.")] = None,
    subject: Annotated[str | None, typer.Option(help="Who the task is about.")] = None,
    script: Annotated[str | None, typer.Option(help="For a scripted agent: its replies, a "
                                               "JSON list.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the task as JSON.")] = False,
) -> None:
    """Submit a task and print its id."""
    task = _run(lambda c: c.submit(agent, goal, _json_option(input, "--input"),
                                   subject=subject, script=_json_option(script, "--script"),
                                   idempotency_key=key))
    if as_json:
        out().print_json(task.model_dump_json())
    else:
        _said(task)


@app.command()
def watch(
    task_id: Annotated[int, typer.Argument(help="The task to follow.")],
    poll: Annotated[float, typer.Option(help="Seconds between polls (no stream).")] = 0.5,
) -> None:
    """Follow a task's timeline live until it ends; exit with its outcome."""
    def follow(client: Tether) -> TaskDetail:
        seen, text, now = 0, "", "following"
        console = out()  # one console: the progress line stays below the timeline
        with console.status(f"task {task_id}: following", spinner="dots") as status:
            for item in client.follow(task_id, poll_interval=poll):
                if isinstance(item, Event):
                    seen += 1
                    console.print(_event_line(item), highlight=False)
                    now = str(item.payload.get("to") or now)  # a transition names its status
                    status.update(f"task {task_id} {now}: {seen} events, last {item.type}")
                else:  # a model's tokens as they stream: shown in the progress line
                    text = (text + _delta_text(item.data))[-60:]
                    status.update(f"task {task_id} {now}: {text}")
        return client.task(task_id)

    task = _run(follow)
    _print_outcome(task)
    raise typer.Exit(OUTCOME_EXIT.get(task.status, API_ERROR_EXIT))


def _event_line(event: Event) -> str:
    facts = [f"{k}={v}" for k, v in event.payload.items()
             if isinstance(v, str | int | float | bool) and len(str(v)) <= 60][:4]
    when = event.created_at.strftime("%H:%M:%S")
    return f"{when}  #{event.id:<6} {event.type:<22} {' '.join(facts)}".rstrip()


def _delta_text(data: Any) -> str:
    if isinstance(data, dict):
        for key in ("delta", "text", "content"):
            if isinstance(data.get(key), str):
                return str(data[key])
        return ""
    return data if isinstance(data, str) else ""


def _said(thing: Task | Approval) -> None:
    """One line for what a command did: the task's or the approval's new status."""
    if isinstance(thing, Approval):
        line = f"Approval {thing.id} {thing.status} (task {thing.task})"
    else:
        line = f"Task {thing.id} {thing.status}"
    out().print(line, markup=False, highlight=False)


def _print_outcome(task: TaskDetail) -> None:
    _said(task)
    if task.status == "SUCCEEDED":
        out().print_json(json.dumps(task.result))
    elif task.failure_reason:
        out().print(f"reason: {task.failure_reason}", markup=False, highlight=False)


@app.command()
def tasks(
    status: Annotated[list[str] | None, typer.Option(help="Only tasks in this status "
                                                     "(repeat for several).")] = None,
    agent: Annotated[str | None, typer.Option(help="Only this agent's tasks.")] = None,
    mine: Annotated[bool, typer.Option(help="Only the tasks I submitted.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=200)] = 20,
) -> None:
    """List tasks, newest first."""
    wanted = [s.upper() for s in status or []]
    unknown = sorted(set(wanted) - set(TASK_STATUS_ENUM))
    if unknown:
        raise typer.BadParameter(f"unknown status {', '.join(unknown)}; one of "
                                 f"{', '.join(TASK_STATUS_ENUM)}", param_hint="--status")
    page = _run(lambda c: c.tasks(status=wanted, agent=agent, mine=mine, limit=limit))
    table = Table("id", "status", "agent", "goal", "created")
    for task in page.results:
        table.add_row(str(task.id), task.status, task.agent or "", task.goal[:60],
                      task.created_at.strftime("%Y-%m-%d %H:%M"))
    out().print(table)


@app.command()
def inbox(limit: Annotated[int, typer.Option(min=1, max=200)] = 50) -> None:
    """What waits for you: approvals, questions, reconciliations."""
    box: Inbox = _run(lambda c: c.inbox(limit=limit))
    table = Table("kind", "id", "task", "what", "you may")
    for item in box.items:
        facts = item.facts
        what = facts.get("question") or " ".join(
            str(x) for x in (facts.get("tool"), json.dumps(facts.get("args"))) if x)
        table.add_row(item.kind, str(item.id), f"{item.task.get('id')} {item.task.get('goal')}",
                      " ".join(str(what).split())[:70],
                      ", ".join(a.get("name", "") for a in item.actions))
    out().print(table)
    out().print(f"{box.total} waiting for you", markup=False, highlight=False)


@app.command()
def approve(
    approval_id: Annotated[int, typer.Argument(help="The approval (see `tether inbox`).")],
    comment: Annotated[str, typer.Option(help="Why, recorded with the decision.")] = "",
) -> None:
    """Approve a pending action."""
    _said(_run(lambda c: c.approve(approval_id, comment=comment)))


@app.command()
def reject(
    approval_id: Annotated[int, typer.Argument(help="The approval (see `tether inbox`).")],
    reason: Annotated[str, typer.Option(help="Why: the agent receives it.")],
) -> None:
    """Reject a pending action, saying why."""
    _said(_run(lambda c: c.reject(approval_id, comment=reason)))


@app.command()
def answer(
    task_id: Annotated[int, typer.Argument(help="The task whose question to answer.")],
    text: Annotated[str, typer.Argument(help="The answer, given to the agent verbatim.")],
) -> None:
    """Answer the question a task waits on."""
    _said(_run(lambda c: c.answer(task_id, text)))


@app.command()
def cancel(
    task_id: Annotated[int, typer.Argument()],
    reason: Annotated[str, typer.Option(help="Recorded with the cancellation.")] = "",
) -> None:
    """Cancel a task."""
    _said(_run(lambda c: c.cancel(task_id, reason=reason)))


def main() -> None:
    app()
