"""MCP Apps (the `io.modelcontextprotocol/ui` extension) through a
namespaced mount (fixtures/apps_server.py).

A host renders a tool's UI only from a `ui://` URI, read from the tool's
`_meta.ui.resourceUri` (or the older `_meta["ui/resourceUri"]`), then
reads that resource. Under a namespace the UI must keep its scheme
(`ui://{namespace}/...`, not `{namespace}+ui://...`), be named the same in
the tool, in `resources/list` and in call results, and read back from its
mount. Apps servers list their UI tools only to hosts that declare the
extension: a per-session upstream is told what its own client declared,
a shared one what any client may (the gateway declares the extension).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from conftest import toml_str
from test_relay import Peer, connect, dump, list_all_resources, list_all_tools, text_of

pytestmark = pytest.mark.anyio

FIXTURE = Path(__file__).parent / "fixtures" / "apps_server.py"
UI_URI = "ui://apps/weather/forecast"  # the fixture's ui://weather/forecast under `apps`


def apps_config(isolation: str) -> str:
    return (
        '[server]\nlisten = "127.0.0.1:0"\n\n'
        f"[mounts.apps]\ncommand = {toml_str(sys.executable)}\n"
        f"args = [{toml_str(str(FIXTURE))}]\nisolation = {toml_str(isolation)}\n"
    )


async def test_an_apps_ui_keeps_its_scheme_and_reads_back(start_gateway) -> None:
    """A shared mount (told every extension the gateway relays, Apps
    included) lists the UI tool to every client."""
    gateway = start_gateway(apps_config("shared"))
    with anyio.fail_after(60):
        async with connect(gateway.mcp_url, Peer("A")) as c:
            tools = {t.name: t for t in await list_all_tools(c)}
            meta = tools["apps__forecast"].meta or {}
            assert meta.get("ui", {}).get("resourceUri") == UI_URI, dump(tools["apps__forecast"])
            assert meta.get("ui", {}).get("prefersBorder") is True, dump(tools["apps__forecast"])
            assert meta.get("ui/resourceUri") == UI_URI, dump(tools["apps__forecast"])

            listed = {str(r.uri): r for r in await list_all_resources(c)}
            assert UI_URI in listed, list(listed)
            assert listed[UI_URI].mime_type == "text/html;profile=mcp-app"

            result = await c.call_tool("apps__forecast", {})
            assert text_of(result) == "sunny", dump(result)
            assert (result.meta or {}).get("ui", {}).get("resourceUri") == UI_URI, dump(result)

            read = await c.read_resource(UI_URI)
            page = read.contents[0]
            assert str(page.uri) == UI_URI, dump(read)
            assert page.mime_type == "text/html;profile=mcp-app", dump(read)
            assert "sunny" in page.text, dump(read)


HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
APPS_CAPABILITIES = {"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}}


def answer_of(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer in a JSON or SSE body."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return response.json()
    for line in response.text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            message = json.loads(line[5:])
            if "id" in message:
                return message
    raise AssertionError(f"no answer in {response.text!r}")


async def test_a_per_session_upstream_is_told_its_clients_apps_extension(start_gateway) -> None:
    """A per-session upstream is opened with its client's own capabilities:
    an Apps host gets the UI tool, another client the text one."""
    gateway = start_gateway(apps_config("per_session"))
    with anyio.fail_after(60):
        async with connect(gateway.mcp_url, Peer("plain")) as c:
            names = [t.name for t in await list_all_tools(c)]
            assert names == ["apps__forecast_text"], names

        async with httpx.AsyncClient(trust_env=False, timeout=20) as http:
            init = {
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": APPS_CAPABILITIES,
                           "clientInfo": {"name": "apps-host", "version": "1"}},
            }
            response = await http.post(gateway.mcp_url, headers=HEADERS, json=init)
            assert response.status_code == 200, response.text
            session = {**HEADERS, "mcp-session-id": response.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (await http.post(gateway.mcp_url, headers=session, json=initialized)).status_code == 202

            async def rpc(id_: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
                message = {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}
                response = await http.post(gateway.mcp_url, headers=session, json=message)
                assert response.status_code == 200, response.text
                answer = answer_of(response)
                assert "result" in answer, answer
                return answer["result"]

            tools = {t["name"]: t for t in (await rpc(2, "tools/list", {}))["tools"]}
            assert list(tools) == ["apps__forecast"], list(tools)
            assert tools["apps__forecast"]["_meta"]["ui"]["resourceUri"] == UI_URI, tools
            called = await rpc(3, "tools/call", {"name": "apps__forecast", "arguments": {}})
            assert called["_meta"]["ui"]["resourceUri"] == UI_URI, called
            read = await rpc(4, "resources/read", {"uri": UI_URI})
            assert read["contents"][0]["uri"] == UI_URI and "sunny" in read["contents"][0]["text"], read
