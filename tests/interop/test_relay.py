"""The relay matrix: what an upstream sends back *through* the gateway.

`@modelcontextprotocol/server-everything` is mounted as `everything` over
stdio and over Streamable HTTP (`mcp-server-everything streamableHttp` on
127.0.0.1:PORT), each as a `per_session` and as a `shared` mount: every test
runs for the four combinations. The client is the official Python `mcp` 2.x
`Client` in `auto` mode, declaring sampling, elicitation (form and URL) and
roots through its callbacks, and recording every notification it receives
through `message_handler`.

What is relayed, and to whom, follows ARCHITECTURE.md ("Routing what
upstreams send") and src/upstream/relay/mod.rs: a message tied to a client request
(progress token, the HTTP response stream it arrived on, the only request in
flight) goes to that client; a per-session upstream's messages go to its one
session; resource updates go to the sessions subscribed to the URI; list
changes to the affected sessions; a shared session's message that cannot be
tied to one client is never broadcast.
"""

from __future__ import annotations

import base64
import json
import gzip
import inspect
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from conftest import EverythingHttp, Gateway, everything_config, everything_http_config, lone_error

pytestmark = [
    pytest.mark.anyio,
    # The gateway speaks 2025-11-25, where resources/subscribe and logging are current.
    pytest.mark.filterwarnings(r"ignore:resources/(un)?subscribe is removed as of 2026-07-28"),
    pytest.mark.filterwarnings(r"ignore:The logging capability is deprecated as of 2026-07-28"),
]

MOUNT = "everything"
TOOL_PREFIX = f"{MOUNT}__"
URI_PREFIX = f"{MOUNT}+"

CALL_TIMEOUT_S = 30.0  # one MCP request
TEST_TIMEOUT_S = 120.0  # one whole test body
MAX_PAGES = 50
TICK_S = 5.0  # server-everything's simulated logging / resource update period

CAPABILITY_TOOLS = (
    "trigger-sampling-request",
    "trigger-elicitation-request",
    "trigger-url-elicitation",
    "get-roots-list",
)

COMBOS = [("stdio", "per_session"), ("stdio", "shared"), ("http", "per_session"), ("http", "shared")]

# What the simulated-logging tool sends (server-everything server/logging.js).
SIMULATED_LOG = re.compile(r"(Debug|Info|Notice|Warning|Error|Critical|Emergency)-level message|Alert level-message")
LOG_SEVERITY = {
    level: i for i, level in enumerate(["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"])
}


# ------------------------------------------------------------------ fixtures


@dataclass
class Target:
    gateway: Gateway
    transport: str  # "stdio" | "http"
    isolation: str  # "per_session" | "shared"
    upstream: EverythingHttp | None

    @property
    def url(self) -> str:
        return self.gateway.mcp_url

    @property
    def shared(self) -> bool:
        return self.isolation == "shared"


@pytest.fixture(params=COMBOS, ids=[f"{t}-{i}" for t, i in COMBOS])
def combo(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param


def _target(combo: tuple[str, str], start_everything_http, start_gateway, monkeypatch) -> Target:
    # The gateway's debug lines ("upstream log message not relayed", "refusing
    # an upstream request ...") are the evidence when a relay test fails.
    monkeypatch.setenv("RUST_LOG", "info,junction=debug")
    transport, isolation = combo
    if transport == "stdio":
        return Target(start_gateway(everything_config(isolation)), transport, isolation, None)
    upstream = start_everything_http()
    return Target(start_gateway(everything_http_config(upstream.mcp_url, isolation)), transport, isolation, upstream)


# `start_everything_http` before `start_gateway`: teardown runs in reverse, so
# the gateway stops before its HTTP upstream does.
@pytest.fixture
def target(combo, start_everything_http, start_gateway, monkeypatch) -> Target:
    return _target(combo, start_everything_http, start_gateway, monkeypatch)


@pytest.fixture(params=[c for c in COMBOS if c[1] == "per_session"], ids=lambda c: f"{c[0]}-{c[1]}")
def per_session_target(request, start_everything_http, start_gateway, monkeypatch) -> Target:
    return _target(request.param, start_everything_http, start_gateway, monkeypatch)


# -------------------------------------------------------------------- client

FORM_ANSWER: dict[str, Any] = {"name": "Ada Junction", "check": True, "email": "ada@example.com"}


class Peer:
    """One downstream client's callbacks, and everything they saw."""

    def __init__(
        self,
        label: str,
        *,
        on_sampling: Callable[[types.CreateMessageRequestParams], Awaitable[None]] | None = None,
    ) -> None:
        self.label = label
        self.sampled_text = f"sampled-for-{label}-{uuid.uuid4().hex[:8]}"
        self.root_uri = f"file:///tmp/junction-relay-root-{label}"
        self.on_sampling = on_sampling
        self.sampling: list[types.CreateMessageRequestParams] = []
        self.elicitations: list[Any] = []
        self.roots_calls = 0
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.notifications: list[Any] = []
        self.stream_errors: list[Exception] = []

    async def _sampling(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.sampling.append(params)
        if self.on_sampling is not None:
            await self.on_sampling(params)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=self.sampled_text), model="junction-interop"
        )

    async def _elicitation(self, context: Any, params: Any) -> types.ElicitResult:
        self.elicitations.append(params)
        if isinstance(params, types.ElicitRequestURLParams):
            return types.ElicitResult(action="accept")
        return types.ElicitResult(action="accept", content=dict(FORM_ANSWER))

    async def _roots(self, context: Any) -> types.ListRootsResult:
        self.roots_calls += 1
        return types.ListRootsResult(roots=[types.Root(uri=self.root_uri, name=f"root of {self.label}")])

    async def _logging(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)

    async def _message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.stream_errors.append(message)
        else:
            self.notifications.append(message)

    def callbacks(self) -> dict[str, Any]:
        return dict(
            sampling_callback=self._sampling,
            elicitation_callback=self._elicitation,
            list_roots_callback=self._roots,
            logging_callback=self._logging,
            message_handler=self._message,
        )

    def of(self, kind: type) -> list[Any]:
        return [n for n in self.notifications if isinstance(n, kind)]

    def updated_uris(self) -> list[str]:
        return [str(n.params.uri) for n in self.of(types.ResourceUpdatedNotification)]

    def simulated_logs(self) -> list[str]:
        return [str(p.data) for p in self.logs if SIMULATED_LOG.search(str(p.data))]

    def progress(self) -> list[types.ProgressNotificationParams]:
        return [n.params for n in self.of(types.ProgressNotification)]


