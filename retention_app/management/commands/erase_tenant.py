"""`manage.py erase_tenant SLUG --confirm SLUG`: erase everything Tether holds
for a tenant, online and in its archive and export files (an operator's act:
there is no API for it). It prints the counts as JSON."""
from __future__ import annotations

import getpass
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts_app.models import Tenant
from foundations.actors import Actor
from foundations.errors import DomainError

from ...services.tenant_erasure import tenant_erasure


class Command(BaseCommand):
    help = ("Erase a tenant: cancel its tasks in flight, delete its tasks, memory, "
            "configuration, members and archive and export files; its audit entries are "
            "kept redacted, with one saying the erasure happened. Cannot be undone.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant", help="the tenant's name (slug)")
        parser.add_argument("--confirm", required=True,
                            help="the tenant's name again: nothing is erased without it")
        parser.add_argument("--actor", default="",
                            help="who erases, as the audit entry names them "
                                 "(default: operator:<login name>)")

    def handle(self, *args: Any, **options: Any) -> None:
        slug = options["tenant"]
        if options["confirm"] != slug:
            raise CommandError("--confirm must repeat the tenant's name: nothing was erased")
        tenant = Tenant.objects.filter(name=slug).first()
        if tenant is None:
            raise CommandError(f"no tenant named {slug!r}")
        actor = Actor(name=(options["actor"] or f"operator:{getpass.getuser()}")[:150],
                      role="operator")
        try:
            counts = tenant_erasure(tenant=tenant, actor=actor)
        except DomainError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(json.dumps({"tenant": tenant.pk, **counts}))
