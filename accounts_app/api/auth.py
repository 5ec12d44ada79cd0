"""`Authorization: Token <key>` authentication against hashed API keys.

One read per request: the key with its user and the user's membership
(`foundations.api_access.access_of` takes the membership from it); the lookup and
when a key's use is noted are `services.accounts.api_key_in_use`'s.
"""

from __future__ import annotations

from rest_framework import authentication, exceptions

from ..services.accounts import api_key_in_use


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
        key = api_key_in_use(raw)
        if key is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        return key.user, key

    def authenticate_header(self, request):  # type: ignore[no-untyped-def]
        return self.keyword
