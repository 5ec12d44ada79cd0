"""Retention: finished tasks leave the online tables after their tenant's
retention period, into compressed archive files an operator can restore from."""
from django.apps import AppConfig


class RetentionAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "retention_app"
    verbose_name = "Retention and archives"
