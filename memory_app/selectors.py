"""Reading memory: lists with filters and text search (the API, the console),
an item's versions, and retrieval for a step's context (`recall`).

Text search is the database's own: PostgreSQL full-text search (the
generated, GIN-indexed `search` column; `websearch_to_tsquery`, ranked by
`ts_rank_cd`), SQLite FTS5 in the embedded mode (`bm25`). No vector extension.

`recall` costs what the task's scopes hold, whatever the tenant's size: the
text matches among the items of the task's scopes (its tenant's, its
agent's, its subject's: a btree index range, each scope at most the
per-scope limit), best first, `limit` of them; and the most recent items of
its agent and subject (an index range scan, `limit` rows each), read whole
in one query; scored in Python.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL

from .models import MemoryItem, MemoryProposal, MemoryVersion, ProposalStatus, Scope, scope_key

TABLE = MemoryItem._meta.db_table
FTS_TABLE = f"{TABLE}_fts"
_WORD = re.compile(r"\w{3,}", re.UNICODE)
MAX_QUERY_WORDS = 30
# what a scope adds to an item's score: the narrower, the more it is about this task
SCOPE_WEIGHT: dict[str, float] = {Scope.SUBJECT: 0.3, Scope.AGENT: 0.2, Scope.TENANT: 0.1}
RECENCY_WEIGHT = 0.2
RECENCY_DAYS = 30.0


def words(text: str, limit: int = MAX_QUERY_WORDS) -> list[str]:
    """The distinct words of `text` (3 characters or more), in order, at most `limit`."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        seen.setdefault(word, None)
        if len(seen) >= limit:
            break
    return list(seen)


def _fts5_query(terms: list[str], *, any_of: bool) -> str:
    quoted = ['"' + t.replace('"', '""') + '"' for t in terms]
    return (" OR " if any_of else " AND ").join(quoted)


def _matching(qs: QuerySet[MemoryItem], text: str) -> QuerySet[MemoryItem]:
    """`qs` narrowed to the items whose text matches `text` (a person's search:
    every word; on PostgreSQL, websearch syntax: "quoted phrases", or, -not)."""
    if connection.vendor == "postgresql":
        return qs.filter(RawSQL(f"{TABLE}.search @@ websearch_to_tsquery('english', %s)",
                                [text], output_field=BooleanField()))
    terms = words(text)
    if not terms:
        return qs.none()
    return qs.filter(id__in=RawSQL(
        f"SELECT rowid FROM {FTS_TABLE} WHERE {FTS_TABLE} MATCH %s",
        [_fts5_query(terms, any_of=False)]))


def items_of_tenant(tenant_id: int) -> QuerySet[MemoryItem]:
    return MemoryItem.objects.filter(tenant_id=tenant_id)


def item_of_tenant(tenant_id: int, item_id: int) -> MemoryItem | None:
    return items_of_tenant(tenant_id).select_related("agent").filter(pk=item_id).first()


def items_matching(*, tenant_id: int, scope: str | None = None, subject: str | None = None,
                   agent: str | None = None, kind: str | None = None, q: str | None = None,
                   tag: str | None = None) -> QuerySet[MemoryItem]:
    """The tenant's items that match every filter given, newest first."""
    qs = items_of_tenant(tenant_id).select_related("agent")
    if scope:
        qs = qs.filter(scope=scope)
    if subject:
        qs = qs.filter(scope_key=scope_key(Scope.SUBJECT, subject=subject))
    if agent:
        qs = qs.filter(scope=Scope.AGENT, agent__name=agent)
    if kind:
        qs = qs.filter(kind=kind)
    if tag:
        qs = qs.filter(tags__contains=[tag]) if connection.vendor == "postgresql" else qs.filter(
            tags__icontains=f'"{tag}"')
    if q:
        qs = _matching(qs, q)
    return qs.order_by("-id")


