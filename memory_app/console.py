"""The console's Memory pages: the tenant's items (search, filters; one
subject's items, with its erasure), one item (its versions, each with its
source, edit, delete), and the review of proposed writes (from the inbox).
Every action goes through the same services as the API."""
from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from accounts_app.models import Role
from foundations.console_access import ADMINS, DECIDERS, OPERATORS, ConsoleUser, console_view
from foundations.console_actions import ServiceErrorsForm, form_action, save_form, succeeded
from foundations.console_errors import error_line, error_status
from foundations.console_paging import cursor, keyset_page
from foundations.errors import DomainError

from .models import Kind, MemoryItem, Scope
from .selectors import item_of_tenant, items_matching, versions_of
from .services import (
    item_create,
    item_delete,
    item_update,
    proposal_accept,
    proposal_reject,
    subject_erase,
)

READERS = frozenset({Role.OPERATOR, Role.REVIEWER, Role.ADMIN})
PAGE_SIZE = 50
FILTERS = ("scope", "subject", "kind", "q")


def _cu(request: HttpRequest) -> ConsoleUser:
    return request.console  # type: ignore[attr-defined, no-any-return]


class JSONValueField(forms.CharField):
    """Any JSON value, or nothing."""

    def clean(self, value: Any) -> Any:
        text = super().clean(value)
        if not text:
            return None
        try:
            return json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"not JSON: {exc}") from None


class TagsField(forms.CharField):
    def clean(self, value: Any) -> list[str]:
        text = super().clean(value) or ""
        return [t.strip() for t in text.split(",") if t.strip()]


class ContentForm(ServiceErrorsForm):
    text = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), strip=False)
    kind = forms.ChoiceField(choices=Kind.choices)
    value = JSONValueField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                           help_text="Optional structured value, JSON.")
    uri = forms.CharField(required=False, help_text="An artifact's URI.")
    tags = TagsField(required=False, help_text="Comma-separated.")
    expires_at = forms.DateTimeField(required=False, help_text="Optional, UTC.")


class ItemForm(ContentForm):
    scope = forms.ChoiceField(choices=Scope.choices)
    subject = forms.CharField(required=False, strip=False)
    agent = forms.CharField(required=False, help_text="For the agent scope: its name.")

    field_order = ["scope", "subject", "agent", "kind", "text", "value", "uri", "tags",
                   "expires_at"]


def _filters(request: HttpRequest) -> dict[str, str]:
    return {key: request.GET.get(key, "")[:500] for key in FILTERS}


def _list_page(request: HttpRequest, form: ItemForm | None = None, *, status: int = 200,
               error: str = "") -> HttpResponse:
    cu = _cu(request)
    filters = _filters(request)
    if filters["scope"] not in Scope.values:
        filters["scope"] = ""
    if filters["kind"] not in Kind.values:
        filters["kind"] = ""
    qs = items_matching(tenant_id=cu.tenant_id, scope=filters["scope"] or None,
                        subject=filters["subject"] or None, kind=filters["kind"] or None,
                        q=filters["q"].strip() or None)
    page = keyset_page(qs, before=cursor(request.GET.get("before")),
                       after=cursor(request.GET.get("after")), size=PAGE_SIZE)
    kept = {k: v for k, v in filters.items() if v}
    initial = {"scope": "subject", "subject": filters["subject"]} if filters["subject"] else {}
    return render(request, "memory/list.html", {
        "nav": "memory", "page": page, "filters": filters, "scopes": Scope.values,
        "kinds": Kind.values, "subject": filters["subject"],
        "form": form or ItemForm(initial=initial), "error": error,
        "can_write": cu.role in OPERATORS, "can_erase": cu.role in ADMINS,
        "query_prefix": (urlencode(kept) + "&") if kept else "",
    }, status=status)


@console_view(roles=READERS)
def memory_list(request: HttpRequest) -> HttpResponse:
    return _list_page(request)


