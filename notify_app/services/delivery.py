"""Sending one delivery: claim it, send it outside any transaction, record the attempt.

Claim: one guarded UPDATE takes a due, unclaimed PENDING delivery for the
attempt's deadline (the send's total timeout plus a grace) and counts the
attempt; a second dispatch of the same delivery (the sweep, a redelivered
message) finds it claimed and returns quietly. Nothing is locked while the
request is in flight. A worker that dies mid-send leaves a claim that expires;
the sweep dispatches the delivery again (receivers dedupe on `X-Tether-Delivery`).

Record: the attempt row (status code, error, duration) always; the delivery's
new state only while our claim still holds (its attempt count is the fence).

Outcomes:
- 2xx: succeeded;
- no answer, a transport error, 5xx, 408 or 429: retried after an exponential
  backoff (`TETHER_WEBHOOK_BACKOFF_BASE_S` doubling, at most `..._MAX_S`, with
  jitter; a longer `Retry-After` of the receiver wins) until the next attempt
  would come after the delivery is `TETHER_WEBHOOK_MAX_AGE_S` old, then failed;
- any other answer (3xx: redirects are not followed, 4xx): failed at once; the
  receiver refused this body and sending it again cannot change that;
- the outbound-address policy refuses the URL (it resolves to a private address
  now): refused, never retried.
"""
from __future__ import annotations

import json
import logging
import random
import smtplib
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx2
from django.conf import settings
from django.core.mail import get_connection
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone
from slack_sdk.errors import SlackApiError

from accounts_app.vault.keyring import Undecryptable, unseal
from tools_app.outbound import EgressRefusedError, client_for
from tools_app.outbound.retry_after import retry_after_s

from ..dispatch import schedule_delivery
from ..models import (
    Channel,
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
    Notification,
    PayloadFormat,
    WebhookSubscription,
)
from ..payloads import CLOUDEVENTS_CONTENT_TYPE, as_cloudevent, as_text, compose
from ..signing import signature, standard_headers
from .emails import email_messages
from .slack import SlackNotConnected, slack_message_post

log = logging.getLogger(__name__)

# A claim outlives the send's total timeout by this (the database work around it).
CLAIM_GRACE_S = 10.0
ERROR_CHARS = 500
RETRY_CODES = frozenset({408, 429})
USER_AGENT = "Tether-Webhooks/1"


@dataclass(frozen=True)
class Sent:
    outcome: str  # succeeded, retry, failed, refused
    status_code: int | None = None
    error: str = ""
    retry_after_s: float | None = None  # the receiver's Retry-After, when it sent one


def delivery_attempt(delivery_id: int) -> str:
    """One attempt of a delivery, if it is due and nobody else holds it: the outcome."""
    attempt = _claim(delivery_id)
    if attempt is None:
        return "skipped"
    delivery = (Delivery.objects.select_related("subscription", "notification__tenant")
                .filter(pk=delivery_id).first())
    if delivery is None:
        return "skipped"  # its webhook was deleted meanwhile
    started, clock = timezone.now(), time.monotonic()
    try:
        body = notification_body(delivery.notification)
        if delivery.subscription is not None and not delivery.subscription.active:
            sent = Sent("failed", error="not sent: the webhook was paused")
        elif delivery.channel == Channel.EMAIL:
            sent = _send_email(delivery, body)
        elif delivery.channel == Channel.SLACK:
            sent = _send_slack(delivery, body)
        else:
            assert delivery.subscription is not None
            sent = _send_webhook(delivery, delivery.subscription, body)
    except Exception as exc:  # noqa: BLE001 - a bug or a broken row: recorded and retried
        log.exception("delivery %s failed unexpectedly", delivery_id)
        sent = Sent("retry", error=f"{type(exc).__name__}: {exc}")
    duration_ms = int((time.monotonic() - clock) * 1000)
    return _record(delivery, attempt, sent, started=started, duration_ms=duration_ms)


