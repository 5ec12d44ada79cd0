from django.apps import AppConfig


class WorkflowsAppConfig(AppConfig):
    name = "workflows_app"
    verbose_name = "Workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .registrations import register

        register()
