"""An optional rerank of memory's matches by an OpenAI-compatible embeddings
endpoint (`TETHER_MEMORY_EMBEDDINGS_URL`; off when empty, the default).

When it is on, a step's context asks `recall` for `POOL` times the items it
shows, sends the task's query text and those items' texts in one
`POST <url>/embeddings` (`{"model", "input": [query, text, ...]}`), and
scores each item anew: `weight` x the cosine similarity of its embedding to
the query's + (1 - `weight`) x its full-text, scope and recency score. The
best ones are shown. Nothing is stored: no vector column, no extension.

The endpoint is the operator's (a setting, never a tenant's), so it is not
held to the tools' egress rules. A call that fails, times out or answers
something unusable keeps the full-text order (logged): memory never stops a
step.
"""
from __future__ import annotations

import logging
import math
from dataclasses import replace
from typing import Any

import httpx
from django.conf import settings

from .selectors import Recalled

log = logging.getLogger(__name__)

POOL = 3  # candidates asked of `recall` per item shown
MAX_INPUT_CHARS = 2000  # of each text sent


def enabled() -> bool:
    return bool(getattr(settings, "TETHER_MEMORY_EMBEDDINGS_URL", ""))


def rerank(query: str, hits: list[Recalled]) -> list[Recalled]:
    """`hits` best first by the blended score; as they came if the endpoint fails."""
    if not enabled() or len(hits) < 2:
        return hits
    vectors = _embed([query, *(h.item.text for h in hits)])
    if vectors is None:
        return hits
    weight = float(getattr(settings, "TETHER_MEMORY_EMBEDDINGS_WEIGHT", 0.5))
    target = vectors[0]
    scored = [replace(h, score=weight * _cosine(target, v) + (1 - weight) * h.score)
              for h, v in zip(hits, vectors[1:], strict=True)]
    scored.sort(key=lambda r: (-r.score, -r.item.pk))
    return scored


def _embed(texts: list[str]) -> list[list[float]] | None:
    url = str(settings.TETHER_MEMORY_EMBEDDINGS_URL).rstrip("/") + "/embeddings"
    headers = {}
    key = getattr(settings, "TETHER_MEMORY_EMBEDDINGS_API_KEY", "")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    body = {"model": getattr(settings, "TETHER_MEMORY_EMBEDDINGS_MODEL", ""),
            "input": [t[:MAX_INPUT_CHARS] for t in texts]}
    try:
        response = httpx.post(url, json=body, headers=headers,
                              timeout=float(settings.TETHER_MEMORY_EMBEDDINGS_TIMEOUT_S))
        response.raise_for_status()
        return _vectors(response.json(), len(texts))
    except (httpx.HTTPError, ValueError, TypeError) as exc:
        log.warning("memory rerank: the embeddings endpoint failed, full-text order kept: %s",
                    exc)
        return None


def _vectors(answer: Any, count: int) -> list[list[float]]:
    """The embeddings of an OpenAI-style answer, in input order; ValueError if unusable."""
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list) or len(data) != count:
        raise ValueError(f"expected {count} embeddings")
    by_index = sorted(data, key=lambda d: int(d.get("index", 0)) if isinstance(d, dict) else 0)
    vectors = []
    for entry in by_index:
        vector = entry.get("embedding") if isinstance(entry, dict) else None
        if not isinstance(vector, list) or not vector or not all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in vector):
            raise ValueError("an embedding is not a list of numbers")
        vectors.append([float(x) for x in vector])
    if len({len(v) for v in vectors}) != 1:
        raise ValueError("the embeddings differ in length")
    return vectors


def _cosine(a: list[float], b: list[float]) -> float:
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / norm if norm else 0.0
