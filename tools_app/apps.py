from django.apps import AppConfig
from django.core import checks

from .outbound.checks import check_egress_allow


class ToolsAppConfig(AppConfig):
    name = "tools_app"
    verbose_name = "Tools"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from .models import McpServer, Tool
        from .registry import forget_recent_specs

        checks.register(check_egress_allow)
        # A tenant too: a test database reuses a rolled-back tenant's id.
        for model in (Tool, McpServer, "tasks_app.Tenant"):
            for signal in (post_save, post_delete):
                signal.connect(forget_recent_specs, sender=model, weak=False,
                               dispatch_uid=f"forget_recent_specs:{model}:{id(signal)}")
