"""Run by tests/interop/test_older_clients.py under the Python SDK 1.x
(`.cache/venv-mcp1`): connects to the URL given, lists tools, calls the
tool given with progress, reads logging/setLevel, and prints one JSON line
with what it saw, including every exception the SDK handed to the
application's message handler (a stream event it could not parse)."""

import json
import sys

import anyio
import mcp
from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


async def main(url: str, tool: str, arguments: str) -> None:
    seen = {"sdk": mcp.__name__, "errors": [], "progress": []}

    async def on_message(message):
        if isinstance(message, Exception):
            seen["errors"].append(repr(message)[:300])

    async def on_progress(progress, total, message):
        seen["progress"].append(progress)

    with anyio.fail_after(60):
        async with streamablehttp_client(url) as (read, write, _):
            async with ClientSession(read, write, message_handler=on_message) as session:
                init = await session.initialize()
                seen["version"] = init.protocolVersion
                tools = await session.list_tools()
                seen["tools"] = sorted(tool.name for tool in tools.tools)
                result = await session.call_tool(
                    tool, json.loads(arguments), progress_callback=on_progress
                )
                seen["is_error"] = result.isError
                seen["text"] = [c.text for c in result.content if c.type == "text"]
                # Let anything still on its way arrive.
                await anyio.sleep(0.3)
    print(json.dumps(seen))


anyio.run(main, *sys.argv[1:4])
