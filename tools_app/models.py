"""Tool registrations, the idempotency ledger, and the demo downstream store.

The ledger (`ToolExecution`) has one row per server-made idempotency key. A
row is written (IN_PROGRESS, claimed by one executor until `claimed_until`)
*before* the tool is called, so a crash leaves evidence that a call may have
happened; recovery decides from the tool's side effect what that means.
"""

from __future__ import annotations

from django.db import models


class ToolKind(models.TextChoices):
    PYTHON = "python"
    HTTP = "http"
    MCP = "mcp"


class SideEffect(models.TextChoices):
    READ = "read"
    IDEMPOTENT_WRITE = "idempotent_write"
    WRITE = "write"


class Risk(models.TextChoices):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


class McpServer(models.Model):
    """An MCP server registered by a tenant's admin: its tools become tools of kind
    `mcp` named `{server}__{tool}` (`tools_app.mcp`)."""

    tenant = models.ForeignKey("accounts_app.Tenant", on_delete=models.CASCADE,
                               related_name="mcp_servers")
    name = models.CharField(max_length=30)
    url = models.URLField(max_length=500, blank=True, help_text="Streamable HTTP endpoint.")
    stdio = models.CharField(max_length=64, blank=True,
                             help_text="A stdio server the operator configured, by name.")
    # {header name: template naming secrets of the tenant}, as an http tool's
    secret_headers = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)
    last_changes = models.JSONField(default=dict, blank=True,
                                    help_text="What the last refresh found.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="mcp_server_unique_name")
        ]

    def __str__(self) -> str:
        return self.name


class Review(models.TextChoices):
    """Why an mcp tool waits for an admin: its settings are the server's hints until saved."""

    CONFIRMED = ""
    NEW = "new"
    SCHEMA_CHANGED = "schema_changed"
    GONE = "gone"


class Tool(models.Model):
    tenant = models.ForeignKey("accounts_app.Tenant", on_delete=models.CASCADE,
                               related_name="tools")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    kind = models.CharField(max_length=8, choices=ToolKind.choices, default=ToolKind.PYTHON)
    target = models.CharField(max_length=255, blank=True,
                              help_text="A python tool's dotted path; an mcp tool's remote name.")
    url = models.URLField(max_length=500, blank=True)
    status_url = models.CharField(
        max_length=500, blank=True, help_text="GET, with {key} substituted."
    )
    status_tool = models.CharField(max_length=100, blank=True, help_text="A python status query.")
    compensation_tool = models.CharField(max_length=100, blank=True)
    # The resource a call touches, a template over its arguments ("order:{order_id}"):
    # calls on one resource never run at the same time (`tasks_app.leases`).
    resource = models.CharField(max_length=200, blank=True, default="", db_default="")
    # The resource a call touches, a template over its arguments ("order:{order_id}"):
    # calls on one resource never run at the same time (`tasks_app.leases`).
    resource = models.CharField(max_length=200, blank=True, default="", db_default="")
    # {header name: template naming secrets of the tenant, e.g. "Bearer {secret:payments}"}
    secret_headers = models.JSONField(default=dict, blank=True)
    args_schema = models.JSONField(default=dict)
    result_schema = models.JSONField(default=dict, blank=True)
    risk = models.CharField(max_length=8, choices=Risk.choices, default=Risk.LOW)
    requires_approval = models.BooleanField(default=False)
    timeout_s = models.FloatField(default=10.0)
    side_effect = models.CharField(
        max_length=20, choices=SideEffect.choices, default=SideEffect.READ
    )
    max_retries = models.PositiveIntegerField(default=3)
    # Seconds before each retry of a transient error, in turn, the last repeated
    # (`[0, 30]`: at once, then every 30 s); empty: exponential backoff.
    retry_delays_s = models.JSONField(default=list, blank=True, db_default=[])
    # This tool's circuit breaker: {failures, cooldown_s, max_cooldown_s}; {}: defaults.
    breaker = models.JSONField(default=dict, blank=True, db_default={})
    # http and mcp tools: {requests_per_minute}, applied before each call,
    # shared by every worker (`tools_app.ratelimits`); {}: no limit.
    rate_limit = models.JSONField(default=dict, blank=True, db_default={})
    enabled = models.BooleanField(default=True)
    # mcp tools: the server (`target` is the tool's name there), its annotations
    # as listed, and whether an admin has confirmed the settings.
    mcp_server = models.ForeignKey(McpServer, null=True, blank=True, on_delete=models.CASCADE,
                                   related_name="tools")
    mcp_hints = models.JSONField(default=dict, blank=True)
    review = models.CharField(max_length=16, choices=Review.choices, default=Review.CONFIRMED,
                              blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="tool_unique_name")]

    def __str__(self) -> str:
        return self.name


