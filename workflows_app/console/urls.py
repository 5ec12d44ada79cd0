"""Console routes of the workflow pages (under /workflows/)."""
from django.urls import path

from . import views

app_name = "workflows"
urlpatterns = [
    path("", views.workflow_list, name="workflow-list"),
    path("new/", views.workflow_create_view, name="workflow-create"),
    path("<slug:name>/", views.workflow_detail, name="workflow-detail"),
    path("<slug:name>/edit/", views.workflow_edit_view, name="workflow-edit"),
    path("<slug:name>/release/", views.workflow_release_view, name="workflow-release"),
    path("<slug:name>/release/end/", views.workflow_end_release_view,
         name="workflow-end-release"),
    path("<slug:name>/promote/", views.workflow_promote_view, name="workflow-promote"),
    path("<slug:name>/rollback/", views.workflow_rollback_view, name="workflow-rollback"),
]
