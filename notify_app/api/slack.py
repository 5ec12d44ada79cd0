"""Slack's Interactivity Request URL: a button press on an approval's message,
and the reject modal's submission.

Not a Tether API endpoint (no API key): Slack signs the request with the
tenant's Slack app's signing secret, and `services.slack_actions` checks it
before anything else. Slack wants an answer within three seconds; the answer
carries no body (what the presser must know is an ephemeral message, and the
message itself is updated after the decision commits), but for a modal whose
reason is refused: its field errors (`response_action: errors`)."""
from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from ..services.slack_actions import slack_interaction


@csrf_exempt
@require_POST
def slack_interactions(request: HttpRequest, tenant: str) -> HttpResponse:
    handled = slack_interaction(tenant_name=tenant, body=request.body,
                                headers=dict(request.headers))
    if handled.body is not None:
        return JsonResponse(handled.body, status=handled.status)
    return HttpResponse(status=handled.status)