class LedgerStatus(models.TextChoices):
    IN_PROGRESS = "IN_PROGRESS"
    SUCCEEDED = "SUCCEEDED"
    FAILED_RETRYABLE = "FAILED_RETRYABLE"
    FAILED_FINAL = "FAILED_FINAL"
    UNCERTAIN = "UNCERTAIN"


class ToolExecution(models.Model):
    idempotency_key = models.CharField(max_length=64)  # unique: Meta
    tenant_id = models.BigIntegerField()
    task_id = models.BigIntegerField(db_index=True)
    step_id = models.BigIntegerField()
    tool = models.CharField(max_length=100)
    args = models.JSONField()
    status = models.CharField(max_length=20, choices=LedgerStatus.choices)
    # a large one as a reference to its step's blob (`tasks_app.payloads`,
    # read back with `resolve_ledger`)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    attempts = models.JSONField(default=list, help_text="One entry per call: started, outcome, ms.")
    status_answer = models.JSONField(null=True, blank=True, help_text="Latest status-query answer.")
    claimed_by = models.CharField(max_length=128, blank=True)
    claimed_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # A constraint, not `unique=True`: that would add a second (LIKE) index
        # that every claim pays for and no query uses.
        constraints = [models.UniqueConstraint(fields=["idempotency_key"], name="ledger_key")]

    def __str__(self) -> str:
        return f"{self.tool} {self.idempotency_key[:12]}… {self.status}"


# --- circuit breakers (tools_app.breakers) -----------------------------------------


class BreakerState(models.TextChoices):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Breaker(models.Model):
    """One circuit breaker, shared by every worker: a tenant's HTTP tool or model
    endpoint. A row exists once its downstream failed; no row reads as closed.
    Every change is a conditional UPDATE (`tools_app.breakers.store`)."""

    key = models.CharField(max_length=100)  # unique: Meta
    tenant_id = models.BigIntegerField()
    kind = models.CharField(max_length=8)  # "tool" or "model"
    name = models.CharField(max_length=200)  # the tool's name, or the model's
    target = models.CharField(max_length=500, blank=True)  # the URL or base URL
    state = models.CharField(max_length=10, choices=BreakerState.choices,
                             default=BreakerState.CLOSED)
    failures = models.PositiveIntegerField(default=0)  # transient failures in a row
    cooldown_s = models.FloatField(default=0.0)  # the current cool-down (grows on a failed probe)
    open_until = models.DateTimeField(null=True, blank=True)  # a probe is admitted from then
    probe_owner = models.CharField(max_length=128, blank=True)
    probe_until = models.DateTimeField(null=True, blank=True)  # the probe's lease
    opened_count = models.PositiveIntegerField(default=0)
    last_error = models.JSONField(null=True, blank=True)
    changed_at = models.DateTimeField(null=True, blank=True)  # the last change of state
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["key"], name="breaker_key")]
        indexes = [models.Index(fields=["tenant_id", "kind", "name"], name="breaker_tenant")]

    def __str__(self) -> str:
        return f"breaker of {self.kind} {self.name}: {self.state}"


class BreakerWaiter(models.Model):
    """A task waiting for a breaker to close; woken (and the row deleted) when it does."""

    breaker = models.ForeignKey(Breaker, on_delete=models.CASCADE, related_name="waiters")
    task_id = models.BigIntegerField(db_index=True)
    since = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["breaker", "task_id"],
                                               name="breaker_waiter_once")]

    def __str__(self) -> str:
        return f"task {self.task_id} waits for breaker {self.breaker_id}"


# --- the demo downstream store --------------------------------------------------


class DemoOrder(models.Model):
    order_id = models.CharField(max_length=32, unique=True)
    customer = models.CharField(max_length=100)
    email = models.CharField(max_length=200)
    amount_cents = models.PositiveIntegerField()
    status = models.CharField(max_length=20, default="delivered")

    def __str__(self) -> str:
        return self.order_id


class DemoRefund(models.Model):
    """Keyed by the caller's idempotency key: a replay cannot refund twice."""

    idempotency_key = models.CharField(max_length=64, unique=True)
    order_id = models.CharField(max_length=32)
    amount_cents = models.PositiveIntegerField()
    reason = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"refund of {self.order_id} ({self.amount_cents})"


class DemoNotification(models.Model):
    """A plain write: the provider records the key it was given but does not
    deduplicate, so a blind replay would send a second message."""

    idempotency_key = models.CharField(max_length=64, db_index=True)
    customer = models.CharField(max_length=100)
    message = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"notification to {self.customer}"
