"""The deployment's figures that live in the database, computed at scrape time.

Whichever process did the work, the database knows how many tasks stand in
each status, which human requests wait and since when, and how long the
admission queue is; `/metrics` asks it once per scrape with a few grouped
queries, each served by an index:

- unfinished tasks by tenant, agent and status (`tether_tasks`): the rows of
  `task_status_fifo` (status, id) for the unfinished statuses only, so the
  cost follows the open work, not the table's history (finished tasks are
  counted by the processes as they finish, `tether_tasks_finished_total`: a
  count of every finished task would read the whole table at each scrape;
  docs/how-to/operate.md has a scrape timed on a big table);
- pending approvals, open questions and open reconciliations by tenant, with
  their oldest: the `*_inbox` indexes (tenant, status, -id);
- the admission queue (CREATED tasks) and its oldest: `task_status_fifo`;
- each tenant's spend on model calls today (UTC), from the `DailySpend` rollup
  (`daily_spend_day`: today's rows only).

Agent names are the tenants' own: each tenant shows at most `MAX_AGENTS` of
them by name, the rest as "other". A database that does not answer makes
`tether_database_up` 0 and the scrape still succeeds.
"""
from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterator

from django.db import DatabaseError
from django.db.models import Count, F, Min, Sum
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from accounts_app.models import Tenant
from approvals_app.models import (
    Approval,
    Decision,
    Question,
    QuestionStatus,
    Reconciliation,
    ReconciliationStatus,
)
from tasks_app.machine import NON_TERMINAL, TaskStatus
from tasks_app.models import AgentProfile, DailySpend, Task
from tasks_app.models.spend import EVALUATION_AGENT_PREFIX
from tasks_app.pricing import PICO
from tools_app.models import Breaker, BreakerState

log = logging.getLogger(__name__)

MAX_AGENTS = 20
MAX_BREAKERS = 200  # label sets per scrape, the most recently changed first
BREAKER_VALUES: dict[str, float] = {BreakerState.CLOSED: 0.0, BreakerState.HALF_OPEN: 1.0,
                                    BreakerState.OPEN: 2.0}
OTHER = "other"

# kind -> (model, the status that means "waiting for a person")
HUMAN_REQUESTS = {
    "approval": (Approval, Decision.PENDING),
    "question": (Question, QuestionStatus.OPEN),
    "reconciliation": (Reconciliation, ReconciliationStatus.OPEN),
}


class DeploymentCollector(Collector):
    """Registered in each scrape's registry by `config.metrics_view`."""

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        try:
            families = list(_families())
        except DatabaseError:
            log.exception("metrics: the database did not answer")
            families = []
        up = GaugeMetricFamily("tether_database_up",
                               "1 when the scrape's database queries succeeded, else 0.")
        up.add_metric([], 1.0 if families else 0.0)
        took = GaugeMetricFamily("tether_metrics_database_seconds",
                                 "Time the database queries of this scrape took.")
        took.add_metric([], time.monotonic() - started)
        yield from families
        yield up
        yield took


