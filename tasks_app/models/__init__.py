"""Storage for tenants, agent profiles, tasks, steps, events, context summaries,
tenant secrets and daily spend."""

from ..machine import TaskStatus
from .agents import AgentProfile, MemoryPolicy, OnExhaustion
from .context import ContextSummary
from .events import Event
from .leases import LeaseWaiter, ResourceLease
from .payloads import PayloadBlob, PayloadUse
from .quotas import OverSpend, TenantQuota
from .secrets import TenantSecret
from .spend import DailySpend
from .sweeps import SweepRun
from .tasks import Step, StepKind, StepStatus, Task
from .tenancy import ApiKey, Membership, Role, Tenant
from .versions import AgentReleaseEntry, AgentVersion, ReleaseAction, VersionKind

__all__ = [
    "AgentProfile",
    "AgentReleaseEntry",
    "AgentVersion",
    "ApiKey",
    "ContextSummary",
    "DailySpend",
    "Event",
    "LeaseWaiter",
    "MemoryPolicy",
    "Membership",
    "OnExhaustion",
    "OverSpend",
    "PayloadBlob",
    "PayloadUse",
    "ReleaseAction",
    "ResourceLease",
    "Role",
    "Step",
    "StepKind",
    "StepStatus",
    "SweepRun",
    "Task",
    "TaskStatus",
    "TenantQuota",
    "TenantSecret",
    "Tenant",
    "VersionKind",
]
