"""`forward_headers` on a `per_session` Streamable HTTP mount, against a
real upstream: fixtures/headers_server.py (Python `mcp` 2.3 `MCPServer`),
whose tool answers with the `Authorization` header of the HTTP request that
carried the call, driven by Python `mcp` clients each sending its own
headers to the gateway.

Each client's upstream session of the forwarding mount must carry that
client's own value (a client that sent none: the mount's own `headers`
value); a shared mount of the same server keeps its own header for
everyone; a table entry forwards a client header under another name.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conftest import LOOPBACK_V4_HEX, free_port, lone_error, tcp_listeners, toml_str

pytestmark = pytest.mark.anyio

FIXTURE = Path(__file__).parent / "fixtures" / "headers_server.py"
TOOL = "authorization"  # answers the Authorization header its call came with
TEST_TIMEOUT_S = 60.0  # one whole test body
CALL_TIMEOUT_S = 30.0
START_TIMEOUT_S = 20.0  # the fixture, until it listens
STOP_TIMEOUT_S = 10.0


@pytest.fixture
def headers_upstream(tmp_path: Path) -> Iterator[str]:
    """The MCP URL of a listening headers_server.py on 127.0.0.1; stopped by pid.
    (Its `GET` answers 400, not the 405 `python_http_fixture` waits for, so
    readiness is its listening socket.)"""
    port = free_port()
    log = tmp_path / "headers-server.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, str(FIXTURE), str(port)],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=str(tmp_path),
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (listeners := tcp_listeners(port)):
            if proc.poll() is not None:
                pytest.fail(f"headers fixture exited with {proc.returncode}: {log.read_text(errors='replace')}")
            if time.monotonic() > deadline:
                pytest.fail(f"headers fixture not listening on 127.0.0.1:{port} within {START_TIMEOUT_S}s")
            time.sleep(0.1)
        assert listeners == [LOOPBACK_V4_HEX], f"headers fixture listens beyond 127.0.0.1: {listeners}"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)
        print(f"---- headers fixture pid {proc.pid} exit {proc.returncode}, output:\n{log.read_text(errors='replace')}")


def config(mounts: dict[str, str]) -> str:
    """Gateway config: each mount's name and the TOML lines of its table."""
    text = '[server]\nlisten = "127.0.0.1:0"\n'
    for name, body in mounts.items():
        text += f"\n[mounts.{name}]\n{body}"
    return text


