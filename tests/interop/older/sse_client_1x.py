"""Run by tests/interop/test_sse_clients.py under the Python SDK 1.x
(`.cache/venv-mcp1`): connects to the gateway's older HTTP+SSE endpoint
(the URL given, `.../sse`) with `mcp.client.sse.sse_client`, and prints one
JSON line with what it saw: the agreed version, every tool listed, a call's
text, an unknown tool's error, progress, a sampling round trip, a log
message, per-session state, and every exception the SDK handed to the
application's message handler (an event it could not parse)."""

import json
import sys
import uuid

import anyio
import mcp.types as types
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.shared.exceptions import McpError

MAX_PAGES = 50


async def main(url: str) -> None:
    seen = {"errors": [], "progress": [], "sampling": [], "logs": [], "notifications": []}
    sampled = f"sampled-by-1x-{uuid.uuid4().hex[:8]}"

    async def on_message(message):
        if isinstance(message, Exception):
            seen["errors"].append(repr(message)[:300])
        else:
            seen["notifications"].append(type(message).__name__)

    async def on_progress(progress, total, message):
        seen["progress"].append(progress)

    async def on_sampling(context, params: types.CreateMessageRequestParams):
        content = params.messages[0].content
        seen["sampling"].append(content.text if isinstance(content, types.TextContent) else repr(content))
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=sampled), model="junction-1x"
        )

    async def on_log(params: types.LoggingMessageNotificationParams):
        seen["logs"].append(params.data)

    def texts(result: types.CallToolResult) -> list[str]:
        return [c.text for c in result.content if c.type == "text"]

    with anyio.fail_after(60):
        async with sse_client(url, sse_read_timeout=60) as (read, write):
            async with ClientSession(
                read,
                write,
                message_handler=on_message,
                sampling_callback=on_sampling,
                logging_callback=on_log,
            ) as session:
                init = await session.initialize()
                seen["version"] = init.protocolVersion
                seen["server"] = init.serverInfo.name
                names: list[str] = []
                cursor = None
                for _ in range(MAX_PAGES):
                    page = await session.list_tools(cursor=cursor)
                    names.extend(t.name for t in page.tools)
                    cursor = page.nextCursor
                    if cursor is None:
                        break
                seen["tools"] = sorted(names)

                added = await session.call_tool("demo__add", {"a": 19, "b": 23})
                seen["add"] = {"is_error": added.isError, "text": texts(added)}

                try:
                    unknown = await session.call_tool("demo__no_such_tool", {})
                    seen["unknown"] = {"result": unknown.model_dump(mode="json")}
                except McpError as error:
                    seen["unknown"] = {"code": error.error.code, "message": error.error.message}

                slow = await session.call_tool(
                    "demo__slow", {"steps": 3, "delay_ms": 50}, progress_callback=on_progress
                )
                seen["slow"] = {"is_error": slow.isError, "text": texts(slow)}

                asked = await session.call_tool("private__ask_model", {"prompt": "what is 1x?"})
                seen["ask"] = {"is_error": asked.isError, "text": texts(asked), "sampled": sampled}

                logged = await session.call_tool("demo__log", {"level": "warning", "data": {"from": "1x"}})
                seen["log"] = {"is_error": logged.isError, "text": texts(logged)}

                key = f"k-{uuid.uuid4().hex[:8]}"
                await session.call_tool("private__remember", {"key": key, "value": "one-x"})
                recalled = await session.call_tool("private__recall", {"key": key})
                seen["recall"] = {"is_error": recalled.isError, "text": texts(recalled)}
                # Let anything still on its way arrive.
                await anyio.sleep(0.3)
    print(json.dumps(seen))


anyio.run(main, sys.argv[1])