@asynccontextmanager
async def connect(url: str, peer: Peer) -> AsyncIterator[Client]:
    try:
        async with Client(url, mode="auto", read_timeout_seconds=CALL_TIMEOUT_S, **peer.callbacks()) as client:
            yield client
    except BaseExceptionGroup as group:
        inner = lone_error(group)
        if inner is None:
            raise
        raise inner from None


async def wait_until(predicate: Callable[[], bool | Awaitable[bool]], timeout: float) -> bool:
    """Polls `predicate` (plain or async) until true or `timeout` seconds passed; returns its last value."""

    async def holds() -> bool:
        value = predicate()
        return await value if inspect.isawaitable(value) else value

    with anyio.move_on_after(timeout):
        while not await holds():
            await anyio.sleep(0.05)
    return await holds()


async def list_all(fetch: Callable[[str | None], Awaitable[tuple[list[Any], str | None]]]) -> list[Any]:
    items: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page, cursor = await fetch(cursor)
        items.extend(page)
        if cursor is None:
            return items
    pytest.fail(f"listing did not end within {MAX_PAGES} pages")


async def list_all_tools(c: Client) -> list[types.Tool]:
    async def fetch(cursor):
        r = await c.list_tools(cursor=cursor)
        return r.tools, r.next_cursor

    return await list_all(fetch)


async def list_all_resources(c: Client) -> list[types.Resource]:
    async def fetch(cursor):
        r = await c.list_resources(cursor=cursor)
        return r.resources, r.next_cursor

    return await list_all(fetch)


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


def dump(model: Any) -> str:
    if hasattr(model, "model_dump_json"):
        return model.model_dump_json(by_alias=True, exclude_none=True)[:3000]
    return repr(model)[:3000]


def first_text(params: types.CreateMessageRequestParams) -> str:
    content = params.messages[0].content
    return content.text if isinstance(content, types.TextContent) else repr(content)


# --------------------------------------------- capability-dependent tools


async def test_capability_tools_complete_through_gateway(target: Target) -> None:
    """The tools server-everything offers only to clients declaring sampling /
    elicitation (form, URL) / roots are listed under the namespace, and each
    one's request to the client reaches this client's callback and its answer
    reaches the tool result."""
    peer = Peer("A")
    marker = f"ping-{uuid.uuid4().hex[:8]}"
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(target.url, peer) as c:
            names = {t.name for t in await list_all_tools(c)}
            missing = [TOOL_PREFIX + t for t in CAPABILITY_TOOLS if TOOL_PREFIX + t not in names]
            assert not missing, f"not listed for a client declaring sampling/elicitation/roots: {missing}; listed: {sorted(names)}"

            # sampling/createMessage
            result = await c.call_tool(f"{TOOL_PREFIX}trigger-sampling-request", {"prompt": marker, "maxTokens": 7})
            assert not result.is_error, dump(result)
            assert len(peer.sampling) == 1, f"sampling callback ran {len(peer.sampling)} times; result {dump(result)}"
            assert marker in first_text(peer.sampling[0]), dump(peer.sampling[0])
            assert peer.sampling[0].max_tokens == 7, dump(peer.sampling[0])
            assert peer.sampled_text in text_of(result), f"the client's sampling answer is not in the result: {dump(result)}"

            # elicitation/create, form mode
            result = await c.call_tool(f"{TOOL_PREFIX}trigger-elicitation-request", {})
            assert not result.is_error, dump(result)
            forms = [e for e in peer.elicitations if isinstance(e, types.ElicitRequestFormParams)]
            assert len(forms) == 1, f"form elicitations seen: {peer.elicitations}; result {dump(result)}"
            assert "name" in forms[0].requested_schema["properties"], dump(forms[0])
            text = text_of(result)
            assert "User provided the requested information" in text, text
            assert f"- Name: {FORM_ANSWER['name']}" in text and f"- Email: {FORM_ANSWER['email']}" in text, text

            # elicitation/create, URL mode (2025-11-25), with the caller's elicitation id
            elicitation_id = f"junction-{uuid.uuid4()}"
            url = f"https://example.com/junction/{elicitation_id}"
            result = await c.call_tool(
                f"{TOOL_PREFIX}trigger-url-elicitation",
                {"url": url, "elicitationId": elicitation_id, "message": "open it"},
            )
            assert not result.is_error, dump(result)
            urls = [e for e in peer.elicitations if isinstance(e, types.ElicitRequestURLParams)]
            assert len(urls) == 1, f"URL elicitations seen: {peer.elicitations}; result {dump(result)}"
            assert urls[0].url == url and urls[0].elicitation_id == elicitation_id, dump(urls[0])
            text = text_of(result)
            assert "User completed the URL elicitation flow" in text and elicitation_id in text, text

            # ... and its error path: -32042 (URL elicitation required), whose
            # data lists the prerequisite URL elicitation. The gateway passes
            # code, message and data through unchanged: the message is what
            # the TypeScript SDK's McpError writes ("MCP error <code>: " + the
            # tool's message), the data exactly what the tool threw.
            with pytest.raises(MCPError) as required:
                await c.call_tool(
                    f"{TOOL_PREFIX}trigger-url-elicitation",
                    {"url": url, "elicitationId": f"junction-{uuid.uuid4()}", "errorPath": True},
                )
            error = required.value.error
            assert error.code == -32042, dump(error)
            assert error.message.endswith("This request requires browser-based authorization."), dump(error)
            assert isinstance(error.data, dict) and set(error.data) == {"elicitations"}, dump(error)
            listed = error.data["elicitations"]
            assert isinstance(listed, list) and len(listed) == 1, dump(error)
            prerequisite = listed[0]
            assert set(prerequisite) == {"mode", "url", "message", "elicitationId"}, dump(error)
            assert prerequisite["mode"] == "url" and prerequisite["url"] == "https://modelcontextprotocol.io", dump(error)
            assert prerequisite["message"] == "Open this link to satisfy the prerequisite, then retry the request.", dump(error)
            assert isinstance(prerequisite["elicitationId"], str) and prerequisite["elicitationId"], dump(error)
            assert len([e for e in peer.elicitations if isinstance(e, types.ElicitRequestURLParams)]) == 1, (
                f"the error path sent an elicitation/create too: {peer.elicitations}"
            )

            # roots/list (a per-session upstream may already have asked right
            # after initialize; a shared one asks during this call)
            result = await c.call_tool(f"{TOOL_PREFIX}get-roots-list", {})
            assert not result.is_error, dump(result)
            assert peer.roots_calls >= 1, f"roots/list never reached the client; result {dump(result)}"
            assert peer.root_uri in text_of(result), f"the client's roots are not in the result: {dump(result)}"


