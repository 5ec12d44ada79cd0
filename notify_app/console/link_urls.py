"""The signed links of notification e-mails, mounted at /act/."""

from django.urls import path

from .links import decision_link

app_name = "links"
urlpatterns = [
    path("<str:token>/", decision_link, name="decision-link"),
]
