"""The console's Audit page (admins only): the tenant's audit log, newest first,
filtered by kind, object name and actor, paged by id."""
from __future__ import annotations

from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from foundations.console_access import ADMINS, ConsoleUser, console_view
from foundations.console_paging import cursor, keyset_page

from .models import AuditKind
from .selectors import audit_entries

PAGE_SIZE = 50


@console_view(roles=ADMINS)
def audit_list_view(request: HttpRequest) -> HttpResponse:
    cu: ConsoleUser = request.console  # type: ignore[attr-defined]
    filters = {key: request.GET.get(key, "").strip()[:200] for key in ("kind", "name", "actor")}
    qs = audit_entries(cu.tenant_id, kind=filters["kind"], name=filters["name"],
                       actor=filters["actor"])
    page = keyset_page(qs, before=cursor(request.GET.get("before")),
                       after=cursor(request.GET.get("after")), size=PAGE_SIZE)
    return render(request, "audit/list.html", {
        "nav": "audit", "page": page, "filters": filters, "kinds": AuditKind.values,
        "query_prefix": (urlencode(kept) + "&") if (kept := {k: v for k, v in filters.items()
                                                             if v}) else "",
    })
