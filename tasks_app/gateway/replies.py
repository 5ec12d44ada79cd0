"""A chat-completions reply as Tether decisions.

- each tool call → ``tool_call`` (arguments JSON-parsed; ``_cites`` taken out
  of the arguments into the decision's cites, ``_confidence`` into its
  confidence; the reply's text is the reason),
  in the order the model gave them; the reserved ``ask_user`` → ``ask_user``,
  ``remember`` → ``remember`` (its fields checked by the runner's handler),
  ``read_source`` → ``read_source`` (its ``ref`` a non-empty string);
- no tool call → ``final``: the text parsed as a JSON object when it is one
  (code fences allowed), else ``{"answer": text}``, its ``_confidence`` key
  taken out into the decision's confidence; the runner checks it against the
  profile's result schema;
- arguments that are not a JSON object, an empty reply, or a reply cut off
  by the length limit → ``invalid`` with the error, which the runner records
  and feeds back. Unknown tools and schema errors are left to the runner's
  policy check, which knows the registry.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from .base import CONFIDENCE_RULE, Decision, confidence_problem
from .messages import ASK_TOOL, CITES_ARG, CONFIDENCE_ARG, READ_SOURCE_TOOL, REMEMBER_TOOL

MAX_RAW = 4000
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL | re.IGNORECASE)


def decisions_from_message(message: dict[str, Any], *, finish_reason: str | None,
                           names: dict[str, str] | None = None) -> tuple[Decision, ...]:
    """`message` is the reply's ``choices[0].message`` as plain data; `names`,
    the model's names of tools it sees under another name, to ours
    (`messages.tool_names_back`)."""
    text = _visible_text(message.get("content"))
    calls = message.get("tool_calls") or []
    if calls:
        decisions = (_from_call(call, reason=text) for call in calls)
        return tuple(replace(d, tool=names[d.tool]) if names and d.tool in names else d
                     for d in decisions)
    if finish_reason == "length":
        return (Decision(kind="invalid", raw=text[:MAX_RAW],
                         error="the answer was cut off by the length limit; answer more briefly"),)
    if not text:
        return (Decision(kind="invalid", raw="", error="the reply was empty: call a tool, "
                         "ask the user, or give the final answer"),)
    result = _final_result(text)
    confidence = result.pop(CONFIDENCE_ARG, None)
    if confidence_problem(confidence):
        return (Decision(kind="invalid", raw=text[:MAX_RAW],
                         error=f"'{CONFIDENCE_ARG}': {CONFIDENCE_RULE}"),)
    return (Decision(kind="final", result=result, confidence=confidence),)


def refusal_of(choice: dict[str, Any]) -> str | None:
    """Why the provider refused to answer (its safety filter, or the model's
    own refusal), or None for an answer."""
    if choice.get("finish_reason") == "content_filter":
        return "content_filter"
    refusal = (choice.get("message") or {}).get("refusal")
    if isinstance(refusal, str) and refusal.strip():
        return f"refusal: {refusal.strip()[:300]}"
    return None


def _visible_text(content: Any) -> str:
    if isinstance(content, list):  # content parts
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return _THINK.sub("", str(content or "")).strip()


def _final_result(text: str) -> dict[str, Any]:
    fenced = _FENCE.match(text)
    candidate = fenced.group(1) if fenced else text
    try:
        parsed = json.loads(candidate)
    except ValueError:
        return {"answer": text}
    return parsed if isinstance(parsed, dict) else {"answer": text}


def _from_call(call: dict[str, Any], *, reason: str) -> Decision:
    function = call.get("function") or {}
    name = str(function.get("name") or "").replace("\x00", "").strip()[:100]
    arguments = function.get("arguments")
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments, default=str)
    if not name:
        return Decision(kind="invalid", raw=raw[:MAX_RAW], error="a tool call without a tool name")
    if isinstance(arguments, dict):  # some servers send an object instead of a JSON string
        args: Any = arguments
    elif arguments is None or not str(arguments).strip():
        args = {}
    else:
        try:
            args = json.loads(arguments)
        except ValueError as exc:
            return Decision(kind="invalid", tool=name, raw=raw[:MAX_RAW],
                            error=f"the arguments of {name} are not valid JSON: {exc}")
    if not isinstance(args, dict):
        return Decision(kind="invalid", tool=name, raw=raw[:MAX_RAW],
                        error=f"the arguments of {name} must be a JSON object")
    cites = args.pop(CITES_ARG, [])
    if not isinstance(cites, list) or not all(isinstance(c, str | int) for c in cites):
        return Decision(kind="invalid", tool=name, raw=raw[:MAX_RAW],
                        error=f"'{CITES_ARG}' must be a list of context ids")
    if name == ASK_TOOL:
        question = args.get("question")
        if not isinstance(question, str) or not question.strip():
            return Decision(kind="invalid", tool=name, raw=raw[:MAX_RAW],
                            error="ask_user needs a non-empty 'question'")
        return Decision(kind="ask_user", question=question.strip())
    if name == REMEMBER_TOOL:
        return Decision(kind="remember", memory=args, cites=tuple(str(c) for c in cites))
    if name == READ_SOURCE_TOOL:
        ref = args.get("ref")
        if not isinstance(ref, str) or not ref.strip():
            return Decision(kind="invalid", tool=name, raw=raw[:MAX_RAW],
                            error="read_source needs a non-empty 'ref' (an id from the context)")
        return Decision(kind="read_source", args={"ref": ref.strip()},
                        cites=tuple(str(c) for c in cites))
    confidence = args.pop(CONFIDENCE_ARG, None)
    if confidence_problem(confidence):
        return Decision(kind="invalid", tool=name, raw=raw[:MAX_RAW],
                        error=f"'{CONFIDENCE_ARG}' of {name}: {CONFIDENCE_RULE}")
    return Decision(kind="tool_call", tool=name, args=args, reason=reason[:MAX_RAW],
                    cites=tuple(str(c) for c in cites), confidence=confidence)
