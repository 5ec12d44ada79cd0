"""Console forms of the Webhooks page."""
from __future__ import annotations

from django import forms

from foundations.console_actions import ServiceErrorsForm

from ..models import EventType, PayloadFormat
from ..services.subscriptions import MAX_URL_CHARS


class WebhookForm(ServiceErrorsForm):
    url = forms.CharField(label="URL", max_length=MAX_URL_CHARS,
                          help_text="http(s); checked against the outbound-address policy.")
    events = forms.MultipleChoiceField(choices=EventType.choices,
                                       widget=forms.CheckboxSelectMultiple)
    format = forms.ChoiceField(choices=PayloadFormat.choices, initial=PayloadFormat.JSON,
                               help_text="Slack / Teams sends {\"text\": ...} for chat webhooks.")
    description = forms.CharField(max_length=200, required=False)
    active = forms.BooleanField(required=False, initial=True)


class EmailForm(forms.Form):
    email_reviewers = forms.BooleanField(label="E-mail reviewers and admins", required=False)
    email_events = forms.MultipleChoiceField(
        label="For these events (none checked: all)", choices=EventType.choices,
        widget=forms.CheckboxSelectMultiple, required=False)


class SlackForm(forms.Form):
    channel = forms.CharField(
        label="Slack channel id", max_length=80, required=False,
        help_text="Where approval requests are posted (C0123ABC); empty: off.")
