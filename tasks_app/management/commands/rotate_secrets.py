"""`python manage.py rotate_secrets`: re-encrypt every tenant secret with the first key.

Key rotation: put a new Fernet key first in TETHER_SECRETS_KEY (keeping the old
ones after it), run this, then remove the old keys. A value no configured key
opens is reported by tenant and name (never the value) and left as it is; the
command then exits non-zero.
"""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from config.errors import DomainError
from tasks_app.models import TenantSecret
from tasks_app.vault.keyring import Undecryptable, require_keys, reseal

BATCH = 200


class Command(BaseCommand):
    help = "Re-encrypt every tenant secret with the first key of TETHER_SECRETS_KEY."

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            require_keys()
        except DomainError as exc:
            raise CommandError(exc.message)
        rotated, failed = 0, []
        ids = list(TenantSecret.objects.order_by("id").values_list("id", flat=True))
        for start in range(0, len(ids), BATCH):
            with transaction.atomic():
                rows = (TenantSecret.objects.select_for_update(of=("self",))
                        .select_related("tenant").filter(id__in=ids[start:start + BATCH]))
                for row in rows:
                    try:
                        row.ciphertext = reseal(row.ciphertext)
                    except Undecryptable:
                        failed.append(f"{row.tenant.name}/{row.name}")
                        continue
                    row.save(update_fields=["ciphertext"])
                    rotated += 1
        self.stdout.write(f"re-encrypted {rotated} secret(s) with the first key")
        if failed:
            raise CommandError("no key of TETHER_SECRETS_KEY opens: " + ", ".join(failed))
