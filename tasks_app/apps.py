from django.apps import AppConfig
from django.core import checks

from config.checks import check_tether_settings


class TasksAppConfig(AppConfig):
    name = "tasks_app"
    verbose_name = "Tasks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported here, not at the top: Django imports apps.py before any model exists.
        from django.db.backends.signals import connection_created

        from config.db_pool import install

        from .registrations import register

        register()
        checks.register(check_tether_settings)
        connection_created.connect(install, dispatch_uid="tether-db-pool-check")
