from django.core.management.base import BaseCommand

from tasks_app.services.demo import seed_demo


class Command(BaseCommand):
    help = "Create the demo tenant, users of every role, the demo tools, an agent and a few tasks."

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        report = seed_demo()
        self.stdout.write(
            f"tenant {report['tenant']}: users {', '.join(report['users'])} "
            f"(password {report['password']}); {report['tasks_created']} demo tasks submitted"
        )
