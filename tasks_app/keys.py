"""Canonical JSON and the server-made keys derived from it."""
from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def idempotency_key(*, task_id: int, step_id: int, tool: str, args: dict[str, Any]) -> str:
    """sha256(task_id | step_id | tool | canonical_json(args)); made by the server only."""
    head, tail = idempotency_key_around(task_id=task_id, tool=tool, args=args)
    return sha256_hex(f"{head}{step_id}{tail}")


def idempotency_key_around(*, task_id: int, tool: str, args: dict[str, Any]) -> tuple[str, str]:
    """The text a key hashes, before and after the step's id: the one spelling of
    the key, for `idempotency_key` and for the store's SQL (`store.commits`),
    which hashes ``head || step.id || tail`` as it inserts the step."""
    return f"{task_id}|", f"|{tool}|{canonical_json(args)}"


def call_fingerprint(tool: str, args: dict[str, Any]) -> str:
    return sha256_hex(f"{tool}|{canonical_json(args)}")


def compensation_key(original_key: str) -> str:
    """The ledger key of the compensation of the call keyed `original_key`."""
    return sha256_hex(f"compensate|{original_key}")
