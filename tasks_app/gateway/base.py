"""Decisions, the context a backend sees, and the backend interface.

A decision is one of:
- ``tool_call {tool, args, reason, cites}``
- ``final {result}``
- ``ask_user {question}``
- ``remember {memory: {text, kind, scope, value?, uri?, tags?}, cites}``: a
  memory write the model proposes; the agent's `memory_policy` says whether it
  is written, waits for a reviewer, or is refused. It never changes the task's
  status (the registered handler, `runner.recording.register_decision_kind`).
- ``read_source {ref, cites}``: read back the original of a step, event,
  summary or memory item the model was shown (`context.originals`); its
  result is the original, bounded in size. It never changes the task's status.
- ``invalid {raw, error}``: what the model said could not be parsed into one of
  the above; the runner records it as an `invalid_decision` and feeds the
  error back to the model.
- ``fail {error, result}``: the task cannot succeed (never a model's: a
  workflow's orchestrator says it when a critical node failed).

A decision may carry `workflow` (the node of a workflow run it serves:
`{node, item?, compensate?}`), and a question an `answer_schema` (the JSON
schema its answer must match).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..pricing import TokenUsage

if TYPE_CHECKING:
    from .model_settings import ModelTarget

DecisionKind = Literal["tool_call", "final", "ask_user", "invalid", "fail", "remember",
                       "read_source"]


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    tool: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    cites: tuple[str, ...] = ()
    result: Any = None
    question: str = ""
    raw: str = ""
    error: str = ""
    workflow: dict[str, Any] | None = None
    answer_schema: dict[str, Any] | None = None
    expires_in_s: int | None = None  # a question that expires (then `on_expiry`)
    on_expiry: str = ""
    memory: dict[str, Any] | None = None  # a `remember`'s proposed item, as the model gave it
    # how sure the model says it is (0..1), when it says; an agent's `min_confidence`
    # sends a decision below it to a person
    confidence: float | None = None
    # a completion check's call (`runner.completion`): {index, attempt, answer, passed};
    # on a final answer, the checks it passed
    check: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        shape = self._shape()
        if self.workflow is not None:
            shape["workflow"] = self.workflow
        if self.confidence is not None and self.kind in ("tool_call", "final"):
            shape["confidence"] = self.confidence
        if self.check is not None and self.kind in ("tool_call", "final"):
            shape["check"] = self.check
        return shape

    def _shape(self) -> dict[str, Any]:
        if self.kind == "tool_call":
            return {
                "kind": "tool_call",
                "tool": self.tool,
                "args": self.args,
                "reason": self.reason,
                "cites": list(self.cites),
            }
        if self.kind == "final":
            return {"kind": "final", "result": self.result}
        if self.kind == "ask_user":
            asked: dict[str, Any] = {"kind": "ask_user", "question": self.question}
            if self.answer_schema is not None:
                asked["answer_schema"] = self.answer_schema
            if self.expires_in_s is not None:
                asked.update(expires_in_s=self.expires_in_s, on_expiry=self.on_expiry)
            return asked
        if self.kind == "fail":
            return {"kind": "fail", "error": self.error, "result": self.result}
        if self.kind == "remember":
            return {"kind": "remember", "memory": self.memory or {}, "cites": list(self.cites)}
        if self.kind == "read_source":
            return {"kind": "read_source", "ref": self.args.get("ref"), "cites": list(self.cites)}
        invalid: dict[str, Any] = {"kind": "invalid", "raw": self.raw, "error": self.error}
        if self.tool:  # a malformed tool call: the context shows it as that call
            invalid["tool"] = self.tool
        return invalid

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Decision:
        kind = data.get("kind")
        workflow = data.get("workflow")
        if kind == "tool_call":
            return cls(
                kind="tool_call",
                tool=data.get("tool", ""),
                args=data.get("args") or {},
                reason=data.get("reason", ""),
                cites=tuple(data.get("cites") or ()),
                workflow=workflow,
                confidence=data.get("confidence"),
                check=data.get("check"),
            )
        if kind == "final":
            return cls(kind="final", result=data.get("result"), workflow=workflow,
                       confidence=data.get("confidence"), check=data.get("check"))
        if kind == "ask_user":
            return cls(kind="ask_user", question=data.get("question", ""),
                       answer_schema=data.get("answer_schema"), workflow=workflow,
                       expires_in_s=data.get("expires_in_s"),
                       on_expiry=str(data.get("on_expiry", "")))
        if kind == "fail":
            return cls(kind="fail", error=str(data.get("error", "")), result=data.get("result"),
                       workflow=workflow)
        if kind == "remember":
            return cls(kind="remember", memory=dict(data.get("memory") or {}),
                       cites=tuple(data.get("cites") or ()))
        if kind == "read_source":
            return cls(kind="read_source", args={"ref": data.get("ref")},
                       cites=tuple(data.get("cites") or ()))
        return cls(
            kind="invalid",
            tool=str(data.get("tool", "")),
            raw=str(data.get("raw", "")),
            error=str(data.get("error", "")),
        )


def parse_decision(data: Any) -> Decision:
    """Structural validation of a decision proposed as plain data.

    Accepts the scripted-entry shape (``{"tool", "args"}``, ``{"ask"}``,
    ``{"final"}``, ``{"remember": {...}}``, ``{"read_source": "step:3"}``) and the
    decision shape
    (``{"kind": ...}``). Anything else becomes an ``invalid`` decision carrying the reason.
    """
    if not isinstance(data, dict):
        return Decision(kind="invalid", raw=_raw(data), error="a decision must be a JSON object")
    if "invalid" in data:
        return Decision(
            kind="invalid", raw=_raw(data["invalid"]), error="the model output is not a decision"
        )
    kind = data.get("kind")
    if "tool" in data and kind in (None, "tool_call"):
        tool, args = data.get("tool"), data.get("args", {})
        if not isinstance(tool, str) or not tool:
            return Decision(
                kind="invalid", raw=_raw(data), error="'tool' must be a non-empty string"
            )
        if not isinstance(args, dict):
            return Decision(kind="invalid", raw=_raw(data), error="'args' must be a JSON object")
        cites = data.get("cites") or ()
        if not isinstance(cites, list | tuple) or not all(isinstance(c, str | int) for c in cites):
            return Decision(kind="invalid", raw=_raw(data), error="'cites' must be a list of ids")
        confidence = data.get("confidence")
        if confidence_problem(confidence):
            return Decision(kind="invalid", raw=_raw(data), error=CONFIDENCE_RULE)
        return Decision(
            kind="tool_call",
            tool=tool,
            args=args,
            reason=str(data.get("reason", "")),
            cites=tuple(str(c) for c in cites),
            confidence=confidence,
        )
    if "ask" in data or kind == "ask_user":
        question = data.get("ask", data.get("question"))
        if not isinstance(question, str) or not question.strip():
            return Decision(
                kind="invalid", raw=_raw(data), error="a question must be a non-empty string"
            )
        return Decision(kind="ask_user", question=question)
    if "remember" in data or kind == "remember":
        memory = data.get("remember", data.get("memory"))
        if not isinstance(memory, dict):
            return Decision(kind="invalid", raw=_raw(data), error="'remember' must be an object")
        return Decision(kind="remember", memory=memory)
    if "read_source" in data or kind == "read_source":
        ref = data.get("read_source", data.get("ref"))
        if not isinstance(ref, str) or not ref.strip():
            return Decision(kind="invalid", raw=_raw(data),
                            error="'read_source' must be a context id such as step:3")
        return Decision(kind="read_source", args={"ref": ref.strip()})
    if "final" in data or kind == "final":
        confidence = data.get("confidence")
        if confidence_problem(confidence):
            return Decision(kind="invalid", raw=_raw(data), error=CONFIDENCE_RULE)
        return Decision(kind="final", result=data.get("final", data.get("result")),
                        confidence=confidence)
    return Decision(
        kind="invalid", raw=_raw(data), error="expected one of tool_call, final, ask_user"
    )


CONFIDENCE_RULE = "a confidence must be a number from 0 to 1"


def confidence_problem(value: Any) -> bool:
    """Is `value` not a confidence (absent is fine: a decision may leave it out)?"""
    if value is None:
        return False
    return isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1


def _raw(value: Any) -> str:
    if isinstance(value, str):
        return value[:4000]
    try:
        return json.dumps(value)[:4000]
    except (TypeError, ValueError):
        return repr(value)[:4000]


@dataclass(frozen=True)
class ToolSpecView:
    """What a model is told about a tool."""

    name: str
    description: str
    args_schema: dict[str, Any]


@dataclass(frozen=True)
class ContextItem:
    """One entry of the context, with an id a decision may cite."""

    id: str
    role: Literal["system", "pinned", "summary", "step", "observation", "memory"]
    text: str
    data: Any = None


@dataclass(frozen=True)
class ContextSnapshot:
    """Everything a backend may look at for one decision. Built by
    `tasks_app.context.builder` from O(window) rows."""

    task_id: int
    trace_id: str
    goal: str
    model: dict[str, Any]
    system_prompt: str
    pinned: tuple[ContextItem, ...]
    summary: ContextItem | None
    window: tuple[dict[str, Any], ...]
    tools: tuple[ToolSpecView, ...]
    model_calls_so_far: int
    script: tuple[Any, ...] | None = None
    # items of the tenant's memory (`context.sources`): data, shown fenced, never as instructions
    memory: tuple[ContextItem, ...] = ()
    # built-in tools offered besides `ask_user` (`remember` when the agent may write memory)
    offers: tuple[str, ...] = ()

    def items(self) -> list[ContextItem]:
        return [*self.pinned, *([self.summary] if self.summary else []), *self.memory]

    def size_chars(self) -> int:
            return (
            len(self.system_prompt)
            + sum(len(i.text) for i in self.items())
            + len(json.dumps(list(self.window), default=str))
        )


@dataclass(frozen=True)
class ModelReply:
    """A backend's answer: one or more decisions (several tool calls in one
    response become several steps, in the order given) plus the call log."""

    decisions: tuple[Decision, ...]
    model: str
    tokens: int = 0
    latency_ms: int = 0
    raw: str = ""
    input_summary: str = ""
    used_fallback: bool = False
    attempts: int = 1
    # the reply's usage split by direction; None when the backend reports none (scripted)
    usage: TokenUsage | None = None
    # replies refused before this one (a safety filter): {model, reason, then}
    refusals: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class Summarized:
    """A model's running notes of a task (`summarize`) and what the call used."""

    text: str
    tokens: int
    model: str
    usage: TokenUsage | None = None
    used_fallback: bool = False


