//! A lean HTTP/1.1 client and the bit of MCP Streamable HTTP the benchmark
//! needs: one keep-alive connection per session, requests written in one
//! `write`, responses read with a small parser (Content-Length or chunked
//! bodies), and the JSON-RPC answer picked out of an SSE or JSON body.
//!
//! It exists so that the load generator costs a few microseconds of CPU per
//! request, far less than the servers it measures (the `client-cost` section
//! of the benchmark compares it with rmcp's own client).

use std::{net::SocketAddr, time::Duration};

use serde::Deserialize;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// Bound on any single HTTP exchange.
pub const IO_TIMEOUT: Duration = Duration::from_secs(20);
/// Refuse absurd bodies (a bug, not a benchmark).
const MAX_BODY: usize = 64 << 20;

pub const PROTOCOL_VERSION: &str = "2025-06-18";

pub type Error = String;

pub struct Response {
    pub status: u16,
    pub session_id: Option<String>,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// One HTTP/1.1 keep-alive connection; reconnects after the server closes.
pub struct Conn {
    addr: SocketAddr,
    host: String,
    stream: Option<TcpStream>,
    buf: Vec<u8>,
    req: Vec<u8>,
}

impl Conn {
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            host: addr.to_string(),
            stream: None,
            buf: Vec::with_capacity(16 * 1024),
            req: Vec::with_capacity(1024),
        }
    }

    /// Sends one request and reads the whole response.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response, Error> {
        match tokio::time::timeout(IO_TIMEOUT, self.exchange(method, path, headers, body)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(error)) => {
                self.stream = None;
                Err(error)
            }
            Err(_) => {
                self.stream = None;
                Err(format!("{method} {path}: no answer within {IO_TIMEOUT:?}"))
            }
        }
    }

    async fn exchange(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response, Error> {
        use std::io::Write;
        self.req.clear();
        let _ = write!(
            self.req,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n",
            self.host,
            body.len()
        );
        for (name, value) in headers {
            let _ = write!(self.req, "{name}: {value}\r\n");
        }
        self.req.extend_from_slice(b"\r\n");
        self.req.extend_from_slice(body);

        // A kept-alive connection the server closed in the meantime fails on
        // write or yields EOF before any byte: retry once on a fresh one.
        let reused = self.stream.is_some();
        match self.try_exchange().await {
            Ok(response) => Ok(response),
            Err((false, error)) if reused => {
                let _ = error;
                self.stream = None;
                self.try_exchange().await.map_err(|(_, e)| e)
            }
            Err((_, error)) => Err(error),
        }
    }

    /// `Err((got_any_byte, message))`.
    async fn try_exchange(&mut self) -> Result<Response, (bool, Error)> {
        if self.stream.is_none() {
            let stream = TcpStream::connect(self.addr)
                .await
                .map_err(|e| (true, format!("connect {}: {e}", self.addr)))?;
            stream.set_nodelay(true).ok();
            if quickack_enabled() {
                set_quickack(&stream);
            }
            self.stream = Some(stream);
            self.buf.clear();
        }
        let stream = self.stream.as_mut().unwrap();
        stream
            .write_all(&self.req)
            .await
            .map_err(|e| (false, format!("write: {e}")))?;
        self.buf.clear();
        // Head.
        let head_end = loop {
            if let Some(pos) = find(&self.buf, b"\r\n\r\n") {
                break pos + 4;
            }
            if self.buf.len() > 64 * 1024 {
                return Err((true, "response head too large".into()));
            }
            let got_any = !self.buf.is_empty();
            let n = read_more(stream, &mut self.buf)
                .await
                .map_err(|e| (got_any, format!("read: {e}")))?;
            if n == 0 {
                return Err((got_any, "connection closed before response".into()));
            }
        };
        let head = std::str::from_utf8(&self.buf[..head_end])
            .map_err(|_| (true, "non-UTF-8 response head".to_owned()))?;
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| (true, format!("bad status line {status_line:?}")))?;
        let mut length = None;
        let mut chunked = false;
        let mut close = false;
        let mut session_id = None;
        let mut content_type = None;
        for line in lines {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse::<usize>().ok();
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.eq_ignore_ascii_case("chunked");
            } else if name.eq_ignore_ascii_case("connection") {
                close = value.eq_ignore_ascii_case("close");
            } else if name.eq_ignore_ascii_case("mcp-session-id") {
                session_id = Some(value.to_owned());
            } else if name.eq_ignore_ascii_case("content-type") {
                content_type = Some(value.to_owned());
            }
        }
        let mut rest = self.buf.split_off(head_end);
        let body = if chunked {
            read_chunked(stream, &mut rest)
                .await
                .map_err(|e| (true, e))?
        } else if let Some(length) = length {
            if length > MAX_BODY {
                return Err((true, format!("body of {length} bytes")));
            }
            while rest.len() < length {
                if read_more(stream, &mut rest)
                    .await
                    .map_err(|e| (true, format!("read: {e}")))?
                    == 0
                {
                    return Err((true, "connection closed in body".into()));
                }
            }
            rest.truncate(length);
            rest
        } else if status == 204 || status == 304 || (100..200).contains(&status) {
            Vec::new()
        } else {
            // Body until close.
            loop {
                if read_more(stream, &mut rest)
                    .await
                    .map_err(|e| (true, format!("read: {e}")))?
                    == 0
                {
                    break;
                }
                if rest.len() > MAX_BODY {
                    return Err((true, "body too large".into()));
                }
            }
            close = true;
            rest
        };
        if close {
            self.stream = None;
        }
        Ok(Response {
            status,
            session_id,
            content_type,
            body,
        })
    }
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    if buf.capacity() - buf.len() < 8192 {
        buf.reserve((16 * 1024).max(buf.len()));
    }
    let n = stream.read_buf(buf).await?;
    if quickack_enabled() {
        set_quickack(stream);
    }
    Ok(n)
}

