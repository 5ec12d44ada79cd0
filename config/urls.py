"""URL map: console pages, the REST API v1, the Django admin, Prometheus metrics."""
from django.contrib import admin
from django.urls import include, path

from .metrics_view import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("config.api_urls")),
    path("metrics", metrics, name="metrics"),
    path("", include("config.console_urls")),
]

handler400 = "config.error_pages.bad_request"
handler403 = "config.error_pages.permission_denied"
handler404 = "config.error_pages.page_not_found"
handler500 = "config.error_pages.server_error"