def notification_body(notification: Notification) -> dict[str, Any]:
    """The notification's body, composed at its first send and the same ever after."""
    if notification.body is None:
        Notification.objects.filter(pk=notification.pk, body__isnull=True).update(
            body=compose(notification))
        notification.body = Notification.objects.values_list("body", flat=True).get(
            pk=notification.pk)
    return dict(notification.body or {})


def _claim(delivery_id: int) -> int | None:
    """Take the delivery for one attempt: its number, or None when it is not ours to send."""
    now = timezone.now()
    until = now + timedelta(seconds=settings.TETHER_WEBHOOK_TIMEOUT_S + CLAIM_GRACE_S)
    with transaction.atomic():
        taken = Delivery.objects.filter(
            Q(claimed_until__isnull=True) | Q(claimed_until__lt=now),
            pk=delivery_id, status=DeliveryStatus.PENDING, next_attempt_at__lte=now,
        ).update(claimed_until=until, attempts=F("attempts") + 1)
        if not taken:
            return None
        return int(Delivery.objects.values_list("attempts", flat=True).get(pk=delivery_id))


def _send_webhook(delivery: Delivery, subscription: WebhookSubscription,
                  body: dict[str, Any]) -> Sent:
    try:
        secret = unseal(subscription.secret_sealed)
    except Undecryptable:
        return Sent("retry", error="the signing secret cannot be decrypted with "
                                   "TETHER_SECRETS_KEY (was a key removed?)")
    content_type, payload = _payload(subscription, body)
    content = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    at = int(time.time())
    headers = {
        "Content-Type": content_type,
        "User-Agent": USER_AGENT,
        "X-Tether-Event": str(body.get("type", "")),
        "X-Tether-Delivery": str(delivery.uid),
        "X-Tether-Signature": signature(secret, content, at=at),
        **standard_headers(secret, content, message_id=str(delivery.uid), at=at),
    }
    url = subscription.url
    try:
        with client_for(url).stream("POST", url, content=content, headers=headers,
                                    timeout=settings.TETHER_WEBHOOK_TIMEOUT_S) as response:
            snippet = next(response.iter_bytes(), b"")[:200]
    except EgressRefusedError as exc:
        return Sent("refused", error=str(exc))
    except (httpx2.InvalidURL, httpx2.UnsupportedProtocol) as exc:
        return Sent("refused", error=f"cannot call this URL: {exc}")
    except httpx2.TimeoutException:
        return Sent("retry", error=f"no answer within {settings.TETHER_WEBHOOK_TIMEOUT_S:g} s")
    except httpx2.HTTPError as exc:
        return Sent("retry", error=f"{type(exc).__name__}: {exc}")
    code = response.status_code
    if 200 <= code < 300:
        return Sent("succeeded", status_code=code)
    error = f"HTTP {code}: {snippet.decode('utf-8', 'replace')}".strip()
    if code >= 500 or code in RETRY_CODES:
        return Sent("retry", status_code=code, error=error,
                    retry_after_s=retry_after_s(response.headers))
    return Sent("failed", status_code=code, error=error)


