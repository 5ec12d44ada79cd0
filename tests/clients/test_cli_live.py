"""The `tether` command against a live server: in process through Typer's
CliRunner (submit, inbox, approve, reject, cancel, watch to the end with the
outcome as exit code, tasks by status), and as the installed executable
(`tether login` writes a private config file the next commands use)."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from tether_client import Tether
from tether_client.cli import app
from typer.testing import CliRunner

from tests.clients.conftest import FAILS, REFUND, LiveTether
from tests.helpers import wait_for

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True),
              pytest.mark.postgres_only("the server process shares the test database")]

runner = CliRunner()
TETHER = Path(sys.executable).parent / "tether"  # the entry point pip installed


def _tether(live: LiveTether, role: str, *args: str) -> tuple[int, str]:
    env = {"TETHER_URL": live.url, "TETHER_API_KEY": live.keys[role]}
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.output


def _submitted(output: str) -> int:
    match = re.fullmatch(r"Task (\d+) CREATED\n", output)
    assert match, output
    return int(match.group(1))


def _wait_status(live: LiveTether, task_id: int, status: str) -> None:
    with Tether(live.url, live.keys["operator"]) as tether:
        wait_for(lambda: tether.task(task_id).status == status, timeout=60, interval=0.1,
                 message=f"task {task_id} to be {status}")


def _approval_of(live: LiveTether, task_id: int) -> int:
    with Tether(live.url, live.keys["reviewer"]) as tether:
        (approval,) = tether.approvals(task_id=task_id, status="pending").results
        return approval.id


def test_submit_inbox_approve_and_watch_to_the_end(live_tether: LiveTether) -> None:
    code, out = _tether(live_tether, "requester", "submit", "support", "Refund A-2",
                        "--script", json.dumps(REFUND), "--key", "cli-refund")
    assert code == 0
    task_id = _submitted(out)
    code, again = _tether(live_tether, "requester", "submit", "support", "Refund A-2",
                          "--script", json.dumps(REFUND), "--key", "cli-refund", "--json")
    assert code == 0 and json.loads(again)["id"] == task_id  # the same key: the same task
    _wait_status(live_tether, task_id, "WAITING_FOR_APPROVAL")
    approval_id = _approval_of(live_tether, task_id)

    code, inbox = _tether(live_tether, "reviewer", "inbox")
    assert code == 0 and "1 waiting for you" in inbox
    assert re.search(rf"approval\s+│\s+{approval_id}\s+│\s+{task_id} Refund A-2", inbox), inbox
    assert "issue_refund" in inbox and "approve, reject, respond" in inbox

    code, said = _tether(live_tether, "reviewer", "approve", str(approval_id),
                         "--comment", "checked")
    assert (code, said) == (0, f"Approval {approval_id} approved (task {task_id})\n")
    code, timeline = _tether(live_tether, "requester", "watch", str(task_id), "--poll", "0.1")
    assert code == 0, timeline
    lines = timeline.splitlines()
    types = [line.split()[2] for line in lines if re.match(r"\d\d:\d\d:\d\d  #\d+", line)]
    assert types[:2] == ["task_created", "task_started"], types
    assert {"need_approval", "approval_granted"} <= set(types) and types[-1] == "final_accepted"
    assert f"Task {task_id} SUCCEEDED" in lines and '"refunded_cents": 500' in timeline


def test_reject_cancel_and_the_outcome_as_exit_code(live_tether: LiveTether) -> None:
    def submit(goal: str, script: list[object]) -> int:
        code, out = _tether(live_tether, "requester", "submit", "support", goal,
                            "--script", json.dumps(script))
        assert code == 0
        return _submitted(out)

    rejected, canceled, failed = (submit("Refund A-2", REFUND), submit("Refund A-2", REFUND),
                                  submit("Fail", FAILS))
    for task_id in (rejected, canceled):
        _wait_status(live_tether, task_id, "WAITING_FOR_APPROVAL")
    code, said = _tether(live_tether, "reviewer", "reject", str(_approval_of(live_tether,
                                                                             rejected)),
                         "--reason", "no evidence of damage")
    assert code == 0 and said.endswith(f"rejected (task {rejected})\n")
    code, missing = _tether(live_tether, "reviewer", "reject", "1")
    assert code == 2 and "--reason" in missing  # a usage error: the reason is required
    code, said = _tether(live_tether, "requester", "cancel", str(canceled), "--reason", "no")
    assert (code, said) == (0, f"Task {canceled} CANCELED\n")

    assert _tether(live_tether, "requester", "watch", str(rejected))[0] == 0  # went on
    assert _tether(live_tether, "requester", "watch", str(canceled))[0] == 3
    code, out = _tether(live_tether, "requester", "watch", str(failed), "--poll", "0.1")
    assert code == 1 and f"Task {failed} FAILED" in out and "reason: " in out

    code, listed = _tether(live_tether, "operator", "tasks", "--status", "failed")
    assert code == 0
    assert re.search(rf"│\s+{failed}\s+│ FAILED", listed) and f" {canceled} " not in listed
    code, refused = _tether(live_tether, "operator", "tasks", "--status", "lost")
    assert code == 2 and "unknown status LOST" in refused
    code, error = _tether(live_tether, "requester", "approve", "999999")
    assert code == 4 and "403 role_required" in error


def test_login_writes_a_private_config_that_the_executable_uses(
        live_tether: LiveTether, tmp_path: Path) -> None:
    config = tmp_path / "home" / "tether" / "config.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_URL",
                                                                      "TETHER_API_KEY"))}
    env["TETHER_CONFIG"] = str(config)

    def tether(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(TETHER), *args], env=env, capture_output=True, text=True,
                              timeout=60, check=False)

    wrong = tether("login", "--url", live_tether.url, "--api-key", "tk_not_a_key")
    assert wrong.returncode == 4 and "401 authentication_failed" in wrong.stderr
    assert not config.exists()
    unset = tether("tasks")
    assert unset.returncode == 5 and "tether login" in unset.stderr

    done = tether("login", "--url", live_tether.url, "--api-key", live_tether.keys["operator"])
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert json.loads(config.read_text()) == {"url": live_tether.url,
                                              "api_key": live_tether.keys["operator"]}
    listed = tether("tasks", "--status", "SUCCEEDED")
    assert listed.returncode == 0 and "id" in listed.stdout and "status" in listed.stdout