# ------------------------------------------------------------------ progress


async def test_progress_reaches_the_callers_own_callback(target: Target) -> None:
    """Progress of `trigger-long-running-operation` reaches the progress callback
    of the call that asked for it. The Python client uses the request id as the
    progress token and only calls a request's callback for notifications that
    carry exactly that token, so a callback call proves the gateway mapped the
    upstream token back to this client's own."""
    peer = Peer("A")
    got: dict[str, list[tuple[float, float | None]]] = {"first": [], "second": []}

    def recorder(key: str):
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            got[key].append((progress, total))

        return on_progress

    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(target.url, peer) as c:
            first = await c.call_tool(
                f"{TOOL_PREFIX}trigger-long-running-operation",
                {"duration": 1.5, "steps": 3},
                progress_callback=recorder("first"),
            )
            assert not first.is_error, dump(first)
            assert "Long running operation completed" in text_of(first), dump(first)
            second = await c.call_tool(
                f"{TOOL_PREFIX}trigger-long-running-operation",
                {"duration": 1, "steps": 2},
                progress_callback=recorder("second"),
            )
            assert not second.is_error, dump(second)
            # Callbacks run on tasks of their own: give the last ones a moment.
            await wait_until(lambda: len(got["first"]) >= 3 and len(got["second"]) >= 2, 5)

    wire = peer.progress()
    assert sorted(got["first"]) == [(1, 3), (2, 3), (3, 3)], f"first call's callback got {got['first']}; on the wire: {wire}"
    assert sorted(got["second"]) == [(1, 2), (2, 2)], f"second call's callback got {got['second']}; on the wire: {wire}"
    tokens = {(p.total, p.progress_token) for p in wire}
    by_total = {total: {tok for t, tok in tokens if t == total} for total, _ in tokens}
    assert len(wire) == 5, f"expected 5 progress notifications on the wire, got {wire}"
    assert len(by_total.get(3, ())) == 1 and len(by_total.get(2, ())) == 1, f"tokens per call: {by_total}"
    assert by_total[3] != by_total[2], f"two requests' progress carried the same token: {by_total}"


# ------------------------------------------------------------------- logging


