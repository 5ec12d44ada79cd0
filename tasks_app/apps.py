from django.apps import AppConfig


class TasksAppConfig(AppConfig):
    name = "tasks_app"
    verbose_name = "Tasks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The store triggers what lies above it through hooks registered here
        # (`store.hooks`), never by importing it.
        from .live.publish import publish_event
        from .services.admission import admission_after_commit
        from .services.dispatch import schedule_compensation
        from .services.events import observe_committed
        from .store import hooks

        hooks.on_event_committed(observe_committed)
        hooks.on_event_committed(publish_event)
        hooks.on_slot_freed(admission_after_commit)
        hooks.on_task_failed(schedule_compensation)
