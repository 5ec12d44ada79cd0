"""The scripted backend: a fixed list of decisions supplied with the task.

Entry *n* answers the task's *n*-th model call, so it is deterministic and
crash-safe: the model-call counter is committed together with the decision.
"""
from __future__ import annotations

import json

from .base import ContextSnapshot, Decision, GatewayError, ModelReply, parse_decision


class ScriptedBackend:
    name = "scripted"

    async def adecide(self, context: ContextSnapshot) -> ModelReply:
        return self.decide(context)

    def decide(self, context: ContextSnapshot) -> ModelReply:
        script = context.script or ()
        index = context.model_calls_so_far
        if index >= len(script):
            raise GatewayError(
                f"the script has {len(script)} entries and model call {index + 1} was asked for",
                retryable=False, calls=0,
            )
        entry = script[index]
        decision: Decision = parse_decision(entry)
        raw = json.dumps(entry, default=str)
        return ModelReply(
            decisions=(decision,),
            model="scripted",
            tokens=max(1, len(raw) // 4),
            raw=raw,
            input_summary=f"{len(context.window)} recent steps, {len(context.pinned)} pinned facts",
        )
