"""Inbox routes, mounted at /inbox/."""

from django.urls import path

from . import views

app_name = "inbox"
urlpatterns = [
    path("", views.inbox, name="inbox"),
    path("badge/", views.inbox_badge, name="badge"),
    path("approvals/<int:pk>/approve/", views.approval_approve, name="approval-approve"),
    path("approvals/<int:pk>/preview/", views.approval_preview, name="approval-preview"),
    path("approvals/<int:pk>/reject/", views.approval_reject, name="approval-reject"),
    path("approvals/<int:pk>/reassign/", views.approval_reassign_view,
         name="approval-reassign"),
    path("approvals/<int:pk>/respond/", views.approval_respond, name="approval-respond"),
    path("tasks/<int:task_id>/decide-all/", views.approvals_decide_all_view,
         name="approvals-decide-all"),
    path("questions/<int:pk>/answer/", views.question_answer, name="question-answer"),
    path(
        "reconciliations/<int:pk>/requery/",
        views.reconciliation_requery_view,
        name="reconciliation-requery",
    ),
    path(
        "reconciliations/<int:pk>/resolve/",
        views.reconciliation_resolve_view,
        name="reconciliation-resolve",
    ),
]
