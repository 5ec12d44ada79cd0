"""The embedded mode (`scripts/start`: SQLite, no broker): the server's own loop
sends the webhook of a task it ran, with nothing else running."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.helpers import wait_for
from tests.processes import ROOT

from .conftest import WebhookReceiver


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


def test_the_embedded_server_delivers_a_webhook(embedded_server, tmp_path,
                                                webhook_receiver: WebhookReceiver) -> None:
    server = embedded_server(tmp_path / "tether.sqlite3")
    with httpx.Client(base_url=server.url, timeout=10) as client:
        wait_for(lambda: _answers(client, server), timeout=180, interval=0.25,
                 message="the embedded server to answer")
        key = _manage(server.database_path, tmp_path / ".tether" / "local.env",
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


def _answers(client: httpx.Client, server) -> bool:  # type: ignore[no-untyped-def]
    assert server.proc.alive(), server.proc.log_tail()
    try:
        return client.get("/accounts/login/").status_code == 200
    except httpx.TransportError:
        return False
