"""`Authorization: Token <key>` authentication against hashed API keys."""

from __future__ import annotations

from django.utils import timezone
from rest_framework import authentication, exceptions

from ..models import ApiKey
from ..services.accounts import hash_key


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
            ApiKey.objects.select_related("user")
            .filter(key_hash=hash_key(raw), revoked=False)
            .first()
        )
        if key is None or not key.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
        return key.user, key

    def authenticate_header(self, request):  # type: ignore[no-untyped-def]
        return self.keyword
