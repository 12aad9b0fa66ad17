"""Harness for the interop tests: a real `junction` process fronting real MCP
servers, driven by the official Python `mcp` client.

Environment:
  JUNCTION_BIN  path to the gateway binary (default: target/debug/junction)

Peers are installed by scripts/install-test-deps.sh into .cache/.
Every wait here is bounded; everything started is stopped by pid.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
NPM_MODULES = ROOT / ".cache" / "npm" / "node_modules"
EVERYTHING_PKG = NPM_MODULES / "@modelcontextprotocol" / "server-everything"

LISTEN_RE = re.compile(r"listening on (\S+)")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")

STARTUP_TIMEOUT_S = 30.0  # until the "listening on" line
READY_TIMEOUT_S = 60.0  # until /readyz answers 200
STOP_TIMEOUT_S = 10.0  # SIGTERM grace before SIGKILL
CHILD_EXIT_TIMEOUT_S = 10.0  # upstream children must be gone this long after the gateway

# Nothing here should ever go through a proxy.
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --------------------------------------------------------------------- peers


def junction_bin() -> Path:
    path = Path(os.environ.get("JUNCTION_BIN", ROOT / "target" / "debug" / "junction"))
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(f"gateway binary not found or not executable: {path} (run `cargo build --bins`, or set JUNCTION_BIN)")
    return path


def node_bin() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("`node` not found on PATH")
    return node


def everything_entry() -> Path:
    """The JS entry point of @modelcontextprotocol/server-everything, from its package.json `bin`."""
    pkg_json = EVERYTHING_PKG / "package.json"
    if not pkg_json.is_file():
        pytest.fail(f"{pkg_json} missing: run scripts/install-test-deps.sh")
    bin_field = json.loads(pkg_json.read_text())["bin"]
    rel = bin_field if isinstance(bin_field, str) else bin_field["mcp-server-everything"]
    entry = (EVERYTHING_PKG / rel).resolve()
    if not entry.is_file():
        pytest.fail(f"server-everything entry point {entry} missing")
    return entry


def everything_stdio_command() -> tuple[str, list[str]]:
    return node_bin(), [str(everything_entry()), "stdio"]


def lone_error(group: BaseExceptionGroup) -> BaseException | None:
    """The one exception inside `group` (through nested groups of one), or
    None if it holds several. An MCP client's task groups wrap whatever the
    test body raised; re-raised bare, a failed assertion reads as itself."""
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
        inner = inner.exceptions[0]
    return None if inner is group else inner


def toml_str(value: str) -> str:
    # JSON string escaping is valid TOML basic-string escaping for paths.
    return json.dumps(value)


def everything_config(isolation: str, mount: str = "everything") -> str:
    command, args = everything_stdio_command()
    return (
        "[server]\n"
        'listen = "127.0.0.1:0"\n'
        "\n"
        f"[mounts.{mount}]\n"
        f"command = {toml_str(command)}\n"
        f"args = [{', '.join(toml_str(a) for a in args)}]\n"
        f"isolation = {toml_str(isolation)}\n"
    )


# ------------------------------------------------------------------- process


def _process_stats() -> Iterator[tuple[int, list[str]]]:
    """Each live process's pid and the fields of /proc/PID/stat after its
    command name (state, ppid, pgrp, session, ...): the name (field 2) may
    hold spaces or parens, so the split is after the last ')'."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        yield int(entry.name), stat[stat.rfind(")") + 2 :].split()


def _children_of(pid: int) -> list[int]:
    """Direct children of `pid`, read from /proc (Linux)."""
    return [child for child, fields in _process_stats() if len(fields) >= 2 and int(fields[1]) == pid]


def _descendants_of(pid: int) -> list[int]:
    out: list[int] = []
    frontier = [pid]
    for _ in range(8):  # bounded depth
        nxt: list[int] = []
        for p in frontier:
            nxt.extend(_children_of(p))
        if not nxt:
            break
        out.extend(nxt)
        frontier = nxt
    return out


