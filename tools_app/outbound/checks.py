"""A system check: a malformed `TETHER_EGRESS_ALLOW` stops `manage.py check` and
every server start, instead of failing the first outbound call."""

from __future__ import annotations

from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from .policy import current_policy


def check_egress_allow(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        current_policy()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), hint="comma-separated hosts, host:port pairs or CIDRs",
                             id="tether.E001")]
    return []
