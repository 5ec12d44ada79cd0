"""`Authorization: Token <key>` authentication against hashed API keys.

One read per request: the key with its user and the user's membership
(`config.api_access.access_of` takes the membership from it). A key's
`last_used_at` is written at most once per `LAST_USED_GRAIN`: writing it on
every request was a second statement and a commit per API call.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from rest_framework import authentication, exceptions

from ..models import ApiKey
from ..services.accounts import hash_key

LAST_USED_GRAIN = timedelta(minutes=1)


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):  # type: ignore[no-untyped-def]
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid token header.")
        try:
            raw = header[1].decode()
        except UnicodeError:
            raise exceptions.AuthenticationFailed("Invalid token header.")
        key = (
            ApiKey.objects.select_related("user", "user__membership")
            .filter(key_hash=hash_key(raw), revoked=False)
            .first()
        )
        if key is None or not key.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        now = timezone.now()
        if key.last_used_at is None or now - key.last_used_at >= LAST_USED_GRAIN:
            ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        return key.user, key

    def authenticate_header(self, request):  # type: ignore[no-untyped-def]
        return self.keyword