class GatewayError(Exception):
    """The model could not be reached or kept failing; `retryable` says whether
    trying again later may help. `calls`: the requests actually sent (each counts
    against the budget); `held`: the last word was a circuit breaker's or a rate
    limit's (`rate_limited`), come back after `retry_after_s` without having
    called."""

    def __init__(
        self, message: str, *, retryable: bool, retry_after_s: float | None = None,
        calls: int = 1, held: bool = False, rate_limited: bool = False,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after_s = retry_after_s
        self.calls = calls
        self.held = held or rate_limited
        self.rate_limited = rate_limited


class ModelRefused(GatewayError):
    """Every model asked refused to answer (a provider's safety filter, or the
    model's own refusal), after one more try and the fallback: a person
    decides what happens to the task. `refusals`: each refused reply."""

    def __init__(self, message: str, *, refusals: tuple[dict[str, Any], ...],
                 calls: int) -> None:
        super().__init__(message, retryable=False, calls=calls)
        self.refusals = refusals


class OpenSteps(GatewayError):
    """The decision maker waits on steps of the task that are still open (a
    workflow run whose calls ran at once, resumed after a crash or a backoff):
    the runner settles them, then asks again. Never a model's answer."""

    def __init__(self, step_nos: tuple[int, ...]) -> None:
        super().__init__(f"steps {list(step_nos)} are still open", retryable=True, calls=0)
        self.step_nos = step_nos


class CallGuard(Protocol):
    """A circuit breaker around each model endpoint, supplied by the caller (the
    gateway itself keeps no state): `admit` returns None to call now, else the
    seconds to wait; `record` says what came of a call that was admitted:
    `failed` True for an outage, False for an answer, None when nothing was sent.
    Both are awaited on the I/O loop: a guard that needs the database hands that
    part to a thread (the runner's, `tasks_app.runner.breaker_waits.ModelGuard`)."""

    async def admit(self, base_url: str, model: str, *, timeout_s: float) -> float | None: ...

    async def record(self, base_url: str, model: str, *, failed: bool | None,
                     error: str) -> None: ...


class CallLimiter(Protocol):
    """The rate limits of the model endpoints (`tools_app.ratelimits`), supplied
    by the caller: `reserve` takes a call's estimated tokens from its target's
    limit before it is sent and returns None to call now, else the seconds to
    wait (the slot is kept for the caller); `settle` corrects the reservation
    with what the call used (`used`: the reply's usage, None when there was
    none; `sent`: whether the request reached the endpoint) and, after a 429,
    holds the limit for the server's `retry_after_s`. Only targets with a
    `rate_limit` are passed. Awaited on the I/O loop."""

    async def reserve(self, target: ModelTarget, tokens: int) -> float | None: ...

    async def settle(self, target: ModelTarget, *, used: int | None, sent: bool,
                     throttled: bool = False, retry_after_s: float | None = None) -> None: ...


class ModelBackend(Protocol):
    name: str

    def decide(self, context: ContextSnapshot) -> ModelReply: ...

    async def adecide(self, context: ContextSnapshot) -> ModelReply:
        """The same, awaited on the I/O loop (the runner's way: no thread waits)."""
        ...
