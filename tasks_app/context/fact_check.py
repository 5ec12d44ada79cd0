"""A new summary version checked against the facts of what it folds.

The facts to keep (`facts_to_keep`) are the version it is built on's facts
plus those of the steps it folds now (`context.facts`), each with its step
and that step's event ids. `check_summary` checks them against the summary's
text and the facts already pinned:

- a model's summary that drops one is refused (not used): the deterministic
  digest is used instead, the facts it dropped are pinned verbatim, and the
  refusal is recorded with what it dropped;
- the facts the text used lacks are pinned verbatim too; pinned facts carry
  their source step and event ids, and stay pinned in every later version
  built on this one (the context shows them as `fact:<n>`).

So every fact read from the originals is, in each version, in its text or
pinned. The bounds: a version checks at most `MAX_FACTS` facts (the newest:
older ones were checked, kept or pinned, by the versions before it) and pins
at most `MAX_PINNED` (the newest; the count dropped is recorded).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..models import ContextSummary, Event, Step
from .facts import Fact, missing, normalise, step_facts, strings_of

MAX_FACTS = 300
MAX_PINNED = 40
MAX_REFUSED_CHARS = 4000


@dataclass(frozen=True)
class Checked:
    """What a new version keeps: its text, its facts, its pinned facts, and
    the record of the check (shown with the version)."""

    text: str
    facts: list[dict[str, Any]]
    pinned: list[dict[str, Any]]
    record: dict[str, Any] = field(default_factory=dict)

    @property
    def refused(self) -> bool:
        return "refused" in self.record


def originals(step: Step) -> Iterable[str]:
    """A step's texts as it happened: arguments, result, error, what the
    model said with it (its reason, its question), in full."""
    decision = step.decision or {}
    for said in ("reason", "question"):
        if decision.get(said):
            yield str(decision[said])
    if step.kind == "memory":
        yield from strings_of(decision.get("memory"))
    yield from strings_of(step.args)
    yield from strings_of(step.output)
    yield from strings_of(step.error)


def facts_to_keep(task_id: int, *, base: ContextSummary | None, steps: list[Step],
                  event_ids: list[int]) -> list[Fact]:
    """The base version's facts, then the folded steps', each once (the first
    source kept), the newest `MAX_FACTS`."""
    known: list[Fact] = []
    if base is not None:
        stored = (ContextSummary.objects.filter(pk=base.pk)
                  .values_list("facts", flat=True).first()) or []
        known = [Fact.from_dict(f) for f in stored if isinstance(f, dict)]
    by_step: dict[int, list[int]] = {}
    for event_id, step_no in (Event.objects.filter(task_id=task_id, id__in=event_ids)
                              .values_list("id", "payload__step_no")):
        if isinstance(step_no, int):
            by_step.setdefault(step_no, []).append(event_id)
    seen = {normalise(f.text) for f in known}
    for step in steps:
        for fact in step_facts(originals(step), step_no=step.step_no,
                               event_ids=tuple(sorted(by_step.get(step.step_no, ())))):
            key = normalise(fact.text)
            if key not in seen:
                seen.add(key)
                known.append(fact)
    return known[-MAX_FACTS:]


def check_summary(text: str, *, facts: list[Fact], base: ContextSummary | None, method: str,
                  digest: str) -> Checked:
    """Check `text` (by `method`) against `facts`; fall back to `digest` if a
    model's text drops one; pin what the text used lacks."""
    pinned = list(base.pinned_facts or []) if base is not None else []
    held = [str(f.get("text", "")) for f in pinned]
    lost = missing(facts, text, *held)
    record: dict[str, Any] = {"checked": len(facts)}
    if lost and method == "model":
        record["refused"] = {"method": method, "missing_count": len(lost),
                             "missing": [f.as_dict() for f in lost[:20]],
                             "text": text[:MAX_REFUSED_CHARS]}
        text = digest
        # what the refused summary dropped is pinned, and whatever the digest lacks too
        also = {normalise(f.text) for f in lost}
        lost += [f for f in missing(facts, text, *held) if normalise(f.text) not in also]
    pinned += [f.as_dict() for f in lost]
    if len(pinned) > MAX_PINNED:
        record["pinned_dropped"] = len(pinned) - MAX_PINNED
        pinned = pinned[-MAX_PINNED:]
    record.update(kept=len(facts) - len(lost), pinned_now=len(lost), pinned_total=len(pinned))
    return Checked(text=text, facts=[f.as_dict() for f in facts], pinned=pinned, record=record)