def _session_members(sid: int) -> list[int]:
    """Live processes of session `sid` (a gateway started in its own session,
    and everything it started: process groups stay within the session)."""
    return [
        pid
        for pid, fields in _process_stats()
        if len(fields) > 3 and fields[3] == str(sid) and pid != sid and fields[0] != "Z"
    ]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat[stat.rfind(")") + 2 :].split()[0]
    return state != "Z"


@dataclass
class Gateway:
    """A running `junction` process."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    addr: str = ""
    lines: list[str] = field(default_factory=list)
    _listening: threading.Event = field(default_factory=threading.Event)
    _reader: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        return f"http://{self.addr}"

    @property
    def mcp_url(self) -> str:
        return f"{self.base_url}/mcp"

    def log(self) -> str:
        with self._lock:
            return "".join(self.lines)

    def _read_output(self) -> None:
        assert self.proc.stdout is not None
        with open(self.log_path, "w", encoding="utf-8", errors="replace") as sink:
            for raw in iter(self.proc.stdout.readline, b""):
                line = raw.decode("utf-8", errors="replace")
                sink.write(line)
                sink.flush()
                with self._lock:
                    self.lines.append(line)
                if not self._listening.is_set():
                    m = LISTEN_RE.search(ANSI_RE.sub("", line))
                    if m:
                        self.addr = m.group(1).rstrip(".,;")
                        self._listening.set()

    @classmethod
    def start(cls, config_path: Path, log_path: Path) -> Gateway:
        proc = subprocess.Popen(
            [str(junction_bin()), "--config", str(config_path), "--listen", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=str(config_path.parent),
            env={**os.environ, "RUST_BACKTRACE": "1", "NO_COLOR": "1"},
            # Its own session: what it started can be found by session id
            # even if it exits first (see `stop`).
            start_new_session=True,
        )
        gw = cls(proc=proc, log_path=log_path)
        gw._reader = threading.Thread(target=gw._read_output, name=f"junction-{proc.pid}-output", daemon=True)
        gw._reader.start()
        return gw

    def wait_listening(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._listening.wait(0.1):
                assert self.addr.startswith("127.0.0.1:"), f"gateway bound {self.addr!r}, expected 127.0.0.1:PORT"
                return
            if self.proc.poll() is not None:
                if self._reader is not None:
                    self._reader.join(2)
                pytest.fail(f"gateway exited with {self.proc.returncode} before listening; output:\n{self.log()}")
        pytest.fail(f"no 'listening on ADDR' line within {timeout}s; output:\n{self.log()}")

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> httpx.Response:
        deadline = time.monotonic() + timeout
        last = "no answer"
        with httpx.Client(trust_env=False, timeout=5.0) as http:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    pytest.fail(f"gateway exited with {self.proc.returncode} while waiting for /readyz; output:\n{self.log()}")
                try:
                    resp = http.get(f"{self.base_url}/readyz")
                    if resp.status_code == 200:
                        return resp
                    last = f"{resp.status_code} {resp.text[:500]}"
                except httpx.HTTPError as e:
                    last = repr(e)
                time.sleep(0.2)
        pytest.fail(f"/readyz not 200 within {timeout}s (last: {last}); output:\n{self.log()}")

    def child_pids(self, needle: str) -> list[int]:
        """Live descendants of the gateway whose command line contains `needle`."""
        out = []
        for pid in _descendants_of(self.proc.pid):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if needle in cmdline and _alive(pid):
                out.append(pid)
        return out

    def stop(self) -> list[str]:
        """Stop the gateway by pid and check it and its children exited. Returns problems found."""
        problems: list[str] = []
        pid = self.proc.pid
        if self.proc.poll() is not None:
            problems.append(f"gateway pid {pid} exited by itself with {self.proc.returncode} before the test ended")
        else:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
                if self.proc.returncode != 0:
                    problems.append(f"gateway pid {pid} exited with {self.proc.returncode} on SIGTERM")
            except subprocess.TimeoutExpired:
                problems.append(f"gateway pid {pid} ignored SIGTERM for {STOP_TIMEOUT_S}s; sent SIGKILL")
                self.proc.kill()
                try:
                    self.proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    problems.append(f"gateway pid {pid} still running after SIGKILL")
        if self._reader is not None:
            self._reader.join(5)
        # Upstream processes the gateway spawned must not outlive it (found
        # by the session it was started in, even if it exited first).
        deadline = time.monotonic() + CHILD_EXIT_TIMEOUT_S
        leftover = _session_members(pid)
        while leftover and time.monotonic() < deadline:
            time.sleep(0.1)
            leftover = [c for c in leftover if _alive(c)]
        for c in leftover:
            problems.append(f"upstream child pid {c} of gateway outlived it by {CHILD_EXIT_TIMEOUT_S}s; killed")
            try:
                os.kill(c, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return problems


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator:
    """Factory: start_gateway(config_text) -> ready Gateway. Stops every gateway it started."""
    started: list[Gateway] = []

    def start(config_text: str, *, wait_ready: bool = True) -> Gateway:
        n = len(started)
        config_path = tmp_path / f"junction-{n}.toml"
        config_path.write_text(config_text)
        gw = Gateway.start(config_path, tmp_path / f"junction-{n}.log")
        started.append(gw)
        gw.wait_listening()
        if wait_ready:
            gw.wait_ready()
        return gw

    yield start

    problems: list[str] = []
    for gw in started:
        problems.extend(gw.stop())
        print(f"---- gateway pid {gw.proc.pid} exit {gw.proc.returncode}, output ({gw.log_path}):")
        print(gw.log()[-20000:])
    if problems:
        pytest.fail("teardown: " + "; ".join(problems))


@pytest.fixture(params=["per_session", "shared"])
def isolation(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def everything_gateway(start_gateway, isolation: str) -> Gateway:
    """A ready gateway mounting server-everything (stdio) as `everything`."""
    return start_gateway(everything_config(isolation))


# ------------------------------------------------- server-everything over HTTP

# server-everything's HTTP modes listen on all interfaces; this preload keeps
# every listen() without an explicit host on 127.0.0.1. The shared copy is used
# when present (JUNCTION_LOOPBACK_PRELOAD overrides); otherwise the same few
# lines are written next to the test's other files, so CI needs nothing else.
LOOPBACK_PRELOAD_CANDIDATES = [ROOT.parent / "shared" / "tools" / "loopback.cjs"]
LOOPBACK_PRELOAD_SOURCE = """\
// Preload: force every net.Server.listen() without an explicit host onto 127.0.0.1
const net = require('net');
const orig = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (args.length && (typeof args[0] === 'number' || (typeof args[0] === 'string' && /^\\d+$/.test(args[0])))) {
    if (typeof args[1] !== 'string') args.splice(1, 0, '127.0.0.1');
  } else if (args.length && typeof args[0] === 'object' && args[0] !== null && !('path' in args[0]) && !args[0].host) {
    args[0] = { ...args[0], host: '127.0.0.1' };
  }
  return orig.apply(this, args);
};
"""
HTTP_UPSTREAM_START_TIMEOUT_S = 30.0


def loopback_preload(scratch: Path) -> Path:
    override = os.environ.get("JUNCTION_LOOPBACK_PRELOAD")
    if override:
        path = Path(override)
        if not path.is_file():
            pytest.fail(f"JUNCTION_LOOPBACK_PRELOAD={override} is not a file")
        return path
    for candidate in LOOPBACK_PRELOAD_CANDIDATES:
        if candidate.is_file():
            return candidate
    path = scratch / "loopback.cjs"
    path.write_text(LOOPBACK_PRELOAD_SOURCE)
    return path


def free_port() -> int:
    """A port free on 127.0.0.1 right now (the OS picks it)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def python_http_fixture(script: Path, args: list[str], log: Path, *, graceful: bool = True) -> Iterator[str]:
    """Runs a hand-written Python Streamable HTTP fixture (tests/interop/
    fixtures) on a free 127.0.0.1 port, `{port}` in `args` standing for it;
    yields its MCP URL once it answers `GET` with 405 (they send nothing
    unsolicited). Stopped by pid: SIGTERM, or SIGKILL at once when not
    `graceful` (uvicorn waits for the requests it holds)."""
    port = free_port()
    command = [sys.executable, str(script), *(arg.replace("{port}", str(port)) for arg in args)]
    with open(log, "wb") as sink:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        with httpx.Client(trust_env=False, timeout=2.0) as http:
            while True:
                assert proc.poll() is None, f"fixture exited: {log.read_text(errors='replace')}"
                try:
                    if http.get(url).status_code == 405:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"fixture not listening: {log.read_text(errors='replace')}"
                time.sleep(0.1)
        yield url
    finally:
        if graceful:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        else:
            proc.kill()
            proc.wait(10)
        print(f"---- {script.name} pid {proc.pid} exit {proc.returncode}, output:\n{log.read_text(errors='replace')}")


