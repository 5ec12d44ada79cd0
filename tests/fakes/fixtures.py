"""Fixtures around the fake OpenAI-compatible server: the server itself and an
agent profile pointed at it, whose key is a secret of the profile's tenant."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from accounts_app.models import TenantSecret
from accounts_app.services.secrets import secret_create
from foundations.actors import SYSTEM
from tasks_app.models import AgentProfile
from tasks_app.services.demo import demo_agent_ensure

from .openai_server import FakeOpenAI

KEY_SECRET = "llm-key"
KEY = "sk-test-not-a-real-key"


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    try:
        yield server
    finally:
        server.close()


def openai_agent(tenant: Any, server: FakeOpenAI, *, name: str = "llm",
                 model: dict[str, Any] | None = None, **fields: Any) -> AgentProfile:
    """A profile of the `openai` backend on the fake server (model `primary`), its
    key the tenant's secret `llm-key` (stored here when the tenant has none)."""
    if not TenantSecret.objects.filter(tenant=tenant, name=KEY_SECRET).exists():
        secret_create(tenant_id=tenant.pk, name=KEY_SECRET, value=KEY, actor=SYSTEM)
    settings = {
        "backend": "openai", "name": "primary", "base_url": server.base_url,
        "api_key_secret": KEY_SECRET,
        "temperature": 0.2, "top_p": 0.9, "system_prompt": "You are a careful support agent.",
        "timeout_s": 5, "max_retries": 2, **(model or {}),
    }
    fields = {"on_exhaustion": "fail", **fields}
    return demo_agent_ensure(tenant, name=name, model=settings, **fields)
