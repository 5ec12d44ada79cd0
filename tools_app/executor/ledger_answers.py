"""Parsing a status query's answer."""
from __future__ import annotations

from typing import Any

from .types import StatusAnswer


def status_answer_from(data: Any) -> StatusAnswer:
    """Parse a status query's answer, strictly: anything unexpected is `unknown`."""
    if not isinstance(data, dict) or data.get("state") not in ("succeeded", "failed", "not_found", "unknown"):
        return StatusAnswer(state="unknown", detail="the status query answered in an unexpected shape")
    return StatusAnswer(state=data["state"], result=data.get("result"), detail=str(data.get("detail", "")))
