"""The two tiers (tests/tiers.py): which tests are `system`, and a fast-tier
test that starts a process failing."""
from __future__ import annotations

import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import pytest

from tests.tiers import GUARD, ProcessInFastTier

ROOT = Path(__file__).resolve().parents[1]


def test_a_fast_tier_test_cannot_start_a_process() -> None:
    with pytest.raises(ProcessInFastTier, match="mark it `system`"):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    assert len(GUARD.started) == 1
    GUARD.started.clear()  # this test's own attempt is not a failure


def test_a_start_the_code_swallowed_still_fails_the_test(request: pytest.FixtureRequest) -> None:
    with suppress(ProcessInFastTier):
        subprocess.run(["true"], check=True)
    with pytest.raises(pytest.fail.Exception, match="a fast-tier test started processes"):
        GUARD.leave()
    GUARD.enter(request.node)  # the rest of this test is guarded again


@pytest.mark.system
def test_a_system_test_may_start_processes() -> None:
    assert subprocess.run(["true"]).returncode == 0


@pytest.mark.system  # runs pytest
def test_tests_land_in_their_tier_by_directory_marker_and_fixture() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", "-m", "system",
         "tests/system/test_celery_worker.py", "tests/console/test_browser.py",
         "tests/tools_app/test_mcp_tools.py", "tests/test_docs.py", "tests/api/test_tasks.py",
         "tests/schedules_app/test_workers.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    system = {line.split("::")[0] + "::" + line.split("::")[1].split("[")[0]
              for line in listed.stdout.splitlines() if "::" in line}
    assert {
        # by directory, by marker (`worker`, `browser`), by fixture, by its own say
        "tests/system/test_celery_worker.py::test_a_scripted_task_runs_to_success_on_a_real_worker",
        "tests/schedules_app/test_workers.py::test_two_workers_fire_each_due_time_once_across_a_restart",
        "tests/console/test_browser.py::test_operator_cancels_a_task_from_its_page",
        "tests/tools_app/test_mcp_tools.py::test_a_task_calls_each_tool_through_the_ledger",
        "tests/test_docs.py::test_the_site_builds_strict_with_every_page",
    } <= system
    # Without a process-starting fixture, a test stays in the fast tier.
    assert ("tests/tools_app/test_mcp_tools.py::"
            "test_bad_registrations_are_400s_with_field_errors_and_store_nothing") not in system
    assert not any(name.startswith("tests/api/test_tasks.py") for name in system)
