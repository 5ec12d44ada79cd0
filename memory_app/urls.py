"""Memory routes, mounted at /memory/."""
from django.urls import path

from . import console

app_name = "memory"
urlpatterns = [
    path("", console.memory_list, name="memory-list"),
    path("new/", console.memory_create, name="memory-create"),
    path("erase/", console.memory_erase, name="memory-erase"),
    path("<int:item_id>/", console.memory_item, name="memory-item"),
    path("<int:item_id>/delete/", console.memory_delete, name="memory-delete"),
    path("proposals/<int:proposal_id>/accept/", console.proposal_accept_view,
         name="proposal-accept"),
    path("proposals/<int:proposal_id>/reject/", console.proposal_reject_view,
         name="proposal-reject"),
]
