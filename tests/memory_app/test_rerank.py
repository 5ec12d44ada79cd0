"""The optional embeddings rerank of memory (off by default), against a fake
OpenAI-compatible embeddings endpoint on loopback: what the model is shown."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from foundations.actors import Actor
from memory_app.services import item_create
from tasks_app.machine import TaskStatus
from tests.factories import submit
from tests.fakes.embeddings_server import FakeEmbeddings
from tests.fakes.fixtures import openai_agent
from tests.fakes.openai_server import reply
from tests.helpers import drive

pytestmark = pytest.mark.django_db(transaction=True)

ADMIN = Actor(name="ada", role="admin")
COUCH = "The couch needs two porters and a blanket"
INVOICE = "The invoice copy goes to accounting"


@pytest.fixture
def embeddings() -> Iterator[FakeEmbeddings]:
    server = FakeEmbeddings()
    try:
        yield server
    finally:
        server.close()


def _shown(world, openai_server) -> str:  # type: ignore[no-untyped-def]
    """The memory block of the model's request for a task about moving a sofa."""
    openai_server.requests.clear()
    openai_server.push(reply('{"answer": "done"}'))
    task = drive(submit(world.tenant, None, agent="llm", goal="Move the sofa to the new flat",
                        subject="cust-S").pk)
    assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
    context = openai_server.requests[0].body["messages"][1]["content"]
    return context[context.index("<memory>"):context.index("</memory>")]


def test_the_embeddings_endpoint_reranks_memory_only_when_configured(
        world, openai_server, embeddings, settings):
    settings.TETHER = {**settings.TETHER, "MEMORY_CONTEXT_ITEMS": 1}
    openai_agent(world.tenant, openai_server, memory_policy="read")
    for text in (COUCH, INVOICE):  # neither matches the goal's words; the invoice is newer
        item_create(tenant_id=world.tenant.pk, actor=ADMIN, fields={
            "scope": "subject", "subject": "cust-S", "kind": "fact", "text": text})

    off = _shown(world, openai_server)
    assert INVOICE in off and COUCH not in off
    assert embeddings.requests == []  # off by default: no call

    settings.TETHER_MEMORY_EMBEDDINGS_URL = embeddings.base_url
    settings.TETHER_MEMORY_EMBEDDINGS_MODEL = "embed-small"
    settings.TETHER_MEMORY_EMBEDDINGS_API_KEY = "emb-key"
    on = _shown(world, openai_server)
    assert COUCH in on and INVOICE not in on  # a sofa is a couch to the embeddings
    (sent,) = embeddings.requests
    assert sent["path"] == "/v1/embeddings" and sent["authorization"] == "Bearer emb-key"
    assert sent["body"]["model"] == "embed-small"
    assert sent["body"]["input"][0].startswith("Move the sofa")
    assert sorted(sent["body"]["input"][1:]) == sorted([COUCH, INVOICE])

    embeddings.fail = True  # a failing endpoint keeps the full-text order; the step goes on
    assert INVOICE in _shown(world, openai_server)
    assert len(embeddings.requests) == 2
