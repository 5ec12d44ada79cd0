"""Console routes of accounts_app: members, API keys and secrets."""

from django.urls import path

from . import api_keys, members, secrets

app_name = "accounts"
urlpatterns = [
    path("secrets/", secrets.secret_list, name="secret-list"),
    path("secrets/<slug:name>/rotate/", secrets.secret_rotate_view, name="secret-rotate"),
    path("secrets/<slug:name>/delete/", secrets.secret_delete_view, name="secret-delete"),
    path("members/", members.member_list, name="member-list"),
    path("members/<int:user_id>/email/", members.member_email_view, name="member-email"),
    path("api-keys/", api_keys.api_key_list, name="api-key-list"),
    path("api-keys/<int:key_id>/scope/", api_keys.api_key_scope_view, name="api-key-scope"),
]