static QUICKACK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// With quick ACKs on, the client ACKs every segment at once instead of
/// delaying the ACK (Linux: up to 40 ms), which hides a server's Nagle
/// stall (headers written, then the body held until they are ACKed).
pub fn set_quickack_mode(on: bool) {
    QUICKACK.store(on, std::sync::atomic::Ordering::Relaxed);
}

fn quickack_enabled() -> bool {
    QUICKACK.load(std::sync::atomic::Ordering::Relaxed)
}

/// `setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, 1)`. The kernel clears the
/// flag by itself, so it is set again after every read.
fn set_quickack(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    extern "C" {
        fn setsockopt(
            fd: i32,
            level: i32,
            name: i32,
            value: *const std::ffi::c_void,
            len: u32,
        ) -> i32;
    }
    const IPPROTO_TCP: i32 = 6;
    const TCP_QUICKACK: i32 = 12;
    let one: i32 = 1;
    // SAFETY: a valid socket fd, a pointer to a live i32 and its size.
    unsafe {
        setsockopt(
            stream.as_raw_fd(),
            IPPROTO_TCP,
            TCP_QUICKACK,
            &one as *const i32 as *const std::ffi::c_void,
            std::mem::size_of::<i32>() as u32,
        );
    }
}

/// Decodes a chunked body; `raw` holds what was read past the head.
async fn read_chunked(stream: &mut TcpStream, raw: &mut Vec<u8>) -> Result<Vec<u8>, Error> {
    let mut body = Vec::new();
    let mut pos = 0;
    loop {
        // Chunk size line.
        let line_end = loop {
            if let Some(i) = find(&raw[pos..], b"\r\n") {
                break pos + i;
            }
            if read_more(stream, raw).await.map_err(|e| e.to_string())? == 0 {
                return Err("connection closed in chunked body".into());
            }
        };
        let size_text = std::str::from_utf8(&raw[pos..line_end]).map_err(|e| e.to_string())?;
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        pos = line_end + 2;
        if size == 0 {
            // Trailers end with an empty line.
            loop {
                if let Some(i) = find(&raw[pos..], b"\r\n") {
                    if i == 0 {
                        return Ok(body);
                    }
                    pos += i + 2;
                    continue;
                }
                if read_more(stream, raw).await.map_err(|e| e.to_string())? == 0 {
                    return Ok(body);
                }
            }
        }
        if body.len() + size > MAX_BODY {
            return Err("chunked body too large".into());
        }
        while raw.len() < pos + size + 2 {
            if read_more(stream, raw).await.map_err(|e| e.to_string())? == 0 {
                return Err("connection closed in chunk".into());
            }
        }
        body.extend_from_slice(&raw[pos..pos + size]);
        pos += size + 2;
    }
}

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.len() > haystack.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The JSON-RPC message answering a request: the body itself (JSON), or the
/// last non-empty `data:` of an SSE body that looks like an object.
pub fn rpc_payload(response: &Response) -> Result<&[u8], Error> {
    let is_sse = response
        .content_type
        .as_deref()
        .is_some_and(|t| t.starts_with("text/event-stream"));
    if !is_sse {
        return Ok(&response.body);
    }
    let mut found: Option<&[u8]> = None;
    for line in response.body.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(data) = line.strip_prefix(b"data:") {
            let data = data.strip_prefix(b" ").unwrap_or(data);
            if data.first() == Some(&b'{') {
                found = Some(data);
            }
        }
    }
    found.ok_or_else(|| {
        format!(
            "no JSON-RPC message in SSE body: {:?}",
            String::from_utf8_lossy(&response.body[..response.body.len().min(300)])
        )
    })
}

