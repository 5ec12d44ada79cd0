from django.core.management.base import BaseCommand

from accounts_app.services.accounts import tenant_create


class Command(BaseCommand):
    help = "Create a tenant (no-op if it exists)."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("name")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        tenant = tenant_create(name=opts["name"])
        self.stdout.write(f"tenant {tenant.name} (id {tenant.pk})")
