"""Storage for agent profiles, tasks, steps, events, context summaries, payloads,
leases, sweeps and daily spend."""

from ..machine import TaskStatus
from .agents import AgentProfile, MemoryPolicy, OnExhaustion
from .context import ContextSummary
from .events import Event
from .leases import LeaseWaiter, ResourceLease
from .payloads import PayloadBlob, PayloadUse
from .spend import DailySpend
from .sweeps import SweepRun
from .tasks import Step, StepKind, StepStatus, Task
from .versions import AgentReleaseEntry, AgentVersion, ReleaseAction, VersionKind

__all__ = [
    "AgentProfile",
    "AgentReleaseEntry",
    "AgentVersion",
    "ContextSummary",
    "DailySpend",
    "Event",
    "LeaseWaiter",
    "MemoryPolicy",
    "OnExhaustion",
    "PayloadBlob",
    "PayloadUse",
    "ReleaseAction",
    "ResourceLease",
    "Step",
    "StepKind",
    "StepStatus",
    "SweepRun",
    "Task",
    "TaskStatus",
    "VersionKind",
]
