"""Console routes of tasks_app: the dashboard, tasks and agent profiles."""

from django.urls import path

from . import agents, views

app_name = "console"
urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("tasks/", views.task_list, name="task-list"),
    path("tasks/cancel/", views.tasks_bulk_cancel, name="task-bulk-cancel"),
    path("tasks/retry/", views.tasks_bulk_retry, name="task-bulk-retry"),
    path("tasks/<int:task_id>/", views.task_detail, name="task-detail"),
    path("tasks/<int:task_id>/live/", views.task_live, name="task-live"),
    path("tasks/<int:task_id>/events/", views.task_events_before, name="task-events"),
    path("tasks/<int:task_id>/cancel/", views.task_cancel_view, name="task-cancel"),
    path("tasks/<int:task_id>/resume/", views.task_resume_view, name="task-resume"),
    path("tasks/<int:task_id>/fail/", views.task_fail_view, name="task-fail"),
    path("tasks/<int:task_id>/retry/", views.task_retry_view, name="task-retry"),
    path(
        "tasks/<int:task_id>/summaries/rollback/",
        views.task_summary_rollback_view,
        name="task-summary-rollback",
    ),
    path("agents/", agents.agent_list, name="agent-list"),
    path("agents/new/", agents.agent_create_view, name="agent-create"),
    path("agents/<slug:name>/", agents.agent_detail, name="agent-detail"),
    path("agents/<slug:name>/edit/", agents.agent_edit_view, name="agent-edit"),
    path("agents/<slug:name>/release/", agents.agent_release_view, name="agent-release"),
    path("agents/<slug:name>/promote/", agents.agent_promote_view, name="agent-promote"),
    path("agents/<slug:name>/rollback/", agents.agent_rollback_view, name="agent-rollback"),
]