def _families() -> Iterator[Metric]:
    now = timezone.now()
    tenants = dict(Tenant.objects.values_list("id", "name"))
    ids = list(tenants)

    tasks = GaugeMetricFamily(
        "tether_tasks", "Tasks by tenant, agent and status (unfinished tasks: all of them).",
        labels=["tenant", "agent", "status"])
    rows: list[tuple[int, int, str, int]] = list(
        Task.objects.filter(tenant_id__in=ids, status__in=NON_TERMINAL)
        .values_list("tenant_id", "agent_id", "status").annotate(n=Count("id")).order_by())
    agent_names = _agent_names(rows)
    for (tenant_id, agent, status), n in _by_agent(rows, agent_names).items():
        tasks.add_metric([tenants.get(tenant_id, str(tenant_id)), agent, status], n)
    yield tasks

    queue = GaugeMetricFamily("tether_admission_queue_depth",
                              "Tasks waiting for admission (CREATED).")
    queue.add_metric([], sum(n for _t, _a, status, n in rows if status == TaskStatus.CREATED))
    yield queue
    oldest_created = (Task.objects.filter(status=TaskStatus.CREATED).order_by("id")
                      .values_list("created_at", flat=True).first())
    queue_age = GaugeMetricFamily("tether_admission_queue_oldest_age_seconds",
                                  "Age of the oldest task waiting for admission (0: none).")
    queue_age.add_metric([], _age(now, oldest_created))
    yield queue_age

    pending = GaugeMetricFamily("tether_human_requests_pending",
                                "Requests waiting for a person, by tenant and kind.",
                                labels=["tenant", "kind"])
    oldest = GaugeMetricFamily("tether_human_requests_oldest_age_seconds",
                               "Age of the oldest request waiting for a person.",
                               labels=["tenant", "kind"])
    for kind, (model, status) in HUMAN_REQUESTS.items():
        waiting = (model.objects.filter(tenant_id__in=ids, status=status)  # type: ignore[attr-defined]
                   .values_list("tenant_id").annotate(n=Count("id"), first=Min("created_at"))
                   .order_by())
        for tenant_id, n, first in waiting:
            name = tenants.get(tenant_id, str(tenant_id))
            pending.add_metric([name, kind], n)
            oldest.add_metric([name, kind], _age(now, first))
    yield pending
    yield oldest

    overdue = GaugeMetricFamily("tether_approvals_overdue",
                                "Pending approvals past their SLA, not yet expired by the sweep.",
                                labels=["tenant"])
    for tenant_id, n in (Approval.objects.filter(tenant_id__in=ids, status=Decision.PENDING,
                                                 expires_at__lt=now)
                         .values_list("tenant_id").annotate(n=Count("id")).order_by()):
        overdue.add_metric([tenants.get(tenant_id, str(tenant_id))], n)
    yield overdue
    breached = CounterMetricFamily("tether_approvals_sla_breached",
                                   "Approvals that expired: nobody decided within their SLA.",
                                   labels=["tenant"])
    for tenant_id, n in (Approval.objects.filter(tenant_id__in=ids, status=Decision.EXPIRED)
                         .values_list("tenant_id").annotate(n=Count("id")).order_by()):
        breached.add_metric([tenants.get(tenant_id, str(tenant_id))], n)
    yield breached

    spend = GaugeMetricFamily(
        "tether_tenant_spend_today_dollars",
        "Dollars spent on model calls today (UTC day) at the agents' prices, by tenant.",
        labels=["tenant"])
    for tenant_id, pico in (DailySpend.objects.filter(day=now.date(), tenant_id__in=ids)
                            .exclude(agent__startswith=EVALUATION_AGENT_PREFIX)
                            .values_list("tenant_id").annotate(c=Sum("cost_pico")).order_by()):
        spend.add_metric([tenants.get(tenant_id, str(tenant_id))], int(pico or 0) / PICO)
    yield spend

    breakers = GaugeMetricFamily(
        "tether_breaker_state", "Circuit breakers by tenant, kind (tool, model) and name: "
        "0 closed, 1 half-open, 2 open (a breaker whose downstream never failed is not listed).",
        labels=["tenant", "kind", "name"])
    for tenant_id, kind, name, state in (
            Breaker.objects.filter(tenant_id__in=ids).order_by(F("changed_at").desc(nulls_last=True))
            .values_list("tenant_id", "kind", "name", "state")[:MAX_BREAKERS]):
        breakers.add_metric([tenants.get(tenant_id, str(tenant_id)), kind, name],
                            BREAKER_VALUES.get(state, 0.0))
    yield breakers


def _agent_names(rows: list[tuple[int, int, str, int]]) -> dict[int, str]:
    """The agents to name: per tenant, the `MAX_AGENTS` with the most tasks."""
    per_tenant: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for tenant_id, agent_id, _status, n in rows:
        per_tenant[tenant_id][agent_id] += n
    keep = [agent_id for counts in per_tenant.values()
            for agent_id in sorted(counts, key=counts.__getitem__, reverse=True)[:MAX_AGENTS]]
    return dict(AgentProfile.objects.filter(id__in=keep).values_list("id", "name"))


def _by_agent(rows: list[tuple[int, int, str, int]],
              names: dict[int, str]) -> dict[tuple[int, str, str], int]:
    out: dict[tuple[int, str, str], int] = defaultdict(int)
    for tenant_id, agent_id, status, n in rows:
        out[(tenant_id, names.get(agent_id, OTHER), status)] += n
    return out


def _age(now, then) -> float:  # type: ignore[no-untyped-def]
    return max(0.0, (now - then).total_seconds()) if then is not None else 0.0
