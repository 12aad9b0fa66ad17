//! The transport of a stdio upstream: its child process and its pipes.
//!
//! rmcp's `TokioChildProcess` owns the child's stdout inside its transport,
//! where nothing can see the bytes before rmcp parses them; the gateway
//! needs some answers verbatim ([`super::raw`]). So this is the same
//! newline-delimited JSON transport (rmcp's `AsyncRwTransport`) over the
//! child's pipes, with stdout read through a [`TapReader`], plus the stdio
//! shutdown sequence of the MCP spec on close: close the child's stdin,
//! wait, SIGTERM, wait, SIGKILL.

use std::{future::Future, sync::Arc, time::Duration};

use process_wrap::tokio::{ChildWrapper, CommandWrap};
use rmcp::{
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::{async_rw::AsyncRwTransport, Transport},
    RoleClient,
};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};

use super::raw::{RawAnswers, TapReader};

/// What a stdio upstream inherits of the gateway's environment: what the
/// MCP SDKs' stdio clients pass on (`HOME`, `LOGNAME`, `PATH`, `SHELL`,
/// `TERM`, `USER`), plus locale, time zone, temporary directory, proxy, CA,
/// package-index and cache settings, which tools such as `npx` and `uvx`
/// need to run and fetch behind a corporate proxy. Nothing else: the gateway's environment holds
/// other upstreams' tokens (`${VAR}` in their headers), OTLP headers and
/// `JUNCTION_*` overrides, which are not for a third-party server to read.
/// A mount's own `env` comes on top (`env = { KEY = "${KEY}" }` passes one
/// on explicitly).
const INHERITED_ENV: &[&str] = &[
    "HOME",
    "LOGNAME",
    "PATH",
    "SHELL",
    "TERM",
    "USER",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    // Where `npx`, `uvx` and pip fetch packages from and keep them (a
    // private registry, a writable cache on a read-only root).
    "npm_config_registry",
    "NPM_CONFIG_REGISTRY",
    "npm_config_cache",
    "NPM_CONFIG_CACHE",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "UV_EXTRA_INDEX_URL",
    "UV_CACHE_DIR",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
];

/// The part of the gateway's environment a stdio upstream starts with
/// (see [`INHERITED_ENV`]).
pub fn inherited_env() -> impl Iterator<Item = (&'static str, std::ffi::OsString)> {
    INHERITED_ENV
        .iter()
        .filter_map(|name| Some((*name, std::env::var_os(name)?)))
}

/// How long a child gets to exit after its stdin closes, and again after
/// SIGTERM.
const EXIT_WAIT: Duration = Duration::from_secs(3);

pub struct ChildTransport {
    transport: AsyncRwTransport<RoleClient, TapReader<ChildStdout>, ChildStdin>,
    /// `None` once it has exited or been killed. Dropping it kills it
    /// (`KillOnDrop`); the process-group guard takes care of the rest.
    child: Option<Box<dyn ChildWrapper>>,
}

impl ChildTransport {
    /// Spawns `command` with piped stdio. Returns the transport and the
    /// child's stderr.
    pub fn spawn(
        mut command: CommandWrap,
        raw: Arc<RawAnswers>,
        malformed: super::malformed::MalformedLines,
    ) -> std::io::Result<(Self, Option<ChildStderr>)> {
        use std::process::Stdio;
        command
            .command_mut()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin().take(), child.stdout().take()) else {
            return Err(std::io::Error::other("the child's stdio is not piped"));
        };
        let stderr = child.stderr().take();
        let stdout = TapReader::new(stdout, raw).checking(malformed);
        let transport = AsyncRwTransport::new_client(stdout, stdin);
        Ok((
            Self {
                transport,
                child: Some(child),
            },
            stderr,
        ))
    }

    pub fn id(&self) -> Option<u32> {
        self.child.as_ref()?.id()
    }

    async fn shut_down(&mut self) -> std::io::Result<()> {
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        // EOF on stdin is a stdio server's signal to exit. Closing waits
        // for the pipe's writer, which a write still blocked on a child that
        // stopped reading holds for ever: past the wait, the signals follow
        // (and the blocked write fails once the child is gone).
        match tokio::time::timeout(EXIT_WAIT, self.transport.close()).await {
            Ok(closed) => closed?,
            Err(_) => tracing::debug!("an upstream's stdin is blocked; signalling it"),
        }
        if exited_within(child, EXIT_WAIT).await {
            self.child = None;
            return Ok(());
        }
        if let Err(error) = child.signal(nix::libc::SIGTERM) {
            tracing::debug!(%error, "could not send SIGTERM to an upstream");
        } else if exited_within(child, EXIT_WAIT).await {
            self.child = None;
            return Ok(());
        }
        let killed = Box::into_pin(child.kill()).await;
        self.child = None;
        killed
    }
}

async fn exited_within(child: &mut Box<dyn ChildWrapper>, limit: Duration) -> bool {
    matches!(tokio::time::timeout(limit, child.wait()).await, Ok(Ok(_)))
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.transport.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.transport.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.shut_down()
    }
}
