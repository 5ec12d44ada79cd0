from django.core.management.base import BaseCommand, CommandError

from accounts_app.models import Role, Tenant
from accounts_app.services.accounts import user_ensure
from foundations.errors import DomainError


class Command(BaseCommand):
    help = ("Create (or update) a console user of a tenant with a role, a password and "
            "optionally an e-mail address.")

    def add_arguments(self, parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--tenant", required=True)
        parser.add_argument("--username", required=True)
        parser.add_argument("--role", required=True, choices=Role.values)
        parser.add_argument("--password", required=True)
        parser.add_argument("--email", default=None,
                            help="Where notification e-mails go; how Slack recognises the user.")

    def handle(self, *args, **o):  # type: ignore[no-untyped-def]
        tenant = Tenant.objects.filter(name=o["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant {o['tenant']!r}; create it with create_tenant")
        try:
            user = user_ensure(
                tenant=tenant, username=o["username"], role=o["role"], password=o["password"],
                email=o["email"],
            )
        except DomainError as exc:
            raise CommandError(f"{exc.message} {exc.details}")
        self.stdout.write(f"user {user.username} ({o['role']} of {tenant.name})")
