"""Parsing a status query's answer."""
from __future__ import annotations

from typing import Any

from .jsonsafe import storable
from .types import StatusAnswer

STATES = ("succeeded", "failed", "not_found", "unknown")


def status_answer_from(data: Any) -> StatusAnswer:
    """Parse a status query's answer, strictly: anything unexpected is `unknown`."""
    if not isinstance(data, dict) or data.get("state") not in STATES:
        return StatusAnswer(state="unknown",
                            detail="the status query answered in an unexpected shape")
    return StatusAnswer(state=data["state"], result=storable(data.get("result")),
                        detail=str(data.get("detail", ""))[:2000].replace("\x00", ""))
