from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "notify_app"
    verbose_name = "Notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from .hooks import register

        register()