def memory_of(tenant_id: int, subject: str | None = None) -> list[QuerySet]:
    """What memory holds of a subject (its scope's items, their versions, the
    proposals naming it), or with no subject of the whole tenant: what an
    erasure deletes and an export writes, one matcher for both."""
    items = MemoryItem.objects.filter(tenant_id=tenant_id)
    proposals = MemoryProposal.objects.filter(tenant_id=tenant_id)
    if subject is not None:
        items = items.filter(scope_key=scope_key(Scope.SUBJECT, subject=subject))
        proposals = proposals.filter(subject=subject, scope=Scope.SUBJECT)
    versions = MemoryVersion.objects.filter(item__in=items.values("pk"))
    return [items.order_by("pk"), versions.order_by("pk"), proposals.order_by("pk")]


def versions_of(item_id: int) -> QuerySet[MemoryVersion]:
    return MemoryVersion.objects.filter(item_id=item_id).order_by("-version")


def version_of(item_id: int, version: int) -> MemoryVersion | None:
    return MemoryVersion.objects.filter(item_id=item_id, version=version).first()


def scope_count(tenant_id: int, key: str) -> int:
    return MemoryItem.objects.filter(tenant_id=tenant_id, scope_key=key).count()


def open_proposals(tenant_id: int) -> QuerySet[MemoryProposal]:
    return (MemoryProposal.objects.filter(tenant_id=tenant_id, status=ProposalStatus.OPEN)
            .select_related("task", "agent").order_by("id"))


def open_proposal_count(tenant_id: int) -> int:
    return MemoryProposal.objects.filter(tenant_id=tenant_id, status=ProposalStatus.OPEN).count()


def proposal_of_tenant(tenant_id: int, proposal_id: int) -> MemoryProposal | None:
    return MemoryProposal.objects.filter(tenant_id=tenant_id, pk=proposal_id).first()


def proposals_of_task(task_id: int) -> QuerySet[MemoryProposal]:
    return MemoryProposal.objects.filter(task_id=task_id).order_by("id")


# --- retrieval ------------------------------------------------------------------------


@dataclass(frozen=True)
class Recalled:
    item: MemoryItem
    score: float
    matched: bool


def task_scopes(*, agent_id: int | None, subject: str) -> list[str]:
    """The scopes a task sees: its tenant's, its agent's, its subject's (when it has one).
    A task about no subject sees no subject's items."""
    keys = [scope_key(Scope.TENANT)]
    if agent_id is not None:
        keys.append(scope_key(Scope.AGENT, agent_id=agent_id))
    if subject:
        keys.append(scope_key(Scope.SUBJECT, subject=subject))
    return keys


def _text_match_sql(tenant_id: int, keys: list[str], terms: list[str], limit: int,
                    per_scope: int) -> tuple[str, list[str | int]]:
    """The best `limit` text matches in `keys`, as (id, rank) rows: the SQL and its
    parameters. PostgreSQL's rank is normalized (32: rank / (rank + 1)); SQLite's
    is bm25's, turned into 0..1 by `_candidates`."""
    placeholders = ", ".join(["%s"] * len(keys))
    if connection.vendor == "postgresql":
        # The candidates are the scopes' rows (the btree index; each scope holds at
        # most `per_scope`), matched and ranked there: the cost follows the task's
        # scopes, not the tenant. (Planned freely, PostgreSQL intersects the GIN
        # index's matches over the whole table with them: 3-4 times slower at
        # 100,000 items, docs/performance/memory.md.)
        sql = (f"SELECT id, ts_rank_cd(search, query, 32) AS rank "
               f"FROM (SELECT id, search FROM {TABLE} "
               f"WHERE tenant_id = %s AND scope_key IN ({placeholders}) LIMIT %s) AS scoped, "
               f"websearch_to_tsquery('english', %s) AS query "
               f"WHERE search @@ query ORDER BY rank DESC, id DESC LIMIT %s")
        return sql, [tenant_id, *keys, per_scope * len(keys), " or ".join(terms), limit]
    sql = (f"SELECT i.id, -bm25({FTS_TABLE}) AS rank FROM {FTS_TABLE} "
           f"JOIN {TABLE} AS i ON i.id = {FTS_TABLE}.rowid "
           f"WHERE {FTS_TABLE} MATCH %s AND i.tenant_id = %s "
           f"AND i.scope_key IN ({placeholders}) "
           f"ORDER BY bm25({FTS_TABLE}), i.id DESC LIMIT %s")
    return sql, [_fts5_query(terms, any_of=True), tenant_id, *keys, limit]


