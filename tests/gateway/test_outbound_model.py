"""Model endpoints under the outbound-address policy and a total timeout: an
address refused at call time fails the task without a retry and without a
byte sent; a drip-fed answer is cut at the profile's `timeout_s`; the SDK
client of a base URL is built once per process."""

from __future__ import annotations

from typing import Any

import pytest

from foundations.ioloop import run_io
from tasks_app.gateway.base import GatewayError
from tasks_app.gateway.openai_backend import OpenAIBackend, sdk_client
from tasks_app.machine import TaskStatus
from tasks_app.services.agents import agent_create
from tests.factories import submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.listeners import DripServer, Listener
from tests.fakes.openai_server import encoded, reply
from tests.helpers import drive, wait_for
from tools_app.outbound import REFUSED, async_client_for

pytestmark = pytest.mark.django_db(transaction=True)
ISSUE_HOLD_S = 27.0


def test_a_model_endpoint_refused_at_call_time_fails_the_task_unasked(world, settings):
    attacker = Listener("127.0.0.2")
    try:
        settings.TETHER_EGRESS_ALLOW = ["127.0.0.1", "127.0.0.2"]
        agent_create(tenant_id=world.tenant.pk, name="exfil", tools=["lookup_order"],
                     on_exhaustion="fail",
                     model={"backend": "openai", "name": "primary", "max_retries": 2,
                            "base_url": attacker.url("/v1")})
        settings.TETHER_EGRESS_ALLOW = ["127.0.0.1", "localhost", "::1"]
        task = drive(submit(world.tenant, None, agent="exfil", goal="Where is A-1?").pk)

        assert task.status == TaskStatus.FAILED and task.failure_reason == "model_unavailable"
        message = task.failure_detail["detail"]["message"]
        assert message == f"primary failed after 1 attempts: {REFUSED}"  # not retried
        assert "127.0.0.2" not in str(task.failure_detail)
        assert attacker.connections == 0
    finally:
        attacker.close()


def test_a_drip_fed_model_answer_is_cut_at_the_timeout():
    server = DripServer(reply("late").body, interval_s=0.7)
    try:
        backend = OpenAIBackend({"backend": "openai", "name": "primary", "timeout_s": 1,
                                 "max_retries": 0, "base_url": server.url("/v1")})
        with pytest.raises(GatewayError) as failed:
            backend.summarize(goal="g", previous="", steps=[], max_chars=100)
        assert "no reply within 1s" in str(failed.value) and failed.value.retryable
        (drip,) = server.drips
        wait_for(drip.closed.is_set, timeout=10, message="the client to close the connection")
        held = drip.closed_at - drip.accepted_at
        print(f"held for {held:.2f}s, {drip.sent} bytes sent")
        assert held < ISSUE_HOLD_S / 2 and drip.sent < len(server.payload)
    finally:
        server.close()


def test_the_sdk_client_of_a_base_url_is_built_once(world, openai_server):
    openai_agent(world.tenant, openai_server)

    async def clients() -> tuple[Any, Any]:  # on the I/O loop, where the runner calls
        return sdk_client(openai_server.base_url), async_client_for(openai_server.base_url)

    sdk, http = run_io(clients())
    openai_server.push(reply('{"answer": 1}'), reply('{"answer": 2}'))
    for _ in range(2):
        assert drive(submit(world.tenant, None, agent="llm").pk).status == TaskStatus.SUCCEEDED
    assert run_io(clients()) == (sdk, http)
    assert sdk._client is http  # the endpoint's outbound client
    assert len(openai_server.requests) == 2


@pytest.mark.django_db  # one thread: no real commits needed
def test_a_reply_is_limited_as_it_decodes_not_as_it_is_sent(openai_server, settings):
    """A few kilobytes of gzip can decode to gigabytes, which the SDK would
    hold whole: the limit holds on the decoded reply. A reply gzipped within
    it reads as any other; one in a coding not asked for is refused."""
    settings.TETHER = {**settings.TETHER, "MAX_RESPONSE_BYTES": 20_000,
                       "MAX_TOOL_RESULT_BYTES": 1_000}
    backend = OpenAIBackend({"backend": "openai", "name": "primary", "timeout_s": 5,
                             "max_retries": 2, "base_url": openai_server.base_url})
    openai_server.push(encoded("gzip", reply("fits, gzipped " * 100)))
    assert backend.summarize(goal="g", previous="", steps=[],
                             max_chars=5000).text.startswith("fits, gzipped fits")
    assert openai_server.requests[0].headers["accept-encoding"] == "gzip, deflate"

    bomb = encoded("gzip", reply("x" * 5_000_000))  # about 5 kB as sent
    openai_server.push(bomb, reply("small enough"))
    with pytest.raises(GatewayError) as failed:
        backend.summarize(goal="g", previous="", steps=[], max_chars=100)
    assert "the response is larger than 20000 bytes" in str(failed.value)
    assert not failed.value.retryable and openai_server.pending() == 1  # not asked again
    assert backend.summarize(goal="g", previous="", steps=[], max_chars=100).text == (
        "small enough")  # the endpoint's client goes on

    openai_server.push(encoded("br", reply("unasked")), reply("small enough"))
    with pytest.raises(GatewayError) as refused:
        backend.summarize(goal="g", previous="", steps=[], max_chars=100)
    assert "encoded br, not gzip, deflate" in str(refused.value) and not refused.value.retryable
    assert openai_server.pending() == 1


@pytest.mark.django_db  # one thread: no real commits needed
def test_a_model_reply_past_the_limit_fails_the_call_unretried(openai_server, settings):
    """The base URL is the tenant's: its reply is read up to TETHER_MAX_RESPONSE_BYTES."""
    settings.TETHER = {**settings.TETHER, "MAX_RESPONSE_BYTES": 20_000,
                       "MAX_TOOL_RESULT_BYTES": 1_000}
    openai_server.push(reply("x" * 50_000), reply("small enough"))
    backend = OpenAIBackend({"backend": "openai", "name": "primary", "timeout_s": 5,
                             "max_retries": 2, "base_url": openai_server.base_url})
    with pytest.raises(GatewayError) as failed:
        backend.summarize(goal="g", previous="", steps=[], max_chars=100)
    assert "the response is larger than 20000 bytes" in str(failed.value)
    assert not failed.value.retryable  # asking again would only get as much
    assert len(openai_server.requests) == 1 and openai_server.pending() == 1
