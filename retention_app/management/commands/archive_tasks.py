"""`manage.py archive_tasks [--tenant NAME]`: one pass of the archive sweep.

Run it from cron or a scheduler (hourly or daily); passes never overlap. It
prints what it wrote, indexed and deleted as JSON."""
from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts_app.models import Tenant

from ...services.archive import archive_sweep


class Command(BaseCommand):
    help = "Archive the finished tasks past their tenant's retention, then delete them online."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", help="only this tenant (its name)")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = None
        if options["tenant"]:
            tenant = Tenant.objects.filter(name=options["tenant"]).first()
            if tenant is None:
                raise CommandError(f"no tenant named {options['tenant']!r}")
        report = archive_sweep(tenant=tenant)
        self.stdout.write(json.dumps(report.as_dict()))