def _text_ranks(tenant_id: int, keys: list[str], terms: list[str], limit: int,
                per_scope: int) -> dict[int, float]:
    """{item id: rank in 0..1} of the best `limit` text matches in `keys`."""
    return {item.pk: rank for item, rank in _candidates(tenant_id, keys, terms, [], limit,
                                                          per_scope) if rank is not None}


def _candidates(tenant_id: int, keys: list[str], terms: list[str], recent_keys: list[str],
                limit: int, per_scope: int) -> list[tuple[MemoryItem, float | None]]:
    """In one query: the text matches (`_text_match_sql`, each with its rank in
    0..1) and the latest `limit` items of each of `recent_keys` (an index range
    scan each, rank None), read whole. An item both matched and recent comes
    twice. A step pays one round trip for its memory, not one per scope."""
    parts: list[str] = []
    params: list[str | int] = []
    if terms:
        sql, params = _text_match_sql(tenant_id, keys, terms, limit, per_scope)
        parts.append(f"SELECT id, rank FROM ({sql}) AS matched")
    for n, key in enumerate(recent_keys):
        parts.append(f"SELECT id, NULL AS rank FROM (SELECT id FROM {TABLE} WHERE tenant_id = %s "
                     f"AND scope_key = %s ORDER BY updated_at DESC LIMIT %s) AS recent{n}")
        params += [tenant_id, key, limit]
    if not parts:
        return []
    columns = ", ".join(f"i.{f.column}" for f in MemoryItem._meta.concrete_fields)
    rows = MemoryItem.objects.raw(
        f"SELECT {columns}, c.rank AS candidate_rank FROM {TABLE} AS i "
        f"JOIN ({' UNION ALL '.join(parts)}) AS c ON c.id = i.id", params)
    found: list[tuple[MemoryItem, float | None]] = []
    for item in rows:
        rank = item.candidate_rank  # type: ignore[attr-defined]
        if rank is not None:
            rank = float(rank)
            if connection.vendor != "postgresql":  # bm25's, to 0..1 (PostgreSQL's already is)
                rank = max(0.0, rank) / (1.0 + max(0.0, rank))
        found.append((item, rank))
    return found


def recall(*, tenant_id: int, agent_id: int | None, subject: str, text: str, limit: int,
           now: datetime, per_scope: int = 1000) -> list[Recalled]:
    """The items a task's step is shown, best first: text matches of the task's
    scopes (tenant, agent, subject) and the latest items of its agent and
    subject, each scored by its text rank, its scope and its age. Expired
    items are left out. Matches among the scopes' items (at most `per_scope`
    each); reads at most 3 x `limit` whole items, in one query."""
    keys = task_scopes(agent_id=agent_id, subject=subject)
    narrow = [k for k in keys if k != "tenant"]
    items: dict[int, MemoryItem] = {}
    ranks: dict[int, float] = {}
    for item, rank in _candidates(tenant_id, keys, words(text), narrow, limit, per_scope):
        if item.expires_at is not None and item.expires_at <= now:
            continue
        items[item.pk] = item
        if rank is not None:
            ranks[item.pk] = rank
    scored = []
    for item in items.values():
        age_days = max(0.0, (now - item.updated_at).total_seconds() / 86400)
        score = (ranks.get(item.pk, 0.0) + SCOPE_WEIGHT.get(item.scope, 0.0)
                 + RECENCY_WEIGHT * math.exp(-age_days / RECENCY_DAYS))
        scored.append(Recalled(item, score, item.pk in ranks))
    scored.sort(key=lambda r: (-r.score, -r.item.pk))
    return scored[:limit]


def version_in_scopes(*, tenant_id: int, item_id: int, version: int, agent_id: int | None,
                      subject: str, now: datetime) -> MemoryVersion | None:
    """One version of an item in the task's scopes (its tenant's, its agent's, its
    subject's) that is not deleted nor expired; None for anything else."""
    live = Q(item__expires_at__isnull=True) | Q(item__expires_at__gt=now)
    return (MemoryVersion.objects
            .filter(live, item_id=item_id, version=version, item__tenant_id=tenant_id,
                    item__scope_key__in=task_scopes(agent_id=agent_id, subject=subject))
            .select_related("item").first())