async def test_simulated_logging(target: Target) -> None:
    """`toggle-simulated-logging` makes the upstream send a log message at once
    and then every 5 s. Client A toggles it; client B uses the same mount but
    does not.

    per_session: A's upstream is A's alone, so every message goes to A: at
    least the immediate one and one periodic one must arrive.

    shared: the periodic messages arrive while no client request is in flight
    on the shared upstream session, so the gateway cannot tie them to a client
    and, by design, relays them to nobody (never broadcast; over stdio nothing
    on the wire says which client a message is for, and server-everything's
    HTTP mode sends them on the session's GET stream, which belongs to the
    gateway, not to a client). The immediate one is sent while A's toggle call
    is in flight (the only request in flight), so A may get that one; whether
    it wins the race with the call's answer is not guaranteed. So: at most one
    simulated message for A, over more than two periods.

    Either way, B never gets one.
    """
    a, b = Peer("A"), Peer("B")
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(target.url, a) as ca, connect(target.url, b) as cb:
            # Both use the mount first, so a per_session mount has an upstream
            # for each that the level reaches.
            await ca.call_tool(f"{TOOL_PREFIX}echo", {"message": "a"})
            await cb.call_tool(f"{TOOL_PREFIX}echo", {"message": "b"})
            await ca.set_logging_level("debug")
            await cb.set_logging_level("debug")

            result = await ca.call_tool(f"{TOOL_PREFIX}toggle-simulated-logging", {})
            assert not result.is_error and "Started simulated" in text_of(result), dump(result)
            try:
                if target.shared:
                    await anyio.sleep(2 * TICK_S + 1.5)
                    got = a.simulated_logs()
                    assert len(got) <= 1, (
                        f"shared mount: {len(got)} simulated log messages reached A, but only the one sent during "
                        f"A's own call can be attributed to A: {got}"
                    )
                    # That they were sent and held back, not never sent:
                    # the gateway logs each one it relays to nobody.
                    held_back = [
                        line
                        for line in target.gateway.log().splitlines()
                        if "upstream log message not relayed" in line and SIMULATED_LOG.search(line)
                    ]
                    assert len(held_back) >= 2, (
                        f"shared mount: expected the upstream's periodic messages to reach the gateway and be "
                        f"held back; the gateway logged {len(held_back)}: {held_back}"
                    )
                else:
                    arrived = await wait_until(lambda: len(a.simulated_logs()) >= 2, 2 * TICK_S + 3)
                    assert arrived, (
                        f"per_session: expected the immediate and at least one periodic simulated log message; "
                        f"A got {a.simulated_logs()} (all A's log messages: {[p.data for p in a.logs]})"
                    )
                assert not b.simulated_logs(), f"B, which did not enable logging, got A's messages: {b.simulated_logs()}"
            finally:
                await ca.call_tool(f"{TOOL_PREFIX}toggle-simulated-logging", {})


async def test_log_level_applies_to_a_per_session_upstream_opened_later(per_session_target: Target) -> None:
    """`logging/setLevel` sent before the client's first call to a per_session
    mount must still govern that session's upstream once it opens.

    server-everything answers `resources/subscribe` with an info-level log
    message (and sends another after fetching roots), and respects the
    session's level. The positive control at the end shows such messages do
    reach the client when the level allows them."""
    peer = Peer("A")
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(per_session_target.url, peer) as c:
            await c.set_logging_level("error")  # before the per-session upstream exists
            await c.subscribe_resource(f"{URI_PREFIX}demo://resource/dynamic/text/7")
            await anyio.sleep(1.5)  # the upstream's post-initialize roots sync logs after 350 ms
            below = [(p.level, p.data) for p in peer.logs if LOG_SEVERITY[p.level] < LOG_SEVERITY["error"]]
            assert not below, (
                f"client set level 'error' before its first call; the per-session upstream then sent, and the "
                f"gateway relayed, lower-level messages: {below}"
            )

            # Positive control: with level debug, the subscribe acknowledgement arrives.
            await c.set_logging_level("debug")
            uri = f"{URI_PREFIX}demo://resource/dynamic/text/8"
            await c.subscribe_resource(uri)
            seen = await wait_until(lambda: any("demo://resource/dynamic/text/8" in str(p.data) for p in peer.logs), 5)
            assert seen, f"positive control: no log for the second subscribe; logs: {[p.data for p in peer.logs]}"


# ------------------------------------------------------ resource subscriptions


async def test_resource_updates_follow_subscriptions(target: Target) -> None:
    """A subscribes to dynamic text 1, B (another session on the same mount) to
    text 2; A turns on `toggle-subscriber-updates`. A gets `resources/updated`
    for its URI, namespaced, and never for text 2. On a shared mount the one
    upstream session holds both subscriptions, so the upstream reports both
    URIs and the gateway must split them: B gets text 2 only. On a per_session
    mount B's upstream was never toggled: B gets nothing. After A unsubscribes,
    A gets no more updates."""
    u1 = f"{URI_PREFIX}demo://resource/dynamic/text/1"
    u2 = f"{URI_PREFIX}demo://resource/dynamic/text/2"
    a, b = Peer("A"), Peer("B")
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(target.url, a) as ca, connect(target.url, b) as cb:
            await ca.subscribe_resource(u1)
            await cb.subscribe_resource(u2)
            result = await ca.call_tool(f"{TOOL_PREFIX}toggle-subscriber-updates", {})
            assert not result.is_error and "Started simulated" in text_of(result), dump(result)
            try:
                arrived = await wait_until(lambda: u1 in a.updated_uris(), 2 * TICK_S + 3)
                assert arrived, f"no resources/updated for {u1} at A; A's updates: {a.updated_uris()}"
                if target.shared:
                    arrived = await wait_until(lambda: u2 in b.updated_uris(), 2 * TICK_S + 3)
                    assert arrived, f"shared: no resources/updated for {u2} at B; B's updates: {b.updated_uris()}"
                else:
                    await anyio.sleep(TICK_S + 1)  # a further period, for strays to show
                assert set(a.updated_uris()) == {u1}, f"A subscribed to {u1} only, got updates for {a.updated_uris()}"
                expected_b = {u2} if target.shared else set()
                assert set(b.updated_uris()) == expected_b, f"B subscribed to {u2} only, got updates for {b.updated_uris()}"

                await ca.unsubscribe_resource(u1)
                await anyio.sleep(0.5)  # an update already on its way may still land
                before = len(a.updated_uris())
                await anyio.sleep(TICK_S + 1.5)
                late = a.updated_uris()[before:]
                assert not late, f"A unsubscribed from {u1} but still got updates: {late}"
            finally:
                await ca.call_tool(f"{TOOL_PREFIX}toggle-subscriber-updates", {})


# ---------------------------------------------------- resources/list_changed


