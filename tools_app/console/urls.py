"""Tool routes, mounted at /tools/."""

from django.urls import path

from . import mcp_views, views

app_name = "tools"
urlpatterns = [
    path("", views.tool_list, name="tool-list"),
    path("new/", views.tool_create_view, name="tool-create"),
    path("mcp/", mcp_views.mcp_server_list, name="mcp-list"),
    path("mcp/<str:name>/", mcp_views.mcp_server_detail, name="mcp-detail"),
    path("mcp/<str:name>/<str:action>/", mcp_views.mcp_server_action, name="mcp-action"),
    path("<str:name>/", views.tool_detail, name="tool-detail"),
    path("<str:name>/edit/", views.tool_edit_view, name="tool-edit"),
]
