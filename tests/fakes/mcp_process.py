"""The test MCP server (`tests.fakes.mcp_server`) as a process of its own on a
free port. One process serves a whole test module (starting one costs
seconds); the `mcp_server` fixture resets it before each test (no calls seen,
the first schemas) and closes this process's pooled sessions after it. A test
that kills its server starts its own (`start_mcp_server`). The test reads what
the server saw through its `/state` route."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.helpers import wait_for
from tests.processes import Proc, _base_env, _spawn, free_port, port_open


class McpTestServer:
    def __init__(self, proc: Proc, port: int) -> None:
        self.proc = proc
        self.port = port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def state(self) -> dict[str, Any]:
        return httpx2.get(f"http://127.0.0.1:{self.port}/state", timeout=5).json()

    def calls_of(self, tool: str) -> list[dict[str, Any]]:
        return [c for c in self.state()["calls"] if c["tool"] == tool]

    def change_lookup_schema(self) -> None:
        httpx2.post(f"http://127.0.0.1:{self.port}/variant", timeout=5).raise_for_status()

    def queue_verdicts(self, *answers: dict[str, Any]) -> None:
        """Offer the `verify` check tool, answering these in turn."""
        httpx2.post(f"http://127.0.0.1:{self.port}/verdicts", json=list(answers),
                    timeout=5).raise_for_status()

    def reset(self) -> None:
        httpx2.post(f"http://127.0.0.1:{self.port}/reset", timeout=5).raise_for_status()


def start_mcp_server(log_dir: Path) -> McpTestServer:
    port = free_port()
    proc = _spawn(f"mcp-{port}", [sys.executable, "-m", "tests.fakes.mcp_server", str(port)],
                  env=_base_env(), log_dir=log_dir)
    try:
        wait_for(lambda: port_open("127.0.0.1", port) or not proc.alive(), timeout=30,
                 message="the MCP test server to listen")
    except BaseException:
        proc.kill()
        raise
    assert proc.alive(), proc.log_tail()
    return McpTestServer(proc, port)


@pytest.fixture(scope="module")
def mcp_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[McpTestServer]:
    server = start_mcp_server(tmp_path_factory.mktemp("mcp"))
    try:
        yield server
    finally:
        server.proc.kill()


@pytest.fixture
def mcp_sessions() -> Iterator[None]:
    """No pooled MCP session (nor stdio server process) outlives the test."""
    from tools_app.mcp.connections import close_all

    try:
        yield
    finally:
        close_all()


@pytest.fixture
def mcp_server(mcp_process: McpTestServer, mcp_sessions: None) -> McpTestServer:
    if not mcp_process.proc.alive():
        raise AssertionError(f"the MCP test server died:\n{mcp_process.proc.log_tail()}")
    mcp_process.reset()
    return mcp_process
