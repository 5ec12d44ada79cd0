"""Console routes: sign-in, the pages of each app's console package."""

from django.contrib.auth import views as auth_views
from django.urls import include, path

from foundations.console_access import with_csp

urlpatterns = [
    path(
        "accounts/login/",
        with_csp(auth_views.LoginView.as_view(redirect_authenticated_user=True)),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("inbox/", include("approvals_app.console.urls")),
    path("approval-rules/", include("approvals_app.console.rules_urls")),
    path("tools/", include("tools_app.console.urls")),
    path("webhooks/", include("notify_app.console.urls")),
    path("act/", include("notify_app.console.link_urls")),
    path("audit/", include("audit_app.urls")),
    path("schedules/", include("schedules_app.console.urls")),
    path("workflows/", include("workflows_app.console.urls")),
    path("memory/", include("memory_app.urls")),
    path("evaluations/", include("evals_app.urls")),
    path("", include("accounts_app.console.urls")),
    path("", include("tasks_app.console.urls")),
]