#[derive(Deserialize)]
struct RpcEnvelope<T> {
    result: Option<T>,
    error: Option<serde_json::Value>,
}

/// Parses `{"result": T}`, turning a JSON-RPC error into `Err`.
pub fn rpc_result<'a, T: Deserialize<'a>>(payload: &'a [u8]) -> Result<T, Error> {
    let envelope: RpcEnvelope<T> =
        serde_json::from_slice(payload).map_err(|e| format!("bad JSON-RPC answer: {e}"))?;
    if let Some(error) = envelope.error {
        return Err(format!("JSON-RPC error: {error}"));
    }
    envelope
        .result
        .ok_or_else(|| "JSON-RPC answer without result".to_owned())
}

#[derive(Deserialize)]
struct CallResult {
    #[serde(rename = "isError", default)]
    is_error: Option<bool>,
}

/// One MCP session over one keep-alive connection.
pub struct Session {
    pub conn: Conn,
    path: String,
    pub id: String,
    next_id: u64,
    body: Vec<u8>,
}

const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");
const CONTENT_TYPE: (&str, &str) = ("Content-Type", "application/json");

impl Session {
    /// `initialize` + `notifications/initialized` on `conn`.
    pub async fn open(mut conn: Conn, path: &str) -> Result<Session, Error> {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{PROTOCOL_VERSION}","capabilities":{{}},"clientInfo":{{"name":"junction-bench","version":"0"}}}}}}"#
        );
        let response = conn
            .request("POST", path, &[ACCEPT, CONTENT_TYPE], body.as_bytes())
            .await?;
        if response.status != 200 {
            return Err(format!(
                "initialize: HTTP {} {}",
                response.status,
                String::from_utf8_lossy(&response.body)
            ));
        }
        let id = response
            .session_id
            .clone()
            .ok_or("initialize: no Mcp-Session-Id")?;
        rpc_result::<serde::de::IgnoredAny>(rpc_payload(&response)?)?;
        let mut session = Session {
            conn,
            path: path.to_owned(),
            id,
            next_id: 1,
            body: Vec::with_capacity(512),
        };
        let response = session
            .post(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_vec())
            .await?;
        if !(200..300).contains(&response.status) {
            return Err(format!("initialized: HTTP {}", response.status));
        }
        Ok(session)
    }

    async fn post(&mut self, body: Vec<u8>) -> Result<Response, Error> {
        self.body = body;
        let headers = [
            ACCEPT,
            CONTENT_TYPE,
            ("Mcp-Session-Id", self.id.as_str()),
            ("MCP-Protocol-Version", PROTOCOL_VERSION),
        ];
        self.conn
            .request("POST", &self.path, &headers, &self.body)
            .await
    }

    /// Sends a request and returns the raw answer (checked for HTTP 200).
    async fn rpc(&mut self, method: &str, params: &str) -> Result<Response, Error> {
        let id = self.next_id;
        self.next_id += 1;
        let mut body = std::mem::take(&mut self.body);
        body.clear();
        use std::io::Write;
        let _ = write!(
            body,
            r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#
        );
        let response = self.post(body).await?;
        if response.status != 200 {
            return Err(format!(
                "{method}: HTTP {} {}",
                response.status,
                String::from_utf8_lossy(&response.body[..response.body.len().min(300)])
            ));
        }
        Ok(response)
    }

    /// `tools/call` of `tool` with `{"message": "hello"}`; a result with
    /// `isError: true` counts as an error.
    pub async fn call(&mut self, tool: &str) -> Result<(), Error> {
        let params = format!(r#"{{"name":"{tool}","arguments":{{"message":"hello"}}}}"#);
        let response = self.rpc("tools/call", &params).await?;
        let result: CallResult = rpc_result(rpc_payload(&response)?)?;
        if result.is_error == Some(true) {
            return Err(format!(
                "tools/call {tool}: isError: {}",
                String::from_utf8_lossy(rpc_payload(&response)?)
            ));
        }
        Ok(())
    }

    /// Lists every tool (following cursors); returns (tools, pages).
    ///
    /// A full JSON parse of a 1,000-tool answer would cost the load
    /// generator about as much CPU as the gateway spends producing it, so
    /// this checks the answer is a result, counts tools by their one
    /// `"inputSchema"` key each, and pulls out `nextCursor` by search.
    pub async fn list_all_tools(&mut self) -> Result<(usize, usize), Error> {
        let mut cursor: Option<String> = None;
        let mut tools = 0;
        for pages in 1..=1000 {
            let params = match &cursor {
                None => "{}".to_owned(),
                Some(c) => format!(r#"{{"cursor":{}}}"#, serde_json::Value::from(c.as_str())),
            };
            let response = self.rpc("tools/list", &params).await?;
            let payload = rpc_payload(&response)?;
            let text = std::str::from_utf8(payload).map_err(|e| format!("tools/list: {e}"))?;
            let head = &text[..text.len().min(64)];
            if !head.contains("\"result\"") {
                return Err(format!(
                    "tools/list: not a result: {}",
                    &text[..text.len().min(300)]
                ));
            }
            tools += text.matches("\"inputSchema\"").count();
            cursor = text.rfind("\"nextCursor\":\"").map(|i| {
                let rest = &text[i + "\"nextCursor\":\"".len()..];
                rest[..rest.find('"').unwrap_or(rest.len())].to_owned()
            });
            if cursor.is_none() {
                return Ok((tools, pages));
            }
        }
        Err("tools/list: more than 1000 pages".into())
    }

    /// A session opened earlier (by id), on `conn`.
    pub fn attach(conn: Conn, path: &str, id: String) -> Session {
        Session {
            conn,
            path: path.to_owned(),
            id,
            next_id: 1_000_000,
            body: Vec::with_capacity(512),
        }
    }

    /// The connection and the session id, leaving the session open.
    pub fn into_parts(self) -> (Conn, String) {
        (self.conn, self.id)
    }

    /// DELETE the session.
    pub async fn close(mut self) -> Result<Conn, Error> {
        let headers = [
            ("Mcp-Session-Id", self.id.as_str()),
            ("MCP-Protocol-Version", PROTOCOL_VERSION),
        ];
        let response = self
            .conn
            .request("DELETE", &self.path, &headers, b"")
            .await?;
        if !(200..300).contains(&response.status) {
            return Err(format!("DELETE: HTTP {}", response.status));
        }
        Ok(self.conn)
    }
}

/// GET `path` and return the status.
pub async fn get_status(addr: SocketAddr, path: &str) -> Result<u16, Error> {
    let mut conn = Conn::new(addr);
    Ok(conn.request("GET", path, &[], b"").await?.status)
}

/// `GET path`'s body as text.
pub async fn get_text(addr: SocketAddr, path: &str) -> Result<String, Error> {
    let mut conn = Conn::new(addr);
    let response = conn.request("GET", path, &[], b"").await?;
    Ok(String::from_utf8_lossy(&response.body).into_owned())
}

/// One MCP session with a stdio server (newline-delimited JSON-RPC) the
/// benchmark spawned itself: the "direct" side of the stdio scenario.
pub struct StdioSession {
    pub child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::BufReader<tokio::process::ChildStdout>,
    line: String,
    next_id: u64,
}

impl StdioSession {
    pub async fn spawn(program: &std::path::Path, args: &[&str]) -> Result<StdioSession, Error> {
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .env_remove("RUST_LOG")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", program.display()))?;
        let stdin = child.stdin.take().unwrap();
        let stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
        let mut session = StdioSession {
            child,
            stdin,
            stdout,
            line: String::new(),
            next_id: 1,
        };
        let init = format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{PROTOCOL_VERSION}","capabilities":{{}},"clientInfo":{{"name":"junction-bench","version":"0"}}}}}}"#
        );
        session.send(&init).await?;
        session.answer().await?;
        session
            .send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await?;
        Ok(session)
    }

    async fn send(&mut self, message: &str) -> Result<(), Error> {
        let mut line = Vec::with_capacity(message.len() + 1);
        line.extend_from_slice(message.as_bytes());
        line.push(b'\n');
        self.stdin
            .write_all(&line)
            .await
            .map_err(|e| format!("stdio write: {e}"))
    }

    /// Reads lines until one with an `id` (a response), bounded.
    async fn answer(&mut self) -> Result<&str, Error> {
        use tokio::io::AsyncBufReadExt;
        for _ in 0..1000 {
            self.line.clear();
            let n = tokio::time::timeout(IO_TIMEOUT, self.stdout.read_line(&mut self.line))
                .await
                .map_err(|_| "stdio: no answer in time".to_owned())?
                .map_err(|e| format!("stdio read: {e}"))?;
            if n == 0 {
                return Err("stdio: server closed stdout".into());
            }
            if self.line.contains("\"id\"") {
                return Ok(&self.line);
            }
        }
        Err("stdio: 1000 lines without an answer".into())
    }

    pub async fn call(&mut self, tool: &str) -> Result<(), Error> {
        let id = self.next_id;
        self.next_id += 1;
        let message = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"message":"hello"}}}}}}"#
        );
        self.send(&message).await?;
        let answer = self.answer().await?;
        let result: CallResult = rpc_result(answer.as_bytes())?;
        if result.is_error == Some(true) {
            return Err(format!("tools/call {tool}: isError"));
        }
        Ok(())
    }
}
