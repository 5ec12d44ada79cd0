"""Webhook signatures, two of them on every delivery.

- `X-Tether-Signature: t=<unix seconds>,v1=<hex>` where the hex is HMAC-SHA256,
  keyed with the subscription's secret (its UTF-8 bytes, `whsec_` prefix
  included), of ``"<t>.<body>"``. The timestamp inside the signed text lets a
  receiver refuse replays older than its tolerance. `verify` is what a receiver
  does (docs/how-to/notifications.md shows the same in five lines).
- The Standard Webhooks headers (`webhook-id`, `webhook-timestamp`,
  `webhook-signature`; https://www.standardwebhooks.com/), made by the
  `standardwebhooks` package, so that any receiver with one of its libraries
  verifies a delivery without code of ours. Its key is the secret's base64
  part, decoded, as that specification has it.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from datetime import UTC, datetime

from standardwebhooks import Webhook

SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE_S = 300


def new_secret() -> str:
    """`whsec_` and 32 random bytes in standard base64, as Standard Webhooks
    expects (secrets made before were URL-safe base64: a library that decodes
    strictly may refuse those; rotating the webhook's secret gives a new one)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def standard_headers(secret: str, body: bytes, *, message_id: str, at: int) -> dict[str, str]:
    """The Standard Webhooks headers of one delivery: its id (the same on every
    attempt, for the receiver's deduplication), the time, the signature."""
    signed = Webhook(secret).sign(message_id, datetime.fromtimestamp(at, UTC), body)
    return {"webhook-id": message_id, "webhook-timestamp": str(at), "webhook-signature": signed}


def signature(secret: str, body: bytes, *, at: int) -> str:
    digest = hmac.new(secret.encode("utf-8"), f"{at}.".encode() + body, hashlib.sha256)
    return f"t={at},v1={digest.hexdigest()}"


def verify(secret: str, body: bytes, header: str, *, tolerance_s: int = DEFAULT_TOLERANCE_S,
           now: float | None = None) -> bool:
    """Whether `header` signs `body` with `secret`, made within `tolerance_s`."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        at = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - at) > tolerance_s:
        return False
    expected = signature(secret, body, at=at).split("v1=", 1)[1]
    return hmac.compare_digest(expected, parts.get("v1", ""))
