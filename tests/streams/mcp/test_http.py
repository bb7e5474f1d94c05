"""Agent tools over streamable HTTP: bearer token required, same answers as stdio."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
from conftest import REPO, server_env
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

SHOP = "/home/dev/shop"
BILLING = "ci-billing-2025-11-24"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def http_server(data_dir: Path) -> Iterator[tuple[str, str]]:
    """`recall mcp --http` as the follow-up session of the shop workspace; (url, token)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "streams", "--data-dir", str(data_dir), "mcp",
         "--http", f"127.0.0.1:{port}", "--session", "ci-followup-2025-12-01", "--cwd", SHOP],
        env=server_env(), cwd=str(REPO), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    try:
        token = ""
        assert process.stderr is not None
        for line in process.stderr:  # the server announces its token before it listens
            if "bearer token" in line:
                token = line.split("bearer token ", 1)[1].split(" ", 1)[0]
                break
        assert token, "server did not print its token"
        # Keep draining stderr so the server's log can never fill the pipe and stall it.
        threading.Thread(target=process.stderr.read, daemon=True).start()
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            assert time.monotonic() < deadline and process.poll() is None, "server did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", token
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def _calls(url: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    headers = {"Authorization": f"Bearer {token}"}
    with anyio.fail_after(30):
        async with httpx2.AsyncClient(headers=headers, timeout=20) as client, \
                streamable_http_client(url, http_client=client) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            out = []
            for name, arguments in calls:
                result = await session.call_tool(name, arguments)
                block = result.content[0]
                assert isinstance(block, types.TextContent)
                out.append(block.text)
            return out


def test_token_is_stored_owner_only_and_matches_the_announced_one(
        http_server: tuple[str, str], data_dir: Path) -> None:
    path = data_dir / "mcp-token"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_text().strip() == http_server[1]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"},
                                     {"Authorization": "Basic abc"}])
def test_requests_without_the_token_are_refused(http_server: tuple[str, str],
                                                headers: dict[str, str]) -> None:
    url, _ = http_server
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = httpx2.post(url, json=body, headers={
        **headers, "Accept": "application/json, text/event-stream"}, timeout=10)
    assert response.status_code == 401
    assert "session_search" not in response.text


def test_tools_answer_over_http(http_server: tuple[str, str]) -> None:
    url, token = http_server
    search, trace, hidden, missing = anyio.run(_calls, url, token, [
        ("session_search", {"query": "EUR", "event_surfaces": ["shadowed", "current"]}),
        ("session_event_trace", {"session_id": BILLING, "seq": 7}),
        ("session_trace", {"session_id": "infra-kafka-2025-11-26"}),
        ("session_trace", {"session_id": "no-such-session"}),
    ])
    assert search == """Session search results (2):

1. Session ci-billing-2025-11-24 — Fix the failing CI job on main
   Created: 2025-11-24T16:00:00.000Z
   Parent: root
   Availability: persisted
   Best match: seq 24 | assistant/message | shadowed | 2025-11-24T16:00:13.000Z
   Snippet: Fixed: `shop/rates.py` had lost its EUR rate, so `Invoice.total(currency='EUR')` raised `KeyError: 'EUR'`. I restored the rate; the whole suite passes (14 tests).

2. Session docs-quickstart-2025-11-25 — Rewrite the README quickstart
   Created: 2025-11-25T16:00:00.000Z
   Parent: root
   Availability: persisted
   Best match: seq 3 | assistant/message | current | 2025-11-25T16:00:03.000Z
   Snippet: Here is a new quickstart: install with `pip install shop`, then run `shop serve`. I also documented the EUR currency setting."""
    # The stack trace was pruned (seq 28) and then compacted (seq 31): both are visible.
    assert trace == (
        "Target: session ci-billing-2025-11-24 | seq 7 | tool/result | shadowed | "
        "2025-11-24T16:00:04.500Z\nReplaced by: seq 28\nReplacement chain: seq 28, seq 31\n"
        "Events replaced by target: none\n"
        "Events cited directly as sources: none (provenance unrecorded)\n"
        "Direct derived events: seq 28")
    assert hidden == missing == "Error: session target is outside the caller workspace"
