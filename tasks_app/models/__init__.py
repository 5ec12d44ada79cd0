"""Storage for tenants, agent profiles, tasks, steps, events, context summaries and
tenant secrets."""

from ..machine import TaskStatus
from .agents import AgentProfile, OnExhaustion
from .context import ContextSummary
from .events import Event
from .secrets import TenantSecret
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
    "Event",
    "Membership",
    "OnExhaustion",
    "ReleaseAction",
    "Role",
    "Step",
    "StepKind",
    "StepStatus",
    "SweepRun",
    "Task",
    "TaskStatus",
    "TenantSecret",
    "Tenant",
    "VersionKind",
]
