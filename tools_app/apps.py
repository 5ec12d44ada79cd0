from django.apps import AppConfig
from django.core import checks

from .outbound.checks import check_egress_allow


class ToolsAppConfig(AppConfig):
    name = "tools_app"
    verbose_name = "Tools"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        checks.register(check_egress_allow)