async def test_gzip_resource_announced_listed_and_readable(target: Target) -> None:
    """`gzip-file-as-resource` registers a new session resource: the client
    gets `notifications/resources/list_changed`, and the resource is listed
    under the namespace and readable through the gateway. The input is a
    data: URI, so nothing leaves the machine."""
    peer = Peer("A")
    name = f"junction-{uuid.uuid4().hex[:10]}.txt.gz"
    payload = f"junction relay payload {uuid.uuid4()}\n" * 16
    data_uri = "data:text/plain;base64," + base64.b64encode(payload.encode()).decode()
    expected_uri = f"{URI_PREFIX}demo://resource/session/{name}"
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(target.url, peer) as c:
            before = {str(r.uri) for r in await list_all_resources(c)}
            assert expected_uri not in before
            result = await c.call_tool(
                f"{TOOL_PREFIX}gzip-file-as-resource", {"name": name, "data": data_uri, "outputType": "resourceLink"}
            )
            assert not result.is_error, dump(result)
            links = [blk for blk in result.content if isinstance(blk, types.ResourceLink)]
            assert [str(link.uri) for link in links] == [expected_uri], dump(result)

            announced = await wait_until(lambda: bool(peer.of(types.ResourceListChangedNotification)), 10)
            assert announced, f"no notifications/resources/list_changed; notifications seen: {[type(n).__name__ for n in peer.notifications]}"

            listed = {str(r.uri): r for r in await list_all_resources(c)}
            assert expected_uri in listed, f"{expected_uri} not listed after list_changed; listed: {sorted(listed)}"
            bare = [u for u in listed if not u.startswith(URI_PREFIX)]
            assert not bare, f"un-namespaced resources listed: {bare}"

            read = await c.read_resource(expected_uri)
            assert len(read.contents) == 1, dump(read)
            content = read.contents[0]
            assert str(content.uri) == expected_uri, f"read {expected_uri} answered content uri {content.uri}"
            assert isinstance(content, types.BlobResourceContents), dump(read)
            assert gzip.decompress(base64.b64decode(content.blob)).decode() == payload


# --------------------------------------------------------------------- tasks


async def raw_request(c: Client, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """Sends a request on the client's session and returns the raw result.

    mcp 2.3.0 models the 2025-11-25 tasks messages (`TaskMetadata`,
    `CreateTaskResult`, `GetTaskRequest`, `GetTaskPayloadRequest`) but has no
    task-augmented `call_tool`, and its typed `send_request` validates a
    `tools/call` answer as `CallToolResult`, which rejects `CreateTaskResult`.
    So the task-augmented call goes through the session's own dispatcher (same
    session, same headers), and is validated here as `CreateTaskResult`."""
    session = c.session
    data: dict[str, Any] = {"method": method, "params": params}
    opts: dict[str, Any] = {}
    session._stamp(data, opts)  # noqa: SLF001 - the session's protocol-version header
    opts["timeout"] = CALL_TIMEOUT_S
    return await session._dispatcher.send_raw_request(method, data.get("params"), opts)  # noqa: SLF001


TERMINAL = {"completed", "failed", "cancelled"}
RESEARCH = f"{TOOL_PREFIX}simulate-research-query"


async def start_research(c: Client, topic: str, *, ambiguous: bool = False, mount: str = MOUNT) -> types.Task:
    """A task-augmented `tools/call` of `mount`'s `simulate-research-query`;
    returns the task the gateway reports, whose id must be the gateway's own."""
    raw = await raw_request(
        c,
        "tools/call",
        {
            "name": f"{mount}__simulate-research-query",
            "arguments": {"topic": topic, "ambiguous": ambiguous},
            "task": {"ttl": 120000},
        },
    )
    task = types.CreateTaskResult.model_validate(raw).task
    assert task.status in ("working", "completed"), raw
    assert task.task_id.startswith(f"{mount}/"), f"task id not namespaced by its mount: {raw}"
    return task


async def get_task(c: Client, task_id: str) -> types.GetTaskResult:
    return await c.session.send_request(
        types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)), types.GetTaskResult
    )


async def list_tasks(c: Client) -> list[types.Task]:
    result = await c.session.send_request(types.ListTasksRequest(), types.ListTasksResult)
    return list(result.tasks)


async def task_result(c: Client, task_id: str) -> types.CallToolResult:
    return await c.session.send_request(
        types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id)), types.CallToolResult
    )


async def poll_task(c: Client, task: types.Task, stop: set[str]) -> tuple[str, list[str]]:
    """Polls `tasks/get` (at the task's interval, at most 2 s) until its
    status is in `stop`, for at most 60 s; returns the last status and every
    status seen."""
    status = task.status
    polls: list[str] = []
    with anyio.move_on_after(60):
        while status not in stop:
            await anyio.sleep(min((task.poll_interval or 500) / 1000, 2.0))
            got = await get_task(c, task.task_id)
            assert got.task_id == task.task_id, dump(got)
            status = got.status
            polls.append(f"{got.status}: {got.status_message}")
    return status, polls


