"""`GET /metrics`: the Prometheus exposition of the whole deployment.

Every process's counters (merged from `PROMETHEUS_MULTIPROC_DIR`, or this
process's own) and the figures the database holds (`config.metrics_db`).
With `TETHER_METRICS_TOKEN` set, a scrape must send `Authorization: Bearer
<token>` (compared in constant time), else 401; no session or API key is asked
for, and tenants' figures are shown only by tenant name.
"""
from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from foundations.metrics import scrape_registry

from .metrics_db import DeploymentCollector


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.TETHER_METRICS_TOKEN
    if token and not _bearer_matches(request.headers.get("Authorization", ""), token):
        response = HttpResponse("a bearer token is required\n", status=401,
                                content_type="text/plain; charset=utf-8")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    body = generate_latest(scrape_registry([DeploymentCollector()]))
    return HttpResponse(body, content_type=CONTENT_TYPE_PLAIN_0_0_4)


def _bearer_matches(header: str, token: str) -> bool:
    scheme, _, given = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(),
                                                              token.encode())
