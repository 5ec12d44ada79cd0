"""The circuit breaker's state machine on the real PostgreSQL, with workers
racing in threads (each on its own connection), and what admins may set."""
from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.helpers import wait_for
from tools_app.breakers import (
    Target,
    admit,
    breaker_errors,
    breaker_policy,
    forget_healthy,
    outcome_signal,
    record,
    record_needed,
    retry_delay_s,
    retry_delays_errors,
    wait_register,
    waiters_take,
)
from tools_app.executor.types import OutcomeKind, ToolOutcome
from tools_app.models import Breaker, BreakerState, BreakerWaiter

pytestmark = pytest.mark.django_db(transaction=True)

TARGET = Target.tool(tenant_id=1, name="lookup", url="http://127.0.0.1:1/lookup")
POLICY = breaker_policy({"failures": 3, "cooldown_s": 0.3, "max_cooldown_s": 1.0})
TTL = 5.0


def _row() -> Breaker:
    return Breaker.objects.get(key=TARGET.key)


def _fail(owner: str = "w1", **kw: Any) -> str | None:
    seen = admit(TARGET, owner=owner, probe_ttl_s=TTL)
    assert seen.allowed
    return record(TARGET, owner=owner, failed=True, policy=POLICY, seen=seen, **kw)


def _race(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """`fn(i)` in `n` threads released together, each on its own connection."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(10)
            results[i] = fn(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return results


def test_a_closed_breaker_admits_and_opens_after_a_run_of_failures():
    assert admit(TARGET, owner="w1", probe_ttl_s=TTL).allowed
    assert not Breaker.objects.exists()  # a healthy downstream costs no row
    assert _fail() is None and _fail() is None
    assert _row().failures == 2 and _row().state == BreakerState.CLOSED
    assert _fail() == "opened"
    row = _row()
    assert (row.state, row.opened_count, row.cooldown_s) == (BreakerState.OPEN, 1, 0.3)
    held = admit(TARGET, owner="w2", probe_ttl_s=TTL)
    assert not held.allowed and held.until == row.open_until
    assert 0 < held.wait_s(POLICY.cooldown_s) <= 0.3 + 0.5


def test_an_answer_resets_the_run_and_a_call_that_never_went_out_counts_for_nothing():
    _fail(), _fail()
    seen = admit(TARGET, owner="w1", probe_ttl_s=TTL)
    record(TARGET, owner="w1", failed=False, policy=POLICY, seen=seen)
    assert _row().failures == 0
    _fail(), _fail()
    record(TARGET, owner="w1", failed=None, policy=POLICY,
           seen=admit(TARGET, owner="w1", probe_ttl_s=TTL))
    assert _row().failures == 2 and _row().state == BreakerState.CLOSED


def test_the_runner_skips_recording_exactly_what_would_write_nothing():
    """`record_needed` False (the runner then enters no database phase) only
    where `record` writes nothing: an answer with no failures counted, or a
    call that never went out, outside a probe."""
    clean = admit(TARGET, owner="w1", probe_ttl_s=TTL)
    assert not record_needed(clean, failed=False) and not record_needed(clean, failed=None)
    assert record_needed(clean, failed=True)
    _fail()
    after_a_failure = admit(TARGET, owner="w1", probe_ttl_s=TTL)
    assert record_needed(after_a_failure, failed=False)  # the run of failures must end
    assert not record_needed(after_a_failure, failed=None)
    Breaker.objects.filter(key=TARGET.key).update(
        state=BreakerState.OPEN, open_until=timezone.now() - timedelta(seconds=1))
    probe = admit(TARGET, owner="w1", probe_ttl_s=TTL)
    assert probe.probe and record_needed(probe, failed=None)  # the probe is handed on


def test_after_the_cool_down_one_probe_at_a_time_and_its_success_closes():
    for _ in range(3):
        _fail()
    probe = wait_for(lambda: (a := admit(TARGET, owner="prober", probe_ttl_s=TTL)).allowed and a,
                     timeout=5, message="the cool-down to end")
    assert probe.probe and _row().state == BreakerState.HALF_OPEN
    other = admit(TARGET, owner="other", probe_ttl_s=TTL)
    assert not other.allowed and other.state == BreakerState.HALF_OPEN
    assert other.until == _row().probe_until
    # a late answer to a call admitted before the breaker opened does not close it
    assert record(TARGET, owner="other", failed=False, policy=POLICY) is None
    assert _row().state == BreakerState.HALF_OPEN
    assert record(TARGET, owner="prober", failed=False, policy=POLICY, seen=probe) == "closed"
    row = _row()
    assert (row.state, row.failures, row.probe_owner) == (BreakerState.CLOSED, 0, "")
    assert admit(TARGET, owner="other", probe_ttl_s=TTL).allowed


def test_a_failed_probe_opens_it_again_with_a_longer_cool_down_up_to_the_cap():
    for _ in range(3):
        _fail()
    cooldowns = []
    for _ in range(3):
        probe = wait_for(lambda: (a := admit(TARGET, owner="p", probe_ttl_s=TTL)).allowed and a,
                         timeout=5, message="the probe's turn")
        assert record(TARGET, owner="p", failed=True, policy=POLICY, seen=probe) == "reopened"
        cooldowns.append(_row().cooldown_s)
    assert cooldowns == [0.6, 1.0, 1.0]
    assert _row().opened_count == 4 and _row().state == BreakerState.OPEN


def test_a_probe_whose_holder_went_away_is_taken_over_after_its_lease():
    for _ in range(3):
        _fail()
    first = wait_for(lambda: (a := admit(TARGET, owner="dies", probe_ttl_s=0.2)).allowed and a,
                     timeout=5, message="the probe's turn")
    assert first.probe
    assert not admit(TARGET, owner="next", probe_ttl_s=TTL).allowed
    taken = wait_for(lambda: (a := admit(TARGET, owner="next", probe_ttl_s=TTL)).allowed and a,
                     timeout=5, message="the dead probe's lease to expire")
    assert taken.probe and _row().probe_owner == "next"
    # the first holder's late verdict changes nothing: the probe is not its own any more
    assert record(TARGET, owner="dies", failed=True, policy=POLICY, seen=first) is None
    assert _row().state == BreakerState.HALF_OPEN


def test_a_probe_that_did_not_reach_the_downstream_hands_the_probe_on():
    for _ in range(3):
        _fail()
    probe = wait_for(lambda: (a := admit(TARGET, owner="a", probe_ttl_s=TTL)).allowed and a,
                     timeout=5, message="the probe's turn")
    record(TARGET, owner="a", failed=None, policy=POLICY, seen=probe)
    assert admit(TARGET, owner="b", probe_ttl_s=TTL).probe


def test_workers_racing_past_the_threshold_open_it_exactly_once():
    _fail(), _fail()
    admitted = [admit(TARGET, owner=f"w{i}", probe_ttl_s=TTL) for i in range(8)]
    assert all(a.allowed for a in admitted)  # eight calls in flight, then all fail together
    changes = _race(8, lambda i: record(TARGET, owner=f"w{i}", failed=True, policy=POLICY,
                                        seen=admitted[i]))
    assert changes.count("opened") == 1, changes
    row = _row()
    assert (row.state, row.opened_count) == (BreakerState.OPEN, 1)


def test_workers_racing_for_the_probe_admit_exactly_one():
    for _ in range(3):
        _fail()
    wait_for(lambda: Breaker.objects.filter(key=TARGET.key,
                                            open_until__lte=timezone.now()).exists(),
             timeout=5, message="the cool-down to end")
    admissions = _race(8, lambda i: admit(TARGET, owner=f"w{i}", probe_ttl_s=TTL))
    allowed = [a for a in admissions if a.allowed]
    assert len(allowed) == 1 and allowed[0].probe, admissions
    assert all(a.until is not None for a in admissions if not a.allowed)


def test_breakers_are_per_tenant():
    other = Target.tool(tenant_id=2, name="lookup")
    for _ in range(3):
        _fail()
    assert not admit(TARGET, owner="x", probe_ttl_s=TTL).allowed
    assert admit(other, owner="x", probe_ttl_s=TTL).allowed
    model_a = Target.model(tenant_id=1, base_url="http://m/v1", name="a")
    assert model_a.key != Target.model(tenant_id=2, base_url="http://m/v1", name="a").key
    assert model_a.key != Target.model(tenant_id=1, base_url="http://m/v1", name="b").key


@pytest.mark.parametrize(("outcome", "signal"), [
    (ToolOutcome(kind=OutcomeKind.OK, result={}), False),
    (ToolOutcome(kind=OutcomeKind.BUSINESS, error={"type": "http_error", "status": 404}), False),
    (ToolOutcome(kind=OutcomeKind.PERMISSION, error={"type": "http_error", "status": 403}), False),
    (ToolOutcome(kind=OutcomeKind.TRANSIENT, error={"type": "http_error", "status": 503}), True),
    (ToolOutcome(kind=OutcomeKind.TRANSIENT, error={"type": "http_error", "status": 429}), True),
    (ToolOutcome(kind=OutcomeKind.TRANSIENT, error={"type": "connect_error"}), True),
    (ToolOutcome(kind=OutcomeKind.TRANSIENT, error={"type": "timeout"}), True),
    (ToolOutcome(kind=OutcomeKind.UNCERTAIN, error={"type": "timeout"}), True),
    (ToolOutcome(kind=OutcomeKind.PERMISSION, error={"type": "egress_refused"}), None),
    (ToolOutcome(kind=OutcomeKind.OK, result={}, from_ledger=True), None),
    (ToolOutcome(kind=OutcomeKind.PROCESSING), None),
])
def test_what_counts_as_an_outage(outcome, signal):
    assert outcome_signal(outcome) is signal


@pytest.mark.parametrize(("value", "problem"), [
    ({"failures": 0}, "failures"),
    ({"failures": True}, "failures"),
    ({"failures": "5"}, "failures"),
    ({"cooldown_s": -1}, "cooldown_s"),
    ({"cooldown_s": float("nan")}, "cooldown_s"),
    ({"cooldown_s": 30, "max_cooldown_s": 10}, "max_cooldown_s"),
    ({"enabled": "no"}, "enabled"),
    ({"threshold": 3}, "unknown key"),
    ([], "an object"),
])
def test_nonsense_breaker_settings_are_refused(value, problem):
    assert any(problem in p for p in breaker_errors(value)), breaker_errors(value)


def test_sound_breaker_settings_pass_and_take_the_defaults(settings):
    assert breaker_errors({"failures": 2, "cooldown_s": 1.5, "max_cooldown_s": 60}) == []
    assert breaker_errors({}) == [] and breaker_errors(None) == []
    policy = breaker_policy({"failures": 2})
    cfg = settings.TETHER
    assert (policy.failures, policy.cooldown_s, policy.max_cooldown_s) == (
        2, cfg["BREAKER_COOLDOWN_S"], cfg["BREAKER_MAX_COOLDOWN_S"])


@pytest.mark.parametrize("value", ["30", [-1], [0, "30"], [0] * 21, [True], {"0": 30}, [4000]])
def test_nonsense_retry_delays_are_refused(value):
    assert retry_delays_errors(value)


def test_retry_delays_fail_fast_then_cool_down():
    assert retry_delays_errors([0, 30]) == []
    delays = (0.0, 30.0)
    assert retry_delay_s(delays, 1) == 0.0
    for attempt in (2, 3, 7):  # the last delay repeats, with up to 10% of jitter
        assert 30.0 <= retry_delay_s(delays, attempt) <= 33.0
    assert retry_delay_s(delays, 1, retry_after=5.0) == 5.0  # Retry-After wins when longer


def test_an_open_breaker_row_outlives_a_late_failure_unchanged():
    for _ in range(3):
        _fail()
    before = _row()
    assert record(TARGET, owner="late", failed=True, policy=POLICY) is None
    after = _row()
    assert (after.state, after.open_until, after.failures) == (
        before.state, before.open_until, before.failures)
    assert after.open_until - timezone.now() <= timedelta(seconds=0.3)


def test_a_waiter_is_noted_only_while_the_breaker_is_open():
    for _ in range(3):
        _fail()
    assert wait_register(TARGET, task_id=7) is True
    assert wait_register(TARGET, task_id=7) is False  # once per task
    assert waiters_take(_row().pk) == [7]
    # The breaker closes before a late waiter is noted: nothing stays behind
    # for a close that has already handed its waiters over.
    Breaker.objects.filter(key=TARGET.key).update(state=BreakerState.CLOSED)
    assert wait_register(TARGET, task_id=8) is False
    assert not BreakerWaiter.objects.exists()


def _admits(n: int) -> int:
    """Statements sent for `n` admissions of `TARGET`, each of which admits."""
    with CaptureQueriesContext(connection) as sent:
        for _ in range(n):
            assert admit(TARGET, owner="w1", probe_ttl_s=TTL).allowed
    return len(sent)


def test_a_healthy_breaker_is_read_once_per_recheck_and_a_failure_reads_it_again(settings):
    """A breaker read as closed with no failures is trusted for
    `BREAKER_RECHECK_S` by the process that read it: one read, not one per
    call. A failure this process records ends that trust at once; a row with
    failures counted is read before every call until an answer ends the run."""
    settings.TETHER = {**settings.TETHER, "BREAKER_RECHECK_S": 600.0}
    assert _admits(5) == 1
    _fail()
    assert _admits(2) == 2  # one failure counted: read each time, exactly
    seen = admit(TARGET, owner="w1", probe_ttl_s=TTL)
    assert seen.failures == 1
    record(TARGET, owner="w1", failed=False, policy=POLICY, seen=seen)  # the run ends
    assert _row().failures == 0
    assert _admits(5) == 1
    settings.TETHER = {**settings.TETHER, "BREAKER_RECHECK_S": 0.0}
    forget_healthy()
    assert _admits(3) == 3  # 0: read before every call


def test_a_breaker_opened_by_another_process_holds_this_one_after_its_recheck(settings):
    settings.TETHER = {**settings.TETHER, "BREAKER_RECHECK_S": 0.2}
    assert admit(TARGET, owner="w1", probe_ttl_s=TTL).allowed  # trusted for 0.2 s
    # another process's failures open it: a row this process never wrote
    Breaker.objects.create(key=TARGET.key, tenant_id=TARGET.tenant_id, kind=TARGET.kind,
                           name=TARGET.name, state=BreakerState.OPEN,
                           open_until=timezone.now() + timedelta(seconds=60))

    def held() -> Any:
        seen = admit(TARGET, owner="w1", probe_ttl_s=TTL)
        return None if seen.allowed else seen

    admission = wait_for(held, timeout=10, message="the call held by the open breaker")
    assert admission.state == BreakerState.OPEN and admission.until > timezone.now()