async def test_research_task_runs_to_its_result(target: Target) -> None:
    """`simulate-research-query` is a task tool (`execution.taskSupport:
    "required"`). Per 2025-11-25: the gateway declares `tasks.requests.tools.call`;
    a `tools/call` with `task` answers `CreateTaskResult`; `tasks/get` polls
    the status until `completed`; `tasks/result` answers the tool's
    `CallToolResult`; `tasks/list` lists the task."""
    peer = Peer("A")
    topic = f"junction relay {uuid.uuid4().hex[:8]}"
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(target.url, peer) as c:
            tools = {t.name: t for t in await list_all_tools(c)}
            tool = tools.get(RESEARCH)
            assert tool is not None, f"task tool not listed: {sorted(tools)}"
            assert tool.execution is not None and tool.execution.task_support == "required", (
                f"execution.taskSupport not relayed: {dump(tool)}"
            )
            tasks_cap = c.server_capabilities.tasks
            assert tasks_cap is not None and tasks_cap.requests is not None and tasks_cap.requests.tools is not None and (
                tasks_cap.requests.tools.call is not None
            ), f"gateway does not declare tasks.requests.tools.call: {dump(c.server_capabilities)}"

            task = await start_research(c, topic)
            assert task.task_id in [t.task_id for t in await list_tasks(c)]
            status, polls = await poll_task(c, task, TERMINAL)
            assert status == "completed", f"task {task.task_id} ended {status!r}; statuses seen: {polls}"

            result = await task_result(c, task.task_id)
            assert not result.is_error, dump(result)
            assert f"# Research Report: {topic}" in text_of(result), dump(result)



async def test_research_task_asks_for_clarification(target: Target) -> None:
    """An ambiguous query makes the task `input_required`; `tasks/result`
    then delivers the server's elicitation (related to the task) to this
    client, whose answer lets the task complete with it."""
    peer = Peer("A")
    topic = f"junction ambiguous {uuid.uuid4().hex[:8]}"
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(target.url, peer) as c:
            task = await start_research(c, topic, ambiguous=True)
            status, polls = await poll_task(c, task, TERMINAL | {"input_required"})
            assert status == "input_required", f"statuses seen: {polls}"

            result = await task_result(c, task.task_id)
            assert len(peer.elicitations) == 1, peer.elicitations
            asked = peer.elicitations[0]
            assert "multiple interpretations" in asked.message, dump(asked)
            related = (asked.meta or {}).get("io.modelcontextprotocol/related-task", {})
            assert related.get("taskId") == task.task_id, f"related task not under the gateway's id: {dump(asked)}"
            assert not result.is_error, dump(result)
            assert "**Clarification**" in text_of(result), text_of(result)
            assert (await get_task(c, task.task_id)).status == "completed"


async def test_tasks_of_two_mounts_are_listed_together(start_gateway, monkeypatch) -> None:
    """Two mounts of server-everything (one shared, one per-session): a
    task on each, both listed by one `tasks/list` under their mounts' ids,
    and each `tasks/get` / `tasks/result` reaching its own upstream."""
    monkeypatch.setenv("RUST_LOG", "info,junction=debug")
    config = everything_config("shared", mount="alpha")
    config += everything_config("per_session", mount="beta").split("\n\n", 1)[1]
    gateway = start_gateway(config)
    topics = {mount: f"junction {mount} {uuid.uuid4().hex[:8]}" for mount in ("alpha", "beta")}
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(gateway.mcp_url, Peer("A")) as c:
            tasks = {mount: await start_research(c, topic, mount=mount) for mount, topic in topics.items()}
            listed = sorted(t.task_id for t in await list_tasks(c))
            assert listed == sorted(t.task_id for t in tasks.values()), listed
            for mount, task in tasks.items():
                status, polls = await poll_task(c, task, TERMINAL)
                assert status == "completed", f"{mount}: {polls}"
                result = await task_result(c, task.task_id)
                assert f"# Research Report: {topics[mount]}" in text_of(result), dump(result)


