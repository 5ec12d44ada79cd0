from django.core.management.base import BaseCommand, CommandError

from accounts_app.models import Role, Tenant
from accounts_app.services.accounts import api_key_create, user_ensure
from foundations.errors import DomainError


class Command(BaseCommand):
    help = "Print a new API key for a user of a tenant (creating the user if needed)."

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--username", required=True)
        parser.add_argument("--role", required=True, choices=Role.values)

    def handle(self, *args, **o):  # type: ignore[no-untyped-def]
        tenant = Tenant.objects.filter(name=o["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {o['tenant']!r}; create it with create_tenant")
        try:
            user = user_ensure(tenant=tenant, username=o["username"], role=o["role"])
        except DomainError as exc:
            raise CommandError(f"{exc.message} {exc.details}")
        self.stdout.write(api_key_create(user=user))
