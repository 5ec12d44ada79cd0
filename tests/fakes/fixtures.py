"""Fixtures around the fake OpenAI-compatible server: the server itself and an
agent profile pointed at it."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tasks_app.models import AgentProfile
from tasks_app.services.demo import demo_agent_ensure

from .openai_server import FakeOpenAI

KEY_ENV = "TETHER_TEST_LLM_KEY"
KEY = "sk-test-not-a-real-key"


@pytest.fixture
def openai_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    monkeypatch.setenv(KEY_ENV, KEY)
    server = FakeOpenAI()
    try:
        yield server
    finally:
        server.close()


def openai_agent(tenant: Any, server: FakeOpenAI, *, name: str = "llm",
                 model: dict[str, Any] | None = None, **fields: Any) -> AgentProfile:
    """A profile of the `openai` backend on the fake server (model `primary`)."""
    settings = {
        "backend": "openai", "name": "primary", "base_url": server.base_url, "api_key_env": KEY_ENV,
        "temperature": 0.2, "top_p": 0.9, "system_prompt": "You are a careful support agent.",
        "timeout_s": 5, "max_retries": 2, **(model or {}),
    }
    return demo_agent_ensure(tenant, name=name, model=settings, on_exhaustion="fail", **fields)
