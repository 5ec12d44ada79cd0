"""`python manage.py rotate_secrets`: re-encrypt every tenant secret (and every other
sealed value, `accounts_app.vault.stores`) with the first key.

Key rotation: put a new Fernet key first in TETHER_SECRETS_KEY (keeping the old
ones after it), run this, then remove the old keys. A value no configured key
opens is reported by tenant and name (never the value) and left as it is; the
command then exits non-zero.
"""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from accounts_app.vault.keyring import Undecryptable, require_keys, reseal
from accounts_app.vault.stores import SealedColumn, sealed_columns
from foundations.errors import DomainError

BATCH = 200


class Command(BaseCommand):
    help = "Re-encrypt every tenant secret with the first key of TETHER_SECRETS_KEY."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            require_keys()
        except DomainError as exc:
            raise CommandError(exc.message)
        rotated, failed = 0, []
        for column in sealed_columns():
            done, problems = _rotate(column)
            rotated += done
            failed += problems
        self.stdout.write(f"re-encrypted {rotated} secret(s) with the first key")
        if failed:
            raise CommandError("no key of TETHER_SECRETS_KEY opens: " + ", ".join(failed))


def _rotate(column: SealedColumn) -> tuple[int, list[str]]:
    model, field = column.model, column.field
    rotated, failed = 0, []
    ids = list(model._default_manager.order_by("pk").values_list("pk", flat=True))
    for start in range(0, len(ids), BATCH):
        with transaction.atomic():
            rows = (model._default_manager.select_for_update(of=("self",))
                    .select_related("tenant").filter(pk__in=ids[start:start + BATCH]))
            for row in rows:
                try:
                    setattr(row, field, reseal(getattr(row, field)))
                except Undecryptable:
                    failed.append(column.label(row))
                    continue
                row.save(update_fields=[field])
                rotated += 1
    return rotated, failed
