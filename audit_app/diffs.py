"""What changed between two JSON documents, as a list a person can read and an
API client can process: `[{path, change, old, new}]` (dictdiffer underneath).
Agent versions and audit entries share it."""
from __future__ import annotations

from typing import Any

import dictdiffer


def config_diff(old: dict[str, Any] | None, new: dict[str, Any]) -> list[dict[str, Any]]:
    """What changed from `old` to `new`: `[{path, change, old, new}]`, `change`
    one of changed, added, removed; `path` dotted (`model.temperature`, `tools.1`)."""
    out: list[dict[str, Any]] = []
    for change, where, detail in dictdiffer.diff(old or {}, new, dot_notation=False):
        parent = [str(p) for p in (where if isinstance(where, list) else [where])]
        if change == "change":
            before, after = detail
            out.append({"path": ".".join(parent), "change": "changed", "old": before, "new": after})
            continue
        for key, value in detail:
            path = ".".join([*parent, str(key)])
            if change == "add":
                out.append({"path": path, "change": "added", "old": None, "new": value})
            else:
                out.append({"path": path, "change": "removed", "old": value, "new": None})
    return out
