"""The embedded mode as `scripts/start` runs it: SQLite, no broker, the
in-memory channel layer, the runner on daphne's own event loop.

The seeded demo tasks must run with no request ever made to the server: the
runner is bound to the loop when the server starts, not on a first request.
Then the server's own loop sends the webhook of a task it ran, with nothing
else running. One server for both (each start migrates and seeds a fresh
SQLite file, the slow part).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx

from tests.fakes.webhook_receiver import WebhookReceiver
from tests.helpers import wait_for
from tests.processes import ROOT


def _tasks(db: Path) -> dict[str, str]:
    if not db.exists():
        return {}
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return dict(conn.execute("SELECT goal, status FROM tasks_app_task").fetchall())
    except sqlite3.OperationalError:  # not migrated yet
        return {}


def _step_actors(db: Path) -> set[str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
        rows = conn.execute(
            "SELECT actor FROM tasks_app_event WHERE type = 'step_succeeded'"
        ).fetchall()
    return {actor for (actor,) in rows}


def _manage(server_db: Path, local_env: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    for name in ("CELERY_BROKER_URL", "CHANNEL_LAYER_URL", "TETHER_RUNNER"):
        env.pop(name, None)
    env.update(dict(line.split("=", 1) for line in local_env.read_text().splitlines() if line))
    env.update(DJANGO_SETTINGS_MODULE="config.settings", DATABASE_URL=f"sqlite:///{server_db}",
               TETHER_HTTPS="false", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip().splitlines()[-1]


def test_the_embedded_server_runs_the_demo_without_any_request_then_delivers_a_webhook(
        embedded_server, tmp_path, webhook_receiver: WebhookReceiver) -> None:
    server = embedded_server(tmp_path / "tether.sqlite3")
    db = server.database_path

    def settled() -> dict[str, str] | None:
        assert server.proc.alive(), server.proc.log_tail()
        tasks = _tasks(db)
        lookup = tasks.get("Where is order A-1001?")
        notify = tasks.get("Tell Alan Turing his order shipped")
        flow = tasks.get("Run workflow refund_flow (version 1)")
        return tasks if lookup == notify == "SUCCEEDED" and flow == "WAITING_FOR_INPUT" else None

    tasks = wait_for(settled, timeout=180, interval=0.25, message="the seeded tasks to run")
    # The other two stop for a person, as the demo intends.
    assert tasks["Refund order A-1002: the parcel arrived damaged"] == "WAITING_FOR_APPROVAL"
    assert tasks["Refund part of A-1003 if the customer agrees"] == "WAITING_FOR_INPUT"
    # The demo workflow looked the order up and waits for a person to confirm.
    # The steps ran inside the server process (a worker id is
    # "worker:HOST:PID:NONCE"; scripts/start execs daphne, so the server keeps
    # the script's pid).
    actors = _step_actors(db)
    assert actors and {a.split(":")[-2] for a in actors} == {str(server.proc.pid)}

    # Now ask the server something: static files are served, the sign-in page answers.
    with httpx.Client(base_url=server.url, timeout=10) as client:
        css = client.get("/static/admin/css/base.css")
        assert css.status_code == 200 and "text/css" in css.headers["content-type"]
        assert client.get("/accounts/login/").status_code == 200

    # It made its keys (DEBUG is off, so it would not start without them) into
    # a file only its user may read, and serves plain HTTP without redirecting.
    local_env = tmp_path / ".tether" / "local.env"
    assert local_env.stat().st_mode & 0o777 == 0o600
    names = {line.split("=", 1)[0] for line in local_env.read_text().splitlines()}
    assert names == {"SECRET_KEY", "TETHER_SECRETS_KEY"}

    # The server's own loop delivers a webhook. Recipients are fixed when an
    # event happens, so the seeded task's earlier question sends nothing here.
    with httpx.Client(base_url=server.url, timeout=10) as client:
        key = _manage(server.database_path, local_env,
                      "create_api_token", "--tenant", "demo", "--username", "hook-admin",
                      "--role", "admin")
        auth = {"Authorization": f"Token {key}"}
        hook = client.post("/api/v1/webhooks", headers=auth, json={
            "url": webhook_receiver.url(), "events": ["question_asked"]})
        assert hook.status_code == 201, hook.text
        task = client.post("/api/v1/tasks", headers=auth, json={
            "agent": "support", "goal": "ask me",
            "script": [{"ask": "Which order?"}, {"final": {"ok": True}}]})
        assert task.status_code == 201, task.text

        received = wait_for(webhook_receiver.all, timeout=60, interval=0.1,
                            message="the webhook from the embedded server")
    assert received[0].json["task"]["id"] == task.json()["id"]
    assert received[0].json["request"]["question"] == "Which order?"
    assert server.proc.alive()
