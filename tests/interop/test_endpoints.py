"""`[endpoints.NAME]` with real clients: the Python SDK over Streamable
HTTP at `/mcp/NAME` and over the older HTTP+SSE transport at
`/sse/NAME`, and the TypeScript SDK's `SSEClientTransport`, each seeing
only the endpoint's mounts (the gateway's demo server per session and
server-everything), while a client of `/mcp` sees every mount. A tool of
another mount is unknown there (-32602), as a tool of no mount is."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from conftest import Gateway, node_bin
from test_relay import Peer, connect, dump, list_all_tools, text_of
from test_sse_clients import OLDER, TS_SDK, assert_sessions_end, connect_sse, demo_config, run_client, sse_events

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings(r"ignore:The logging capability is deprecated as of 2026-07-28"),
]

TEST_TIMEOUT_S = 120.0  # one whole test body

ENDPOINT = '\n[endpoints.ide]\nmounts = ["private", "everything"]\n'


def mounts_of(names: set[str]) -> set[str]:
    return {name.split("__", 1)[0] for name in names}


async def assert_serves_the_endpoint(c: Client) -> None:
    names = {tool.name for tool in await list_all_tools(c)}
    assert mounts_of(names) == {"private", "everything"}, sorted(names)
    result = await c.call_tool("everything__echo", {"message": "through ide"})
    assert not result.is_error and "through ide" in text_of(result), dump(result)
    result = await c.call_tool("private__add", {"a": 2, "b": 3})
    assert text_of(result) == "5", dump(result)
    with pytest.raises(MCPError) as refused:
        await c.call_tool("demo__echo", {"message": "not here"})
    assert refused.value.error.code == types.INVALID_PARAMS, dump(refused.value.error)
    resources = await c.list_resources()
    uris = {str(resource.uri) for resource in resources.resources}
    assert uris and all(uri.startswith(("private+", "everything+")) for uri in uris), sorted(uris)


async def test_python_clients_see_only_the_endpoints_mounts(start_gateway) -> None:
    gateway: Gateway = start_gateway(demo_config(everything=True) + ENDPOINT)
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(f"{gateway.mcp_url}/ide", Peer("ide")) as c:
            await assert_serves_the_endpoint(c)
        async with connect_sse(f"{gateway.base_url}/sse/ide") as c:
            await assert_serves_the_endpoint(c)
        async with connect(gateway.mcp_url, Peer("main")) as c:
            names = {tool.name for tool in await list_all_tools(c)}
            assert mounts_of(names) == {"demo", "private", "everything"}, sorted(names)
        async with httpx.AsyncClient(trust_env=False, timeout=10.0) as http:
            nowhere = await http.get(f"{gateway.base_url}/sse/nowhere")
        assert nowhere.status_code == 404, nowhere.text
        assert 'no endpoint named "nowhere"' in nowhere.text, nowhere.text
    await assert_sessions_end(gateway)


async def test_typescript_sse_client_on_an_endpoint(start_gateway) -> None:
    """The TypeScript SDK's `SSEClientTransport` on `/sse/ide`, which
    serves the demo mounts and not server-everything: their tools only,
    a call and a sampling round trip through them."""
    if not (TS_SDK / "package.json").is_file():
        pytest.fail(f"{TS_SDK} missing: run scripts/install-test-deps.sh")
    endpoint = '\n[endpoints.ide]\nmounts = ["demo", "private"]\n'
    gateway: Gateway = start_gateway(demo_config(everything=True) + endpoint)
    command = [node_bin(), str(OLDER / "sse_client_ts.cjs"), str(TS_SDK), f"{gateway.base_url}/sse/ide"]
    seen = await anyio.to_thread.run_sync(run_client, command)
    assert mounts_of(set(seen["tools"])) == {"demo", "private"}, seen["tools"]
    assert seen["add"] == {"isError": False, "text": ["42"]}, seen
    assert seen["sampling"] == ["what is ts?"], seen
    assert seen["errors"] == [], seen
    await assert_sessions_end(gateway)


async def test_a_removed_endpoints_older_transport_stream_ends(start_gateway, tmp_path: Path) -> None:
    """An HTTP+SSE client on `/sse/ide` whose endpoint a reload removes:
    its stream ends (the client reconnects and learns the endpoint is
    gone), and its session with it, rather than living on with nothing
    listed."""
    # Sleeping soon makes the sweep that ends sessions run often.
    base = demo_config().replace('listen = "127.0.0.1:0"\n', 'listen = "127.0.0.1:0"\nsession_hibernate_after = "1s"\n', 1)
    config = base + '\n[endpoints.ide]\nmounts = ["private"]\n'
    gateway: Gateway = start_gateway(config)
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(30.0)) as http:
            url = f"{gateway.base_url}/sse/ide"
            async with http.stream("GET", url, headers={"Accept": "text/event-stream"}) as stream:
                events = sse_events(stream)
                kind, post_path = await anext(events)
                assert kind == "endpoint" and post_path.startswith("/sse/ide?sessionId="), (kind, post_path)
                init = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
                }
                resp = await http.post(f"{gateway.base_url}{post_path}", json=init)
                assert resp.status_code == 202, resp.text[:300]
                kind, data = await anext(events)
                assert json.loads(data).get("id") == 1, data[:300]
                resp = await http.post(f"{gateway.base_url}{post_path}", json={"jsonrpc": "2.0", "method": "notifications/initialized"})
                assert resp.status_code == 202, resp.text[:300]

                # The first gateway's config file (see conftest's start_gateway).
                (tmp_path / "junction-0.toml").write_text(base)
                with anyio.fail_after(20.0):
                    async for _ in events:
                        pass  # until the stream ends
        await assert_sessions_end(gateway)
