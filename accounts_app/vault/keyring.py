"""Encryption of tenant secrets at rest, with the Fernet keys of `TETHER_SECRETS_KEY`.

The setting holds one or more comma-separated Fernet keys
(`Fernet.generate_key()`). The first encrypts; every one decrypts
(`MultiFernet`), so keys rotate: put a new key first, run
`manage.py rotate_secrets` (every value re-encrypted with it), then remove the
old key. No key configured is a clear refusal, never a fallback key.
"""
from __future__ import annotations

from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

from foundations.errors import DomainError, ErrorKind


def _keyring() -> MultiFernet:
    # Read on each use (cached per value), so a changed setting takes effect at once.
    return _build(str(getattr(settings, "TETHER_SECRETS_KEY", "") or ""))


@lru_cache(maxsize=4)
def _build(raw: str) -> MultiFernet:
    keys = [key.strip() for key in raw.split(",") if key.strip()]
    if not keys:
        raise DomainError(
            "secrets_key_missing",
            "Tenant secrets are unavailable: the operator has not set TETHER_SECRETS_KEY.",
            kind=ErrorKind.UNAVAILABLE,
        )
    try:
        return MultiFernet([Fernet(key) for key in keys])
    except (ValueError, TypeError):
        raise DomainError(
            "secrets_key_invalid",
            "Tenant secrets are unavailable: TETHER_SECRETS_KEY is not a comma-separated "
            "list of Fernet keys.",
            kind=ErrorKind.UNAVAILABLE,
        )


def require_keys() -> None:
    """Raise the keyring's `DomainError` when TETHER_SECRETS_KEY is missing or invalid."""
    _keyring()


def seal(value: str) -> str:
    """The ciphertext of `value` under the first key."""
    return _keyring().encrypt(value.encode("utf-8")).decode("ascii")


def unseal(ciphertext: str) -> str:
    """The value; raises `Undecryptable` when no configured key opens it."""
    try:
        return _keyring().decrypt(ciphertext.encode("ascii")).decode("utf-8")
    except InvalidToken:
        raise Undecryptable()


def reseal(ciphertext: str) -> str:
    """The same value encrypted again under the first key (key rotation)."""
    try:
        return _keyring().rotate(ciphertext.encode("ascii")).decode("ascii")
    except InvalidToken:
        raise Undecryptable()


class Undecryptable(Exception):
    """No key of TETHER_SECRETS_KEY opens a stored value (its key was removed)."""
