"""Tool routes, mounted at /tools/."""

from django.urls import path

from . import views

app_name = "tools"
urlpatterns = [
    path("", views.tool_list, name="tool-list"),
    path("new/", views.tool_create_view, name="tool-create"),
    path("<str:name>/", views.tool_detail, name="tool-detail"),
    path("<str:name>/edit/", views.tool_edit_view, name="tool-edit"),
]
