"""Schedule routes, mounted at /schedules/."""

from django.urls import path

from . import views

app_name = "schedules"
urlpatterns = [
    path("", views.schedule_list, name="schedule-list"),
    path("<slug:name>/pause/", views.schedule_pause_view, name="schedule-pause"),
    path("<slug:name>/resume/", views.schedule_resume_view, name="schedule-resume"),
]
