"""Junction fronting @modelcontextprotocol/server-everything (stdio), driven by
the official Python `mcp` 2.x client in its default `auto` mode (probes
`server/discover`, falls back to `initialize`).

Each test runs twice: mount isolation `per_session` and `shared`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from conftest import Gateway, everything_config, everything_entry, everything_stdio_command, lone_error

pytestmark = pytest.mark.anyio

MOUNT = "everything"
TOOL_PREFIX = f"{MOUNT}__"
URI_PREFIX = f"{MOUNT}+"

CALL_TIMEOUT_S = 30.0  # one MCP request
TEST_TIMEOUT_S = 90.0  # one whole client conversation
MAX_PAGES = 50


@asynccontextmanager
async def connect(target: str | StdioServerParameters, **kwargs: Any) -> AsyncIterator[Client]:
    try:
        async with Client(target, mode="auto", read_timeout_seconds=CALL_TIMEOUT_S, **kwargs) as client:
            yield client
    except BaseExceptionGroup as group:
        inner = lone_error(group)
        if inner is None:
            raise
        raise inner from None


async def _sampling_stub(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="stub"), model="stub")


async def _elicitation_stub(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="decline")


async def _roots_stub(context: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[])


# Declares sampling, elicitation and roots (the Python client derives its
# capabilities from the callbacks it is given).
ALL_CAPABILITIES: dict[str, Any] = dict(
    sampling_callback=_sampling_stub, elicitation_callback=_elicitation_stub, list_roots_callback=_roots_stub
)


def upstream_params() -> StdioServerParameters:
    command, args = everything_stdio_command()
    return StdioServerParameters(command=command, args=args)


async def all_pages(fetch) -> list[Any]:
    """Follow `nextCursor` to the end (bounded), concatenating items."""
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await fetch(cursor)
        items.extend(page)
        cursor = page.cursor
        if cursor is None:
            return items
    pytest.fail(f"listing did not end within {MAX_PAGES} pages")


class _Page(list):
    cursor: str | None = None


def _page(items, cursor) -> _Page:
    p = _Page(items)
    p.cursor = cursor
    return p


async def list_all_tools(c: Client) -> list[types.Tool]:
    async def fetch(cursor):
        r = await c.list_tools(cursor=cursor)
        return _page(r.tools, r.next_cursor)

    return await all_pages(fetch)


async def list_all_resources(c: Client) -> list[types.Resource]:
    async def fetch(cursor):
        r = await c.list_resources(cursor=cursor)
        return _page(r.resources, r.next_cursor)

    return await all_pages(fetch)


async def list_all_prompts(c: Client) -> list[types.Prompt]:
    async def fetch(cursor):
        r = await c.list_prompts(cursor=cursor)
        return _page(r.prompts, r.next_cursor)

    return await all_pages(fetch)


def texts(result: types.CallToolResult) -> list[str]:
    return [b.text for b in result.content if isinstance(b, types.TextContent)]


def dump(model: Any) -> str:
    return json.dumps(model.model_dump(mode="json", by_alias=True, exclude_none=True), indent=1)[:4000]


# ---------------------------------------------------------------------- HTTP


def test_healthz_and_readyz(everything_gateway: Gateway) -> None:
    with httpx.Client(trust_env=False, timeout=5.0) as http:
        h = http.get(f"{everything_gateway.base_url}/healthz")
        assert h.status_code == 200, h.text
        r = http.get(f"{everything_gateway.base_url}/readyz")
        assert r.status_code == 200, r.text
        body = r.json()  # must be JSON
        assert MOUNT in json.dumps(body), f"/readyz body does not name mount {MOUNT!r}: {r.text}"


# --------------------------------------------------------------------- tools


async def test_tools_are_namespaced(everything_gateway: Gateway) -> None:
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(everything_gateway.mcp_url) as c:
            tools = await list_all_tools(c)
    names = [t.name for t in tools]
    assert f"{TOOL_PREFIX}echo" in names, names
    assert f"{TOOL_PREFIX}get-sum" in names, names
    bare = [n for n in names if not n.startswith(TOOL_PREFIX)]
    assert not bare, f"un-namespaced tool names: {bare}"
    assert len(names) == len(set(names)), f"duplicate tool names: {names}"


async def test_tools_match_upstream(everything_gateway: Gateway, isolation: str) -> None:
    """The gateway lists the upstream's tools renamed, schemas intact.

    server-everything registers some tools only for clients that declared
    sampling / elicitation / roots; this client declares none. A per_session
    upstream is opened with the downstream client's capabilities, so the
    listing must be exactly what the same client sees directly. A shared
    upstream has one set of capabilities for all sessions, so its listing may
    be anything between the no-capability and the all-capability listings.
    """
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(upstream_params()) as direct:
            upstream = {t.name: t for t in await list_all_tools(direct)}
        async with connect(upstream_params(), **ALL_CAPABILITIES) as direct_full:
            upstream_full = {t.name: t for t in await list_all_tools(direct_full)}
        async with connect(everything_gateway.mcp_url) as c:
            via_gateway = {t.name: t for t in await list_all_tools(c)}
    got = set(via_gateway)
    expected = {TOOL_PREFIX + n for n in upstream}
    if isolation == "per_session":
        assert got == expected, (
            f"client declared no capabilities; missing: {sorted(expected - got)}; "
            f"listed but absent from this session's upstream: {sorted(got - expected)}"
        )
    else:
        allowed = {TOOL_PREFIX + n for n in upstream_full}
        assert expected <= got <= allowed, f"missing: {sorted(expected - got)}; unknown: {sorted(got - allowed)}"
    for name, tool in upstream_full.items():
        got_tool = via_gateway.get(TOOL_PREFIX + name)
        if got_tool is None:
            continue
        assert got_tool.input_schema == tool.input_schema, f"{name}: inputSchema changed\n{dump(tool)}\n{dump(got_tool)}"
        assert got_tool.output_schema == tool.output_schema, f"{name}: outputSchema changed"
        assert got_tool.description == tool.description, f"{name}: description changed"


async def test_call_get_sum(everything_gateway: Gateway) -> None:
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(everything_gateway.mcp_url) as c:
            result = await c.call_tool(f"{TOOL_PREFIX}get-sum", {"a": 2, "b": 3})
    assert not result.is_error, dump(result)
    assert any("5" in t for t in texts(result)), dump(result)


async def test_call_echo(everything_gateway: Gateway) -> None:
    message = "hello through junction ✓"
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(everything_gateway.mcp_url) as c:
            result = await c.call_tool(f"{TOOL_PREFIX}echo", {"message": message})
    assert not result.is_error, dump(result)
    assert any(message in t for t in texts(result)), dump(result)


async def test_unnamespaced_tool_is_rejected(everything_gateway: Gateway) -> None:
    """`echo` without its mount prefix names no tool of the gateway."""
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(everything_gateway.mcp_url) as c:
            try:
                result = await c.call_tool("echo", {"message": "x"})
            except MCPError as e:
                assert e.code in (types.INVALID_PARAMS, types.METHOD_NOT_FOUND), e.error
            else:
                assert result.is_error, f"unprefixed `echo` was served: {dump(result)}"


async def test_tool_patterns_choose_what_the_mount_offers(start_gateway, isolation: str) -> None:
    """`include_tools` / `exclude_tools` against the real server: the tools
    they hide are neither listed nor callable, the others work as before."""
    config = everything_config(isolation) + 'include_tools = ["get-*", "echo"]\nexclude_tools = ["get-env"]\n'
    gateway = start_gateway(config)
    # A shared upstream declares every client capability (and lists the
    # tools gated on them); a per-session one this client's, none.
    like_the_upstream = ALL_CAPABILITIES if isolation == "shared" else {}
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(upstream_params(), **like_the_upstream) as direct:
            upstream = [t.name for t in await list_all_tools(direct)]
        async with connect(gateway.mcp_url) as c:
            names = sorted(t.name for t in await list_all_tools(c))
            expected = sorted(
                TOOL_PREFIX + n for n in upstream if (n.startswith("get-") or n == "echo") and n != "get-env"
            )
            assert names == expected, names
            assert f"{TOOL_PREFIX}get-sum" in names and f"{TOOL_PREFIX}echo" in names, names
            result = await c.call_tool(f"{TOOL_PREFIX}get-sum", {"a": 2, "b": 3})
            assert any("5" in t for t in texts(result)), dump(result)
            for hidden in ("get-env", "trigger-long-running-operation"):
                assert hidden in upstream, upstream
                with pytest.raises(MCPError) as refused:
                    await c.call_tool(f"{TOOL_PREFIX}{hidden}", {})
                assert refused.value.error.code == types.INVALID_PARAMS, refused.value.error
                assert "unknown tool" in refused.value.error.message, refused.value.error


async def test_fitted_tool_names_pass_the_client_rule_and_reach_the_real_server(start_gateway) -> None:
    """With a `.` separator every name breaks the rule LLM clients enforce
    (`^[A-Za-z0-9_-]{1,64}$`); `fit_tool_names` serves each as the README
    says: `.` as `_`, then `_` and the first 8 hex characters of the
    qualified name's SHA-256, which this test computes on its own. The
    real server answers under the fitted names."""
    config = everything_config("shared").replace(
        'listen = "127.0.0.1:0"\n', 'listen = "127.0.0.1:0"\nseparator = "."\nfit_tool_names = true\n'
    )
    gateway = start_gateway(config)
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(upstream_params(), **ALL_CAPABILITIES) as direct:
            upstream = [t.name for t in await list_all_tools(direct)]
        async with connect(gateway.mcp_url) as c:
            names = sorted(t.name for t in await list_all_tools(c))

            def fitted(name: str) -> str:
                qualified = f"{MOUNT}.{name}"
                digest = hashlib.sha256(qualified.encode()).hexdigest()[:8]
                return qualified.replace(".", "_")[:55] + "_" + digest

            assert names == sorted(fitted(n) for n in upstream), names
            assert all(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", n) for n in names), names
            result = await c.call_tool(fitted("get-sum"), {"a": 2, "b": 3})
            assert any("5" in t for t in texts(result)), dump(result)


async def test_two_sessions_in_a_row(everything_gateway: Gateway) -> None:
    """A second client session works after the first one ended (DELETE)."""
    with anyio.fail_after(TEST_TIMEOUT_S):
        for i in range(2):
            async with connect(everything_gateway.mcp_url) as c:
                result = await c.call_tool(f"{TOOL_PREFIX}get-sum", {"a": i, "b": 40})
                assert any(str(i + 40) in t for t in texts(result)), dump(result)


# ----------------------------------------------------------------- resources


async def test_resources_are_namespaced_and_read_back(everything_gateway: Gateway) -> None:
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(everything_gateway.mcp_url) as c:
            resources = await list_all_resources(c)
            assert resources, "gateway listed no resources"
            uris = [str(r.uri) for r in resources]
            bare = [u for u in uris if not u.startswith(URI_PREFIX)]
            assert not bare, f"un-namespaced resource URIs: {bare}"
            arch = f"{URI_PREFIX}demo://resource/static/document/architecture.md"
            assert arch in uris, uris
            for uri in uris:
                read = await c.read_resource(uri)
                assert read.contents, f"{uri}: no contents: {dump(read)}"
                for content in read.contents:
                    assert str(content.uri) == uri, f"read {uri} answered content uri {content.uri}"
            read = await c.read_resource(arch)
            text = read.contents[0]
            assert isinstance(text, types.TextResourceContents), dump(read)
            assert "Architecture" in text.text, text.text[:300]


# ------------------------------------------------------------------- prompts


async def test_prompts_are_namespaced_and_render(everything_gateway: Gateway) -> None:
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(everything_gateway.mcp_url) as c:
            prompts = await list_all_prompts(c)
            names = [p.name for p in prompts]
            bare = [n for n in names if not n.startswith(TOOL_PREFIX)]
            assert not bare, f"un-namespaced prompt names: {bare}"
            assert f"{TOOL_PREFIX}simple-prompt" in names, names
            assert f"{TOOL_PREFIX}args-prompt" in names, names

            simple = await c.get_prompt(f"{TOOL_PREFIX}simple-prompt", {})
            assert simple.messages, dump(simple)
            first = simple.messages[0].content
            assert isinstance(first, types.TextContent), dump(simple)
            assert first.text == "This is a simple prompt without arguments.", dump(simple)

            with_args = await c.get_prompt(f"{TOOL_PREFIX}args-prompt", {"city": "Reykjavik"})
            rendered = " ".join(
                m.content.text for m in with_args.messages if isinstance(m.content, types.TextContent)
            )
            assert "Reykjavik" in rendered, dump(with_args)


# ------------------------------------------------------------ resource links


async def test_resource_links_are_namespaced_and_readable(everything_gateway: Gateway) -> None:
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(everything_gateway.mcp_url) as c:
            result = await c.call_tool(f"{TOOL_PREFIX}get-resource-links", {"count": 3})
            assert not result.is_error, dump(result)
            links = [b for b in result.content if isinstance(b, types.ResourceLink)]
            assert len(links) == 3, dump(result)
            bare = [str(link.uri) for link in links if not str(link.uri).startswith(URI_PREFIX)]
            assert not bare, f"resource_link URIs not rewritten: {bare}"
            for link in links:
                uri = str(link.uri)
                read = await c.read_resource(uri)
                assert read.contents, f"{uri}: no contents: {dump(read)}"
                for content in read.contents:
                    assert str(content.uri) == uri, f"read {uri} answered content uri {content.uri}"


# ----------------------------------------------------------------- isolation


async def _wait_gone(gw: Gateway, needle: str, pids: set[int], timeout: float = 10.0) -> set[int]:
    """Wait (bounded) until none of `pids` is a live upstream of `gw`; return those still alive."""
    alive = pids & set(gw.child_pids(needle))
    with anyio.move_on_after(timeout):
        while alive:
            await anyio.sleep(0.1)
            alive = pids & set(gw.child_pids(needle))
    return alive


async def test_isolation_upstream_processes(everything_gateway: Gateway, isolation: str) -> None:
    """per_session: each downstream session gets its own upstream process, gone after the
    session ends. shared: every session uses the one upstream process."""
    needle = str(everything_entry())
    with anyio.fail_after(TEST_TIMEOUT_S):
        # A first session that only lists: the gateway discovers the mount for
        # this client's capability profile (one discovery process per profile,
        # kept for list_changed) without opening a per-session upstream.
        async with connect(everything_gateway.mcp_url) as warm:
            await list_all_tools(warm)
        baseline = everything_gateway.child_pids(needle)
        async with connect(everything_gateway.mcp_url) as a:
            await a.call_tool(f"{TOOL_PREFIX}get-sum", {"a": 1, "b": 1})
            async with connect(everything_gateway.mcp_url) as b:
                await b.call_tool(f"{TOOL_PREFIX}get-sum", {"a": 1, "b": 2})
                during = everything_gateway.child_pids(needle)
        if isolation == "shared":
            assert len(baseline) == 1, f"shared mount: expected 1 upstream process after discovery, saw {baseline}"
            assert during == baseline, f"shared mount spawned per-session upstreams: before {baseline}, during {during}"
        else:
            new = set(during) - set(baseline)
            assert len(new) == 2, f"per_session: two sessions, new upstream pids {sorted(new)} (before {baseline}, during {during})"
            left = await _wait_gone(everything_gateway, needle, new)
            assert not left, f"per_session upstreams {sorted(left)} still running 10 s after their sessions ended"


# ------------------------------------------------------ client capabilities


SAMPLED_TEXT = "junction-sampled-42"
ROOT_URI = "file:///tmp/junction-interop-root"


async def test_client_capabilities_reach_upstream(everything_gateway: Gateway, isolation: str) -> None:
    """A client that declares sampling / elicitation / roots gets the tools that need
    them, and the upstream's requests reach this client's callbacks and come back."""
    seen: dict[str, list[Any]] = {"sampling": [], "elicitation": [], "roots": []}

    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        seen["sampling"].append(params)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=SAMPLED_TEXT), model="interop-stub"
        )

    async def elicitation(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen["elicitation"].append(params)
        return types.ElicitResult(action="cancel")

    async def roots(context: Any) -> types.ListRootsResult:
        seen["roots"].append(True)
        return types.ListRootsResult(roots=[types.Root(uri=ROOT_URI, name="interop")])

    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(
            everything_gateway.mcp_url, sampling_callback=sampling, elicitation_callback=elicitation, list_roots_callback=roots
        ) as c:
            names = {t.name for t in await list_all_tools(c)}
            for tool in ("trigger-sampling-request", "trigger-elicitation-request", "get-roots-list"):
                assert TOOL_PREFIX + tool in names, f"{TOOL_PREFIX + tool} not listed for a capable client: {sorted(names)}"

            result = await c.call_tool(f"{TOOL_PREFIX}trigger-sampling-request", {"prompt": "ping-7", "maxTokens": 5})
            assert not result.is_error, dump(result)
            assert len(seen["sampling"]) == 1, f"sampling callback calls: {len(seen['sampling'])}; result {dump(result)}"
            sent = seen["sampling"][0].messages[0].content
            assert isinstance(sent, types.TextContent) and "ping-7" in sent.text, seen["sampling"][0]
            assert any(SAMPLED_TEXT in t for t in texts(result)), dump(result)

            result = await c.call_tool(f"{TOOL_PREFIX}trigger-elicitation-request", {})
            assert len(seen["elicitation"]) == 1, f"elicitation callback calls: {len(seen['elicitation'])}; result {dump(result)}"
            assert any("cancel" in t.lower() for t in texts(result)), dump(result)

            if isolation == "per_session":
                # A per-session upstream asks this client for its roots.
                result = await c.call_tool(f"{TOOL_PREFIX}get-roots-list", {})
                assert not result.is_error, dump(result)
                assert seen["roots"], f"roots/list never reached the client; result {dump(result)}"
                assert any(ROOT_URI in t for t in texts(result)), dump(result)
