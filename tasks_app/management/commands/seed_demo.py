from django.core.management.base import BaseCommand

from accounts_app.models import Role, Tenant
from tasks_app.services.demo import seed_demo
from workflows_app.services.demo import demo_workflow_ensure


class Command(BaseCommand):
    help = ("Create the demo tenant, users of every role, the demo tools, an agent, a workflow "
            "and a few tasks.")

    def handle(self, *args, **opts):  # type: ignore[no-untyped-def]
        report = seed_demo()
        tenant = Tenant.objects.get(name=report["tenant"])
        requester = tenant.memberships.filter(role=Role.REQUESTER).values_list(
            "user_id", flat=True).first()
        flow = demo_workflow_ensure(tenant, requester_id=requester)
        self.stdout.write(
            f"tenant {report['tenant']}: users {', '.join(report['users'])} "
            f"(password {report['password']}); {report['tasks_created']} demo tasks submitted; "
            f"workflow {flow['workflow']} ({flow['runs_created']} run)"
        )
