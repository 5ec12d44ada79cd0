"""An agent's release gate: `release_gate = {min_pass_rate, max_cost_ratio}`.

A candidate version goes before live tasks (a release started or changed to
it, or a promote) only with a finished evaluation of it meeting the gate; an
admin may override a refusal with a comment, which is audited. Who knows the
evaluations (`evals_app`) sits above this module, so it registers the check
here from its `AppConfig.ready` (`register_gate_check`); without it, a gated
agent refuses every candidate (no evaluation can be found).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from audit_app.services import audit_record
from foundations.actors import Actor
from foundations.errors import conflict, invalid

from ..models import AgentProfile

GATE_FIELDS = ("min_pass_rate", "max_cost_ratio")
MAX_COST_RATIO = 1000.0

# (agent, candidate version, gate) -> why the candidate does not pass (None: it does)
GateCheck = Callable[[AgentProfile, int, dict[str, Any]], "str | None"]
_checks: list[GateCheck] = []


def register_gate_check(check: GateCheck) -> None:
    if check not in _checks:  # ready() may run twice
        _checks.append(check)


def gate_errors(gate: Any) -> list[str]:
    """What is wrong with a `release_gate` value (empty: it may be stored)."""
    if gate in (None, {}):
        return []
    if not isinstance(gate, dict):
        return ["an object {min_pass_rate, max_cost_ratio}, or {} for no gate"]
    problems = [f"{k}: unknown field" for k in sorted(set(gate) - set(GATE_FIELDS))]
    rate, ratio = gate.get("min_pass_rate"), gate.get("max_cost_ratio")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float)
                             or not 0 <= rate <= 1):
        problems.append("min_pass_rate: a number from 0 to 1")
    if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, int | float)
                              or not 0 < ratio <= MAX_COST_RATIO):
        problems.append(f"max_cost_ratio: a number above 0, at most {MAX_COST_RATIO:g}")
    if rate is None and ratio is None and not problems:
        problems.append("name min_pass_rate, max_cost_ratio or both (or {} for no gate)")
    return problems


def gate_refusal(agent: AgentProfile, candidate: int) -> str | None:
    """Why `candidate` may not go before live tasks (None: the agent has no gate,
    or an evaluation of the candidate meets it)."""
    gate = dict(agent.release_gate or {})
    if not gate:
        return None
    if not _checks:
        return "no evaluation of this version can be found"
    for check in _checks:
        refusal = check(agent, candidate, gate)
        if refusal is not None:
            return refusal
    return None


def gate_pass(agent: AgentProfile, candidate: int, *, actor: Actor, override: str) -> None:
    """Refuse `candidate` (409 with the reason) unless the gate passes, or an
    admin overrides it with a comment (audited, in the caller's transaction)."""
    refusal = gate_refusal(agent, candidate)
    if refusal is None:
        return
    override = (override or "").strip()
    if not override:
        raise conflict("release_gate",
                       f"version {candidate} does not pass the release gate: {refusal}",
                       candidate=candidate, gate=agent.release_gate, reason=refusal)
    if actor.role != "admin":
        raise invalid("invalid", "The request is not valid.",
                      override_gate=["only an admin may override the release gate"])
    audit_record(actor=actor, tenant_id=agent.tenant_id, kind="agent", name=agent.name,
                 action="gate_overridden", object_id=agent.pk,
                 after={"candidate": candidate, "gate": agent.release_gate, "reason": refusal,
                        "comment": override})
