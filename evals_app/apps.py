"""Evaluations plug into the runtime through its registries, never through an
import of evals_app by tasks_app: a shadow task that ends settles its replay
(`on_task_ended`), the recovery sweep settles what a lost hook left
(`on_sweep`), and the release gate asks for a passing evaluation
(`register_gate_check`)."""
from django.apps import AppConfig


class EvalsAppConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "evals_app"
    verbose_name = "Evaluations"

    def ready(self) -> None:
        from tasks_app.services.release_gates import register_gate_check
        from tasks_app.store.hooks import on_sweep, on_task_ended

        from .services.gate import candidate_refusal
        from .services.settling import settle_after_task, settle_running

        on_task_ended(settle_after_task)
        on_sweep(settle_running)
        register_gate_check(candidate_refusal)