def _payload(subscription: WebhookSubscription, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The content type and the JSON body of a delivery in the webhook's format."""
    if subscription.format == PayloadFormat.SLACK:
        return "application/json", {"text": as_text(body)}
    if subscription.format == PayloadFormat.CLOUDEVENTS:
        return CLOUDEVENTS_CONTENT_TYPE, as_cloudevent(body)
    return "application/json", body


def _send_email(delivery: Delivery, body: dict[str, Any]) -> Sent:
    messages = email_messages(tenant_id=delivery.tenant_id, recipients=list(delivery.recipients),
                              body=body)
    try:
        with get_connection() as connection:
            connection.send_messages(messages)
    except (OSError, smtplib.SMTPException) as exc:
        return Sent("retry", error=f"{type(exc).__name__}: {exc}")
    return Sent("succeeded")


def _send_slack(delivery: Delivery, body: dict[str, Any]) -> Sent:
    request = body.get("request") or {}
    if request.get("kind") != "approval" or not request.get("id"):
        return Sent("succeeded")  # nothing a button could decide
    try:
        slack_message_post(tenant_id=delivery.tenant_id, channel=delivery.recipients[0],
                           approval_id=int(request["id"]))
    except SlackNotConnected as exc:
        return Sent("retry", error=f"Slack is not connected: {exc}")
    except SlackApiError as exc:
        code = exc.response.status_code
        error = f"Slack said {exc.response.get('error')} (HTTP {code})"
        if code >= 500 or code in RETRY_CODES:
            return Sent("retry", status_code=code, error=error,
                        retry_after_s=retry_after_s(exc.response.headers))
        return Sent("failed", status_code=code, error=error)  # e.g. channel_not_found
    except EgressRefusedError as exc:
        return Sent("refused", error=str(exc))
    except httpx2.HTTPError as exc:
        return Sent("retry", error=f"{type(exc).__name__}: {exc}")
    return Sent("succeeded", status_code=200)


def retry_delay_s(attempt: int) -> float:
    """The wait after failed attempt number `attempt` (1-based), jittered by ±10 %."""
    base = settings.TETHER_WEBHOOK_BACKOFF_BASE_S * 2 ** min(attempt - 1, 30)
    return min(base, settings.TETHER_WEBHOOK_BACKOFF_MAX_S) * random.uniform(0.9, 1.1)


def _record(delivery: Delivery, attempt: int, sent: Sent, *, started: Any,
            duration_ms: int) -> str:
    now = timezone.now()
    outcome, error, delay = sent.outcome, sent.error, 0.0
    if outcome == "retry":
        # A receiver that says when to come back is believed (never sooner than our backoff).
        delay = max(retry_delay_s(attempt), sent.retry_after_s or 0.0)
        age = (now - delivery.created_at).total_seconds()
        if age + delay > settings.TETHER_WEBHOOK_MAX_AGE_S:
            outcome = "failed"
            error = f"gave up after {attempt} attempts: {error}"
    final = {"succeeded": DeliveryStatus.SUCCEEDED, "failed": DeliveryStatus.FAILED,
             "refused": DeliveryStatus.REFUSED}.get(outcome)
    try:
        with transaction.atomic():
            held = _write_attempt(delivery, attempt, sent, outcome=outcome, error=error,
                                  final=final, delay=delay, started=started,
                                  duration_ms=duration_ms, now=now)
    except IntegrityError:  # the webhook (and its deliveries) was deleted during the send
        return "skipped"
    if held and final is None:
        schedule_delivery(delivery.pk, delay_s=delay)
    log.info("delivery %s attempt %s: %s %s", delivery.uid, attempt, outcome,
             sent.status_code or "", extra={"delivery": str(delivery.uid)})
    return outcome


def _write_attempt(delivery: Delivery, attempt: int, sent: Sent, *, outcome: str, error: str,
                   final: str | None, delay: float, started: Any, duration_ms: int,
                   now: Any) -> bool:
    """The attempt's row, and the delivery's new state while our claim holds."""
    DeliveryAttempt.objects.create(
        delivery=delivery, number=attempt, started_at=started, duration_ms=duration_ms,
        status_code=sent.status_code, outcome=outcome, error=error[:ERROR_CHARS])
    fields: dict[str, Any] = {"claimed_until": None, "last_status_code": sent.status_code,
                              "last_error": error[:ERROR_CHARS]}
    if final is None:
        fields["next_attempt_at"] = now + timedelta(seconds=delay)
    else:
        fields.update(status=final, finished_at=now)
    # Our claim is the fence: a delivery taken over after our claim expired is not ours.
    return bool(Delivery.objects.filter(pk=delivery.pk, attempts=attempt,
                                        status=DeliveryStatus.PENDING).update(**fields))
