"""`manage.py drill --quick` against the test database, with workers the
drill starts (and kills one of): it exits 0 and its report says what held,
the breaker's openings under an outage and the model's timeouts included."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from tasks_app.models import Task

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_quick_drill_holds_its_promises(celery_workers, tmp_path, capsys, monkeypatch):
    # the drill's workers inherit this environment: a short lease, a fast sweep
    monkeypatch.setenv("TETHER_LEASE_TTL_S", "3")
    monkeypatch.setenv("TETHER_SWEEP_INTERVAL_S", "1")
    monkeypatch.setenv("TETHER_LEDGER_CLAIM_GRACE_S", "2")
    # production-like backoff, shortened: a write's retries outlast the 2 s of 500s
    # (the suite's own 0.05-0.2 s backoff spends ten retries in about 2 s)
    monkeypatch.setenv("TETHER_BACKOFF_BASE_S", "0.5")
    monkeypatch.setenv("TETHER_BACKOFF_MAX_S", "2")
    out = tmp_path / "drill.json"
    call_command("drill", "--quick", "--start-workers", "2", "--json", str(out))

    report = json.loads(out.read_text())
    assert report["promises_kept"] is True and report["broken"] == []
    phases = {p["fault"].split(" (")[0]: p for p in report["phases"]}
    assert phases["baseline"]["succeeded"] == phases["baseline"]["tasks"] == 4
    assert phases["a tool answers invalid JSON"]["finished"] == 4
    failing = phases["the downstream answers 500 for 2 s"]
    assert failing["succeeded"] == 4 and failing["downstream_calls"] > 4  # retried, then held
    assert phases["doubled concurrency"]["succeeded"] == 8
    killed = phases["a worker killed"]
    assert killed["promise_kept"] is True and killed["succeeded"] == 4
    assert all(p["duplicates"] == 0 for p in report["phases"])
    outage = phases["a downstream outage of 4 s"]  # "(the breaker opens)"
    assert outage["succeeded"] == 4 and outage["breaker_openings"] >= 1
    stalled = phases["the model stalls past its 1 s timeout for 4 s"]
    assert stalled["succeeded"] == 4 and stalled["downstream_calls"] > 4  # timed out, retried
    # everything ran in the drill's own tenant
    assert set(Task.objects.values_list("tenant__name", flat=True)) == {report["tenant"]}
    printed = capsys.readouterr().out
    assert "every promise held" in printed and "a worker killed (SIGKILL): HELD" in printed
