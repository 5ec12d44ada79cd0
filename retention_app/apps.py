"""Retention: finished tasks leave the online tables after their tenant's
retention period, into compressed archive files an operator can restore from;
exports and erasures of a tenant or a subject.

Who runs an export job is registered here per mode (`export_jobs`): a Celery
worker, or the embedded runner's loop; the recovery sweep expires export files
and hands over again exports lost on the way to a worker."""
from django.apps import AppConfig


class RetentionAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "retention_app"
    verbose_name = "Retention and archives"

    def ready(self) -> None:
        from tasks_app.runner.embedded import embedded_runner
        from tasks_app.store.hooks import on_sweep

        from .export_jobs import register_export_runner
        from .services.export import export_run, exports_sweep
        from .tasks import run_export

        register_export_runner("celery", lambda export_id: bool(
            run_export.apply_async((export_id,))))
        register_export_runner("embedded", lambda export_id: embedded_runner.submit_job(
            export_run, export_id))
        on_sweep(exports_sweep)