@asynccontextmanager
async def client(url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    """An `mcp` client of the gateway sending `headers` on every request (its
    `initialize` included)."""
    async with httpx2.AsyncClient(
        headers=headers, timeout=httpx2.Timeout(CALL_TIMEOUT_S), trust_env=False
    ) as http:
        try:
            async with Client(
                streamable_http_client(url, http_client=http), mode="auto", read_timeout_seconds=CALL_TIMEOUT_S
            ) as c:
                yield c
        except BaseExceptionGroup as group:
            inner = lone_error(group)
            if inner is None:
                raise
            raise inner from None


async def seen_upstream(c: Client, mount: str) -> str:
    """The Authorization header `mount`'s upstream got with this client's call."""
    result = await c.call_tool(f"{mount}__{TOOL}", {})
    assert not result.is_error, f"{mount}__{TOOL} failed: {result.model_dump_json()}"
    [content] = result.content
    assert isinstance(content, types.TextContent), f"{mount}__{TOOL}: {result.model_dump_json()}"
    return content.text


async def tool_names(c: Client) -> set[str]:
    return {tool.name for tool in (await c.list_tools()).tools}


async def test_each_client_reaches_its_own_upstream_session_with_its_own_token(
    headers_upstream: str, start_gateway
) -> None:
    url = toml_str(headers_upstream)
    gateway = start_gateway(
        config(
            {
                "mine": (
                    f"url = {url}\n"
                    'isolation = "per_session"\n'
                    'headers = { Authorization = "Bearer mount" }\n'
                    'forward_headers = ["Authorization"]\n'
                ),
                "team": f'url = {url}\nheaders = {{ Authorization = "Bearer team" }}\n',
            }
        )
    )
    clients = {
        "alice": {"Authorization": "Bearer alice"},
        "bob": {"Authorization": "Bearer bob"},
        "anonymous": {},
    }
    # What each client's calls must reach the upstream with, per mount.
    expected = {
        "alice": {"mine": "Bearer alice", "team": "Bearer team"},
        "bob": {"mine": "Bearer bob", "team": "Bearer team"},
        "anonymous": {"mine": "Bearer mount", "team": "Bearer team"},
    }
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with AsyncExitStack() as stack:
            # All three sessions open at once: their upstream sessions of
            # `mine` live side by side on the one server.
            sessions = {
                who: await stack.enter_async_context(client(gateway.mcp_url, headers))
                for who, headers in clients.items()
            }
            for who, c in sessions.items():
                names = await tool_names(c)
                for mount in ("mine", "team"):
                    assert f"{mount}__{TOOL}" in names, f"{who}: {mount}__{TOOL} not listed: {sorted(names)}"
            # Twice, in both orders: the first call opens each client's
            # upstream session, the second reuses it; neither may cross over.
            seen: dict[str, dict[str, str]] = {}
            for order in (list(sessions), list(reversed(sessions))):
                for who in order:
                    seen[who] = {mount: await seen_upstream(sessions[who], mount) for mount in ("mine", "team")}
                assert seen == expected, f"upstream saw {seen}, expected {expected}"


async def test_a_table_entry_forwards_a_client_header_under_the_upstream_name(
    headers_upstream: str, start_gateway
) -> None:
    gateway = start_gateway(
        config(
            {
                "mine": (
                    f"url = {toml_str(headers_upstream)}\n"
                    'isolation = "per_session"\n'
                    'headers = { Authorization = "Bearer mount" }\n'
                    'forward_headers = { Authorization = "X-Mine-Token" }\n'
                ),
            }
        )
    )
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with (
            client(gateway.mcp_url, {"X-Mine-Token": "t1"}) as renamed,
            # Its own Authorization is not what the mount forwards.
            client(gateway.mcp_url, {"Authorization": "Bearer alice"}) as other,
        ):
            assert f"mine__{TOOL}" in await tool_names(renamed)
            assert await seen_upstream(renamed, "mine") == "t1"
            assert await seen_upstream(other, "mine") == "Bearer mount"


async def test_a_urls_user_and_password_are_the_mounts_one_authorization(
    headers_upstream: str, start_gateway
) -> None:
    """A user name and password in a mount's URL are its `Authorization`
    (HTTP Basic): a client's forwarded one replaces it, and no request
    carries both. reqwest added its own Basic header from the URL beside
    the forwarded one on `initialize`, `GET` and `DELETE` (the server read
    the first), while tool calls carried only the client's."""
    credentialed = headers_upstream.replace("http://", "http://sh%40red:pa%3Ass@", 1)
    basic = "Basic " + base64.b64encode(b"sh@red:pa:ss").decode()
    gateway = start_gateway(
        config(
            {
                "mine": f'url = {toml_str(credentialed)}\nisolation = "per_session"\nforward_headers = ["Authorization"]\n',
                "team": f"url = {toml_str(credentialed)}\n",
            }
        )
    )
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with client(gateway.mcp_url, {"Authorization": "Bearer alice"}) as alice:
            assert await seen_upstream(alice, "mine") == "Bearer alice"
            assert await seen_upstream(alice, "team") == basic
            result = await alice.call_tool("team__authorizations_seen", {})
            assert not result.is_error, result.model_dump_json()
            [content] = result.content
            assert isinstance(content, types.TextContent), result.model_dump_json()
            seen = json.loads(content.text)
    twice = [(method, values) for method, values in seen if len(values) != 1]
    assert not twice, f"requests without exactly one Authorization: {twice}"
    assert {values[0] for _, values in seen} == {basic, "Bearer alice"}, seen
