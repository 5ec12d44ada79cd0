"""The demo tenant's workflow: look an order up, ask a person above a
threshold, refund (the refund tool asks its own approval too), and tell the
customer; with one run waiting for the person's answer."""
from __future__ import annotations

from typing import Any

from accounts_app.models import Tenant
from foundations.actors import SYSTEM

from ..models import Workflow
from .runs import submit_run
from .workflows import workflow_create

DEMO_WORKFLOW = "refund_flow"
DEMO_DEFINITION = """\
inputs:
  type: object
  required: [order_id]
  properties:
    order_id: {type: string}
nodes:
  - id: lookup
    tool: lookup_order
    args: {order_id: "${inputs.order_id}"}
  - id: confirm
    after: [lookup]
    when: "nodes.lookup.amount_cents > 5000"
    human:
      approval: "Refund ${nodes.lookup.amount_cents} cents to ${nodes.lookup.customer}?"
      expires_in: 86400
  - id: refund
    after: [lookup, confirm]
    tool: issue_refund
    args:
      order_id: "${inputs.order_id}"
      amount_cents: "${nodes.lookup.amount_cents}"
      reason: "refund_flow"
  - id: tell
    after: [refund]
    tool: notify_customer
    critical: false
    args:
      customer: "${nodes.lookup.customer}"
      message: "Your order ${inputs.order_id} was refunded."
output:
  order: "${nodes.lookup.order_id}"
  refund: "${nodes.refund}"
"""


def demo_workflow_ensure(tenant: Tenant, *, requester_id: int | None) -> dict[str, Any]:
    """The demo workflow, and a run of it for the largest order (it waits for a
    person) the first time."""
    if Workflow.objects.filter(tenant=tenant, name=DEMO_WORKFLOW).exists():
        return {"workflow": DEMO_WORKFLOW, "runs_created": 0}
    workflow_create(tenant_id=tenant.pk, name=DEMO_WORKFLOW, definition=DEMO_DEFINITION,
                    description="Look up, confirm above 50.00, refund, tell the customer.",
                    actor=SYSTEM)
    submit_run(tenant_id=tenant.pk, requester_id=requester_id, workflow=DEMO_WORKFLOW,
               input={"order_id": "A-1003"}, actor=SYSTEM)
    return {"workflow": DEMO_WORKFLOW, "runs_created": 1}