def sse_messages(body: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages in an SSE body (events without data skipped)."""
    return [json.loads(line[5:]) for line in body.splitlines() if line.startswith("data:") and line[5:].strip()]


async def test_task_status_notifications_name_the_gateways_task(target: Target) -> None:
    """Every `notifications/tasks/status` the upstream sends reaches the
    session that created the task, on its `GET` stream, under the gateway's
    task id, the first one (sent before the upstream answered the
    `tools/call` that created the task) included. Raw HTTP: mcp 2.3's client
    drops this notification at 2025-11-25 (it is not in its tables)."""
    url = target.url
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    statuses: list[dict[str, Any]] = []
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with httpx.AsyncClient(trust_env=False, timeout=CALL_TIMEOUT_S) as http:
            init = await http.post(
                url,
                headers=headers,
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
                },
            )
            assert init.status_code == 200, init.text
            session = {"mcp-session-id": init.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            headers |= session
            await http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})

            listening = anyio.Event()

            async def read_get_stream() -> None:
                async with http.stream("GET", url, headers={"accept": "text/event-stream", **session}) as stream:
                    assert stream.status_code == 200
                    listening.set()
                    async for line in stream.aiter_lines():
                        if line.startswith("data:") and line[5:].strip():
                            message = json.loads(line[5:])
                            if message.get("method") == "notifications/tasks/status":
                                statuses.append(message["params"])

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(read_get_stream)
                await listening.wait()
                call = await http.post(
                    url,
                    headers=headers,
                    json={
                        "jsonrpc": "2.0",
                        "id": 2,
                        "method": "tools/call",
                        "params": {"name": RESEARCH, "arguments": {"topic": "status"}, "task": {"ttl": 60000}},
                    },
                )
                answer = next(m for m in sse_messages(call.text) if m.get("id") == 2)
                task_id = answer["result"]["task"]["taskId"]
                assert task_id.startswith(f"{MOUNT}/"), answer
                done = await wait_until(lambda: any(s["status"] == "completed" for s in statuses), 20)
                tasks.cancel_scope.cancel()
    assert done, f"no completed status; got {statuses}"
    assert {s["taskId"] for s in statuses} == {task_id}, statuses
    assert statuses[0]["statusMessage"] == "Gathering sources...", f"the first status was lost: {statuses}"
    assert "_meta" not in statuses[0], statuses[0]


@pytest.fixture(params=[c for c in COMBOS if c[1] == "shared"], ids=lambda c: f"{c[0]}-{c[1]}")
def shared_target(request, start_everything_http, start_gateway, monkeypatch) -> Target:
    return _target(request.param, start_everything_http, start_gateway, monkeypatch)


async def test_a_task_belongs_to_the_session_that_created_it(shared_target: Target) -> None:
    """On a shared mount both clients reach one upstream session, whose task
    ids they could guess: the gateway knows a task only in the session that
    created it. The other session can neither read, list nor cancel it."""
    a, b = Peer("A"), Peer("B")
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(shared_target.url, a) as ca, connect(shared_target.url, b) as cb:
            task = await start_research(ca, f"junction owner {uuid.uuid4().hex[:8]}")
            for attempt in (get_task(cb, task.task_id), task_result(cb, task.task_id)):
                with pytest.raises(MCPError) as refused:
                    await attempt
                assert refused.value.error.code == -32602, refused.value.error
            with pytest.raises(MCPError):
                await cb.session.send_request(
                    types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task.task_id)),
                    types.CancelTaskResult,
                )
            assert await list_tasks(cb) == []
            assert [t.task_id for t in await list_tasks(ca)] == [task.task_id]

            cancelled = await ca.session.send_request(
                types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task.task_id)),
                types.CancelTaskResult,
            )
            assert cancelled.task_id == task.task_id and cancelled.status == "cancelled", dump(cancelled)
            assert (await get_task(ca, task.task_id)).status == "cancelled"


# --------------------------------------------------- two concurrent sessions


async def test_concurrent_sessions_get_only_their_own(target: Target) -> None:
    """Two client sessions on one mount at the same time.

    Progress: both run `trigger-long-running-operation` concurrently with
    different step counts (A 4, B 5). Both clients number their requests the
    same way, so their tokens may well be equal; the totals tell the two
    apart. Each must get exactly its own progress.

    Sampling: A calls `trigger-sampling-request`; while A's sampling request
    sits in A's callback, B calls it too. Neither client may ever see the
    other's prompt or get the other's answer. Over HTTP the upstream sends
    each sampling request on the response stream of the call that caused it,
    so the gateway can route both. On a shared stdio mount nothing on the
    wire ties B's sampling request to B while two sessions have calls in
    flight: the gateway refuses it (ARCHITECTURE.md / relay/mod.rs: ambiguous is
    refused, never guessed), which server-everything reports in B's result.
    """
    await two_sessions_get_only_their_own(target.url, ambiguous_refused=target.transport == "stdio" and target.shared)


async def two_sessions_get_only_their_own(url: str, *, ambiguous_refused: bool) -> None:
    """The body of `test_concurrent_sessions_get_only_their_own`, for any
    mount of server-everything at `url` (also `test_sse_upstream.py`).
    `ambiguous_refused`: nothing on the wire ties B's sampling request to
    B (a shared stdio or SSE mount), so it is refused."""
    b_done = anyio.Event()
    a_in_sampling = anyio.Event()

    async def hold_a(params: types.CreateMessageRequestParams) -> None:
        a_in_sampling.set()
        with anyio.move_on_after(20):
            await b_done.wait()

    a, b = Peer("A", on_sampling=hold_a), Peer("B")
    prompt_a, prompt_b = f"from-A-{uuid.uuid4().hex[:8]}", f"from-B-{uuid.uuid4().hex[:8]}"
    progress: dict[str, list[tuple[float, float | None]]] = {"A": [], "B": []}
    results: dict[str, types.CallToolResult] = {}

    def recorder(key: str):
        async def on_progress(p: float, total: float | None, message: str | None) -> None:
            progress[key].append((p, total))

        return on_progress

    with anyio.fail_after(TEST_TIMEOUT_S):
        async with connect(url, a) as ca, connect(url, b) as cb:
            # -- progress
            async def run(c: Client, key: str, steps: int) -> None:
                results[f"progress-{key}"] = await c.call_tool(
                    f"{TOOL_PREFIX}trigger-long-running-operation",
                    {"duration": 2, "steps": steps},
                    progress_callback=recorder(key),
                )

            async with anyio.create_task_group() as tg:
                tg.start_soon(run, ca, "A", 4)
                tg.start_soon(run, cb, "B", 5)
            await wait_until(lambda: len(progress["A"]) >= 4 and len(progress["B"]) >= 5, 5)
            for key in ("A", "B"):
                assert not results[f"progress-{key}"].is_error, dump(results[f"progress-{key}"])
            assert sorted(progress["A"]) == [(i, 4) for i in range(1, 5)], f"A's callback: {progress['A']}"
            assert sorted(progress["B"]) == [(i, 5) for i in range(1, 6)], f"B's callback: {progress['B']}"
            assert {p.total for p in a.progress()} == {4}, f"A received progress: {a.progress()}"
            assert {p.total for p in b.progress()} == {5}, f"B received progress: {b.progress()}"

            # -- sampling, overlapping
            async def call_a() -> None:
                results["A"] = await ca.call_tool(f"{TOOL_PREFIX}trigger-sampling-request", {"prompt": prompt_a})

            async def call_b() -> None:
                try:
                    with anyio.move_on_after(20):
                        await a_in_sampling.wait()
                    results["B"] = await cb.call_tool(f"{TOOL_PREFIX}trigger-sampling-request", {"prompt": prompt_b})
                finally:
                    b_done.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(call_a)
                tg.start_soon(call_b)

    a_prompts = [first_text(p) for p in a.sampling]
    b_prompts = [first_text(p) for p in b.sampling]
    assert len(a_prompts) == 1 and prompt_a in a_prompts[0], f"A's sampling callback saw {a_prompts}"
    assert not any(prompt_a in p for p in b_prompts), f"B's sampling callback saw A's prompt: {b_prompts}"
    text_a, text_b = text_of(results["A"]), text_of(results["B"])
    assert not results["A"].is_error and a.sampled_text in text_a, f"A's result: {dump(results['A'])}"
    assert b.sampled_text not in text_a, f"A's result carries B's answer: {text_a}"
    assert a.sampled_text not in text_b, f"B's result carries A's answer: {text_b}"
    if ambiguous_refused:
        assert not b_prompts, f"B's sampling request was routed although ambiguous: {b_prompts}"
        assert "cannot route" in text_b, f"expected the gateway's refusal in B's result: {dump(results['B'])}"
    else:
        assert len(b_prompts) == 1 and prompt_b in b_prompts[0], f"B's sampling callback saw {b_prompts}; B's result {dump(results['B'])}"
        assert not results["B"].is_error and b.sampled_text in text_b, f"B's result: {dump(results['B'])}"


# ------------------------------- server→client requests ride the call's stream


class SseRequests:
    """A minimal raw Streamable HTTP client (2025-11-25) that never opens the
    optional GET stream, so everything it receives arrives on the response
    stream of one of its own POSTs."""

    def __init__(self, http: Any, url: str) -> None:
        self.http = http
        self.url = url
        self.session_id: str | None = None

    def headers(self) -> dict[str, str]:
        h = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if self.session_id is not None:
            h["Mcp-Session-Id"] = self.session_id
            h["MCP-Protocol-Version"] = "2025-11-25"
        return h

    @staticmethod
    async def events(response: Any) -> AsyncIterator[dict[str, Any]]:
        """JSON-RPC messages of a response, whether SSE or plain JSON."""
        if response.headers.get("content-type", "").startswith("application/json"):
            yield json.loads(await response.aread())
            return
        data: list[str] = []
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif line == "" and data:
                payload = "\n".join(data)
                data = []
                if payload.strip():
                    yield json.loads(payload)

    async def initialize(self) -> None:
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"sampling": {}, "elicitation": {"form": {}, "url": {}}, "roots": {"listChanged": True}},
                "clientInfo": {"name": "junction-raw-sse", "version": "0"},
            },
        }
        async with self.http.stream("POST", self.url, json=body, headers=self.headers()) as r:
            assert r.status_code == 200, f"initialize: {r.status_code} {await r.aread()}"
            self.session_id = r.headers.get("mcp-session-id")
            async for message in self.events(r):
                if message.get("id") == 1:
                    assert "result" in message, message
                    break
        assert self.session_id, "no Mcp-Session-Id on the initialize answer"
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        r = await self.http.post(self.url, json=note, headers=self.headers())
        assert r.status_code in (200, 202, 204), f"initialized: {r.status_code} {r.text}"

    async def close(self) -> None:
        if self.session_id is not None:
            await self.http.delete(self.url, headers=self.headers())


async def test_server_request_rides_the_originating_post_stream(target: Target) -> None:
    """The upstream's sampling request, caused by one tools/call, must reach the
    client on that POST's SSE response stream (2025-11-25 Streamable HTTP: the
    GET stream is for messages unrelated to a running request, and a client
    need not open one). This client never opens GET: if the gateway puts the
    request anywhere else, the client never sees it and the call cannot finish."""
    import httpx

    call_id = 4242  # far from any id the upstream uses for its own requests
    prompt = f"raw-sse-{uuid.uuid4().hex[:8]}"
    answer = f"sampled-raw-{uuid.uuid4().hex[:8]}"
    seen: list[dict[str, Any]] = []
    final: dict[str, Any] | None = None
    async with httpx.AsyncClient(trust_env=False, timeout=httpx.Timeout(30.0, read=None)) as http:
        client = SseRequests(http, target.url)
        with anyio.fail_after(TEST_TIMEOUT_S):
            await client.initialize()
        try:
            body = {
                "jsonrpc": "2.0",
                "id": call_id,
                "method": "tools/call",
                "params": {"name": f"{TOOL_PREFIX}trigger-sampling-request", "arguments": {"prompt": prompt}},
            }
            with anyio.move_on_after(20):
                async with http.stream("POST", target.url, json=body, headers=client.headers()) as r:
                    assert r.status_code == 200, f"tools/call: {r.status_code} {await r.aread()}"
                    async for message in client.events(r):
                        seen.append(message)
                        if message.get("method") == "sampling/createMessage":
                            reply = {
                                "jsonrpc": "2.0",
                                "id": message["id"],
                                "result": {
                                    "role": "assistant",
                                    "content": {"type": "text", "text": answer},
                                    "model": "junction-raw",
                                },
                            }
                            posted = await http.post(target.url, json=reply, headers=client.headers())
                            assert posted.status_code in (200, 202, 204), f"answer: {posted.status_code} {posted.text}"
                        elif message.get("id") == call_id:
                            final = message
                            break
        finally:
            with anyio.move_on_after(10):
                await client.close()
    methods = [m.get("method") or f"response {m.get('id')}" for m in seen]
    assert "sampling/createMessage" in methods, (
        f"the sampling request caused by tools/call {call_id} never arrived on that call's response stream "
        f"(messages on it within 20 s: {methods})"
    )
    assert final is not None and "result" in final, f"no answer to tools/call {call_id}: {seen}"
    texts = [c.get("text", "") for c in final["result"].get("content", [])]
    assert any(answer in t for t in texts), final
