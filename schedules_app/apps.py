from django.apps import AppConfig


class SchedulesConfig(AppConfig):
    name = "schedules_app"
    verbose_name = "Schedules"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .hooks import register

        register()
