"""MCP Apps (the `io.modelcontextprotocol/ui` extension) through a
namespaced mount (fixtures/apps_server.py).

A host renders a tool's UI only from a `ui://` URI, read from the tool's
`_meta.ui.resourceUri` (or the older `_meta["ui/resourceUri"]`), then
reads that resource. Under a namespace the UI must keep its scheme
(`ui://{namespace}/...`, not `{namespace}+ui://...`), be named the same in
the tool, in `resources/list` and in call results, and read back from its
mount.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from conftest import toml_str
from test_relay import Peer, connect, dump, list_all_resources, list_all_tools, text_of

pytestmark = pytest.mark.anyio

FIXTURE = Path(__file__).parent / "fixtures" / "apps_server.py"
UI_URI = "ui://apps/weather/forecast"  # the fixture's ui://weather/forecast under `apps`


@pytest.mark.parametrize("isolation", ["shared", "per_session"])
async def test_an_apps_ui_keeps_its_scheme_and_reads_back(start_gateway, isolation: str) -> None:
    gateway = start_gateway(
        '[server]\nlisten = "127.0.0.1:0"\n\n'
        f"[mounts.apps]\ncommand = {toml_str(sys.executable)}\n"
        f"args = [{toml_str(str(FIXTURE))}]\nisolation = {toml_str(isolation)}\n"
    )
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
