from django.apps import AppConfig
from django.core import checks

from .outbound.checks import check_egress_allow


class ToolsAppConfig(AppConfig):
    name = "tools_app"
    verbose_name = "Tools"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at the top: Django imports apps.py before any model exists.
        from accounts_app.hooks import on_secret_users

        from .selectors import tools_naming_secret

        checks.register(check_egress_allow)
        on_secret_users("tools", tools_naming_secret)  # a secret they use is not deleted