def tcp_sockets() -> Iterator[list[str]]:
    """The columns of every row of /proc/net/tcp and /proc/net/tcp6 (local
    and remote address at 1 and 2, state at 3, inode at 9)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            yield row.split()


def tcp_listeners(port: int) -> list[str]:
    """Local addresses (hex, as in /proc/net/tcp{,6}) listening on `port`."""
    found: list[str] = []
    for cols in tcp_sockets():
        if len(cols) < 4 or cols[3] != "0A":  # 0A = LISTEN
            continue
        addr, _, hex_port = cols[1].rpartition(":")
        if int(hex_port, 16) == port:
            found.append(addr)
    return found


LOOPBACK_V4_HEX = "0100007F"  # 127.0.0.1 in /proc/net/tcp byte order


@dataclass
class EverythingHttp:
    """`mcp-server-everything streamableHttp` on 127.0.0.1:PORT."""

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def mcp_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    @classmethod
    def start(cls, scratch: Path, index: int) -> EverythingHttp:
        port = free_port()
        log_path = scratch / f"everything-http-{index}.log"
        preload = loopback_preload(scratch)
        env = {
            **os.environ,
            "PORT": str(port),
            "NODE_OPTIONS": f'--require "{preload}"',
        }
        with open(log_path, "wb") as sink:
            proc = subprocess.Popen(
                [node_bin(), str(everything_entry()), "streamableHttp"],
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=str(scratch),
                env=env,
            )
        return cls(proc=proc, port=port, log_path=log_path)

    def wait_listening(self, timeout: float = HTTP_UPSTREAM_START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server-everything (HTTP) exited with {self.proc.returncode}; output:\n{self.log()}")
            listeners = tcp_listeners(self.port)
            if listeners:
                wrong = [a for a in listeners if a != LOOPBACK_V4_HEX]
                if wrong:
                    self.stop()
                    pytest.fail(
                        f"server-everything (HTTP) listens on port {self.port} beyond 127.0.0.1 "
                        f"({listeners}): the loopback preload did not apply"
                    )
                return
            time.sleep(0.1)
        pytest.fail(f"server-everything (HTTP) not listening on 127.0.0.1:{self.port} within {timeout}s:\n{self.log()}")

    def stop(self) -> list[str]:
        problems: list[str] = []
        if self.proc.poll() is None:
            children = _descendants_of(self.proc.pid)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                problems.append(f"server-everything pid {self.proc.pid} ignored SIGTERM; sent SIGKILL")
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)
            for c in children:
                if _alive(c):
                    problems.append(f"server-everything child pid {c} outlived it; killed")
                    try:
                        os.kill(c, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        return problems


@pytest.fixture
def start_everything_http(tmp_path: Path) -> Iterator:
    """Factory: start_everything_http() -> listening EverythingHttp. Stops every one it started."""
    started: list[EverythingHttp] = []

    def start() -> EverythingHttp:
        server = EverythingHttp.start(tmp_path, len(started))
        started.append(server)
        server.wait_listening()
        return server

    yield start

    problems: list[str] = []
    for server in started:
        problems.extend(server.stop())
        print(f"---- server-everything (HTTP) pid {server.proc.pid} port {server.port} exit {server.proc.returncode}, output:")
        print(server.log()[-20000:])
    if problems:
        pytest.fail("teardown: " + "; ".join(problems))


def everything_http_config(url: str, isolation: str, mount: str = "everything") -> str:
    return (
        "[server]\n"
        'listen = "127.0.0.1:0"\n'
        "\n"
        f"[mounts.{mount}]\n"
        f"url = {toml_str(url)}\n"
        f"isolation = {toml_str(isolation)}\n"
    )
