"""The columns that keep values sealed with the keyring (`keyring.seal`), so key
rotation (`manage.py rotate_secrets`) re-encrypts every one of them. Tenant
secrets are here; another app that seals values with the same keys registers its
column from its `AppConfig.ready` (notify_app: webhook signing secrets)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import models

from ..models import TenantSecret


@dataclass(frozen=True)
class SealedColumn:
    model: type[models.Model]
    field: str
    # How a row is named in a report (never its value); the row has its tenant loaded.
    label: Callable[[Any], str]


_registered: list[SealedColumn] = []


def register_sealed(column: SealedColumn) -> None:
    if column not in _registered:
        _registered.append(column)


def sealed_columns() -> list[SealedColumn]:
    return [SealedColumn(TenantSecret, "ciphertext", lambda row: f"{row.tenant.name}/{row.name}"),
            *_registered]