@console_view(roles=OPERATORS)
def memory_create(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return redirect("memory:memory-list")
    cu = _cu(request)
    form = ItemForm(request.POST)
    return save_form(
        form, lambda d: item_create(tenant_id=cu.tenant_id, actor=cu.actor, fields={
            k: v for k, v in d.items() if v not in ("", None) or k == "value"}),
        page=lambda f, status: _list_page(request, f, status=status),
        done=lambda item: succeeded(request, f"Saved {item.cite_id}.", "memory:memory-item",
                                    item.pk))


@console_view(roles=ADMINS)
def memory_erase(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return redirect("memory:memory-list")
    cu = _cu(request)
    subject = request.POST.get("subject", "")

    def refused(exc: DomainError) -> HttpResponse:
        return _list_page(request, status=error_status(exc), error=error_line(exc))

    def done(erased: dict[str, int]) -> HttpResponse:
        return succeeded(request, f"Erased the memory of {subject}: {erased['items']} items, "
                                  f"{erased['versions']} versions, {erased['proposals']} "
                                  "proposals.", "memory:memory-list")

    return form_action(None, lambda _: subject_erase(tenant_id=cu.tenant_id, subject=subject,
                                                     actor=cu.actor),
                       refused=refused, done=done)


def _item_page(request: HttpRequest, item: MemoryItem, form: ContentForm | None = None, *,
               status: int = 200, error: str = "") -> HttpResponse:
    cu = _cu(request)
    initial = {"text": item.text, "kind": item.kind, "uri": item.uri,
               "tags": ", ".join(item.tags or []), "expires_at": item.expires_at,
               "value": "" if item.value is None else json.dumps(item.value)}
    return render(request, "memory/item.html", {
        "nav": "memory", "item": item, "versions": list(versions_of(item.pk)[:100]),
        "form": form or ContentForm(initial=initial), "can_write": cu.role in OPERATORS,
        "error": error,
    }, status=status)


def _item_or_none(request: HttpRequest, item_id: int) -> MemoryItem | None:
    return item_of_tenant(_cu(request).tenant_id, item_id)


@console_view(roles=READERS)
def memory_item(request: HttpRequest, item_id: int) -> HttpResponse:
    item = _item_or_none(request, item_id)
    if item is None:
        return render(request, "404.html", status=404)
    if request.method != "POST":
        return _item_page(request, item)
    cu = _cu(request)
    if cu.role not in OPERATORS:
        return _item_page(request, item, status=403, error="Your role does not allow this.")
    form = ContentForm(request.POST)
    return save_form(
        form, lambda d: item_update(tenant_id=cu.tenant_id, item_id=item.pk, actor=cu.actor,
                                    changes={**d, "uri": d.get("uri") or ""}),
        page=lambda f, status: _item_page(request, item, f, status=status),
        done=lambda saved: succeeded(request, f"Saved {saved.cite_id}.", "memory:memory-item",
                                     saved.pk))


@console_view(roles=OPERATORS)
def memory_delete(request: HttpRequest, item_id: int) -> HttpResponse:
    item = _item_or_none(request, item_id)
    if item is None:
        return render(request, "404.html", status=404)
    if request.method != "POST":
        return redirect("memory:memory-item", item.pk)
    cu = _cu(request)
    return form_action(
        None, lambda _: item_delete(tenant_id=cu.tenant_id, item_id=item.pk, actor=cu.actor),
        refused=lambda exc: _item_page(request, item, status=error_status(exc),
                                       error=error_line(exc)),
        done=lambda _: succeeded(request, f"Deleted {item.cite_id} and its versions.",
                                 "memory:memory-list"))


class AcceptForm(ServiceErrorsForm):
    text = forms.CharField(required=False, strip=False, widget=forms.Textarea(attrs={"rows": 2}))


@console_view(roles=DECIDERS)
def proposal_accept_view(request: HttpRequest, proposal_id: int) -> HttpResponse:
    if request.method != "POST":
        return redirect("inbox:inbox")
    cu = _cu(request)
    form = AcceptForm(request.POST)

    def refused(exc: DomainError) -> HttpResponse:
        messages.error(request, error_line(exc))
        return redirect("inbox:inbox")

    return form_action(
        form, lambda d: proposal_accept(tenant_id=cu.tenant_id, proposal_id=proposal_id,
                                        actor=cu.actor,
                                        edits={"text": d["text"]} if d.get("text") else {}),
        invalid=lambda f: redirect("inbox:inbox"), refused=refused,
        done=lambda item: succeeded(request, f"Saved {item.cite_id}.", "inbox:inbox"))


@console_view(roles=DECIDERS)
def proposal_reject_view(request: HttpRequest, proposal_id: int) -> HttpResponse:
    if request.method != "POST":
        return redirect("inbox:inbox")
    cu = _cu(request)

    def refused(exc: DomainError) -> HttpResponse:
        messages.error(request, error_line(exc))
        return redirect("inbox:inbox")

    return form_action(
        None, lambda _: proposal_reject(tenant_id=cu.tenant_id, proposal_id=proposal_id,
                                        actor=cu.actor, note=request.POST.get("note", "")),
        refused=refused,
        done=lambda _: succeeded(request, "Rejected: nothing was saved.", "inbox:inbox"))
