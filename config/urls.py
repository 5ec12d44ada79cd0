"""URL map: console pages, the REST API v1, the Django admin."""
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("config.api_urls")),
    path("", include("config.console_urls")),
]
