"""Evaluation routes, mounted at /evaluations/."""
from django.urls import path

from . import console

app_name = "evaluations"
urlpatterns = [
    path("", console.evaluation_list, name="evaluation-list"),
    path("new/", console.evaluation_create, name="evaluation-create"),
    path("<int:evaluation_id>/", console.evaluation_detail, name="evaluation-detail"),
    path("<int:evaluation_id>/tasks/<int:task_id>/", console.replay_compare,
         name="replay-compare"),
]
