from django.apps import AppConfig


class TasksAppConfig(AppConfig):
    name = "tasks_app"
    verbose_name = "Tasks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at the top: Django imports apps.py before any model exists.
        from .registrations import register

        register()
