//! Opening an upstream session over the mount's transport.
//!
//! Stdio children run in their own process group (so a wrapper such as
//! `npx` cannot leave its real server behind when killed) with stderr read
//! line by line into the gateway's log under the mount's name. HTTP
//! upstreams get the configured headers on every request, and a direct
//! path for `tools/call` ([`super::direct_call`]) beside rmcp's client. Either way the
//! rmcp client's response cache is off: the gateway keeps its own cache and
//! must never be served a stale list.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::{
    model::{ClientConfig, ProtocolVersion},
    service::ClientInitializeError,
    transport::{
        common::client_side_sse::ExponentialBackoff,
        streamable_http_client::{
            StreamableHttpClientTransportConfig, StreamableHttpResponseLimits,
        },
        StreamableHttpClientTransport,
    },
    ClientCacheConfig, ServiceExt,
};

use super::{
    child::{self, ChildTransport},
    direct_call::{DirectCalls, INJECT_CAPACITY},
    http_client::{self, TracingHttpClient},
    legacy_sse::LegacySseTransport,
    ordered::OrderedTransport,
    process_group::ProcessGroupGuard,
    raw::RawAnswers,
    same_task_http, UpstreamHandler, UpstreamSession,
};
use crate::config::{MountConfig, Timeouts, UpstreamTransport};
use tokio_util::sync::CancellationToken;

/// How long a new HTTP upstream session waits for the server to answer the
/// `GET` of its message stream before it is used anyway (see
/// [`super::http_client::StandaloneStream`]). A server answers it at once or
/// with a 405; this only bounds one that does neither.
const STANDALONE_SETTLE_LIMIT: Duration = Duration::from_secs(1);

/// How many requests rmcp's client has open at once on one upstream HTTP
/// session (`tools/call` goes its own way and is not counted).
const UPSTREAM_POSTS_AT_ONCE: usize = 256;

/// The longest wait between two attempts to open a Streamable HTTP
/// session's message stream (`GET`) again. rmcp doubles the wait from 1 s
/// without a bound: after an outage of some minutes the stream would come
/// back as late again, and what the server sends on it (list changes,
/// resource updates, and the 404 that says a restarted server forgot the
/// session) would wait as long.
const MESSAGE_STREAM_RETRY_MAX: Duration = Duration::from_secs(10);

/// How rmcp reopens a broken message or answer stream: its default
/// doubling, capped at [`MESSAGE_STREAM_RETRY_MAX`].
pub(super) fn stream_retry() -> ExponentialBackoff {
    let mut backoff = ExponentialBackoff::default();
    backoff.max_delay = Some(MESSAGE_STREAM_RETRY_MAX);
    backoff
}

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    /// The spawn's own error would blame the command ("No such file or
    /// directory") for the directory it was to run in.
    #[error("cannot start `{command}` in {}: {source}", cwd.display())]
    Cwd {
        command: String,
        cwd: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("invalid header {0}")]
    Header(String),
    #[error("cannot build HTTP client: {0}")]
    HttpClient(String),
    #[error("initialize failed: {0}")]
    Initialize(String),
    #[error("no answer to initialize within {}", humantime::format_duration(*.0))]
    InitializeTimeout(Duration),
}

/// Starts an upstream session for `mount`, declaring `info` to the server.
/// `timeouts` are the mount's (its own overrides applied): a server that has
/// not answered `initialize` within `timeouts.initialize` is treated as
/// failed and its process group killed, so a hung upstream never holds a
/// client's first call forever.
pub async fn open(
    mount: &MountConfig,
    timeouts: Timeouts,
    handler: UpstreamHandler,
    live: Option<super::LiveHeaders>,
) -> Result<UpstreamSession, UpstreamError> {
    let ended = CancellationToken::new();
    let expired = CancellationToken::new();
    let raw = Arc::new(RawAnswers::default());
    // In a task of its own, outside any request's span: rmcp attaches the
    // span current when it starts a session to the session's loop and to
    // every task it spawns, for the session's life. Opened within a call
    // (a per-session upstream's first), that call's span was held open
    // until the session ended, and every later line the loop logged
    // carried that call's context. (Entering `Span::none()` would not do:
    // it leaves the current span current.) Aborted if the wait is given
    // up, which drops the start and kills what it spawned.
    let opening = {
        let (mount, ended, raw) = (mount.clone(), ended.clone(), raw.clone());
        let expired = expired.clone();
        tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
            start(&mount, timeouts, handler, ended, expired, raw, live).await
        }))
    };
    let started = tokio::time::timeout(timeouts.initialize, opening).await;
    let Started {
        service,
        pid,
        group,
        direct,
    } = match started {
        Ok(Ok(result)) => result?,
        Ok(Err(failed)) => {
            return Err(UpstreamError::Initialize(format!(
                "the start failed: {failed}"
            )))
        }
        Err(_) => return Err(UpstreamError::InitializeTimeout(timeouts.initialize)),
    };
    let peer = service.peer().clone();
    // The lifecycle: a client that does not speak the version the server
    // answered with should disconnect. rmcp takes any; carrying on, every
    // request named a version neither side may know.
    if let Some(version) = peer.peer_info().map(|info| info.protocol_version.clone()) {
        let spoken = ProtocolVersion::known_up_to(&OFFERED_VERSION);
        if !spoken.contains(&version) {
            let known: Vec<&str> = spoken.iter().map(ProtocolVersion::as_str).collect();
            return Err(UpstreamError::Initialize(format!(
                "the server answered with protocol version {:?}, which the gateway does not speak ({})",
                version.as_str(),
                known.join(", ")
            )));
        }
    }
    // A stdio child's exit ends the session, though a process it started
    // may hold its stdout open (Linux: pidfds).
    #[cfg(target_os = "linux")]
    if let Some(pid) = pid {
        super::exit_watch::watch(pid, mount.name.as_str(), peer.clone(), ended.clone());
    }
    let relay = service.service().relay().clone();
    let mut no_cache = ClientCacheConfig::default();
    no_cache.enabled = false;
    no_cache.serve_stale_on_error = false;
    peer.set_response_cache_config(no_cache).await;
    // Counted with no await before the session that uncounts it on drop:
    // an open abandoned at that await (a retire, a shutdown) left the
    // gauge one too high for good.
    crate::telemetry::metrics().upstream_session_opened(mount.name.as_str());
    static NEXT_SESSION_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    Ok(UpstreamSession {
        id: NEXT_SESSION_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        mount: mount.name.clone(),
        network_transport: mount.transport.network_transport(),
        peer,
        service: Mutex::new(Some(service)),
        closing: Default::default(),
        pid,
        relay,
        raw,
        group: Mutex::new(group),
        ended,
        expired,
        direct,
        counted: std::sync::atomic::AtomicBool::new(true),
        checking_alive: Default::default(),
        unresponsive: Default::default(),
        held_until_closed: Default::default(),
        no_completion: Default::default(),
        on_unreachable: Default::default(),
        cancels_sending: Default::default(),
    })
}

type Running = rmcp::service::RunningService<rmcp::RoleClient, UpstreamHandler>;

/// A session that answered `initialize`.
struct Started {
    service: Running,
    pid: Option<u32>,
    group: ProcessGroupGuard,
    /// Streamable HTTP upstreams' hot path.
    direct: Option<Arc<DirectCalls>>,
}

async fn start(
    mount: &MountConfig,
    timeouts: Timeouts,
    handler: UpstreamHandler,
    ended: CancellationToken,
    expired: CancellationToken,
    raw: Arc<RawAnswers>,
    live: Option<super::LiveHeaders>,
) -> Result<Started, UpstreamError> {
    match &mount.transport {
        UpstreamTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let tag = super::detached::new_tag();
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args)
                .env_clear()
                .envs(child::inherited_env())
                .envs(env)
                .env(super::detached::TAG_VARIABLE, &tag);
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            let mut wrapped = CommandWrap::from(cmd);
            wrapped.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
            let (answers, malformed_answers) =
                tokio::sync::mpsc::channel(super::direct_call::INJECT_CAPACITY);
            let malformed = super::malformed::MalformedLines::new(mount.name.clone(), answers);
            let (process, stderr) = ChildTransport::spawn(wrapped, raw.clone(), malformed)
                .map_err(|source| {
                    // Which one it was: a spawn says only "not found".
                    // What `chdir` needs: a directory one may enter.
                    let cwd_unusable = cwd.as_ref().and_then(|cwd| {
                        let entered = match std::fs::metadata(cwd) {
                            Ok(found) if found.is_dir() => {
                                nix::unistd::access(cwd, nix::unistd::AccessFlags::X_OK)
                                    .map_err(std::io::Error::from)
                            }
                            Ok(_) => Err(std::io::Error::other("not a directory")),
                            Err(error) => Err(error),
                        };
                        entered.err().map(|error| (cwd.clone(), error))
                    });
                    match cwd_unusable {
                        Some((cwd, source)) => UpstreamError::Cwd {
                            command: mount.shown_command(command).to_owned(),
                            cwd,
                            source,
                        },
                        None => UpstreamError::Spawn {
                            command: mount.shown_command(command).to_owned(),
                            source,
                        },
                    }
                })?;
            let pid = process.id();
            // From here on, abandoning the start (timeout, shutdown) kills
            // the whole group.
            let group = ProcessGroupGuard::new(pid, Some(tag));
            if let Some(stderr) = stderr {
                tokio::spawn(super::stderr::log_lines(stderr, mount.name.clone()));
            }
            let transport = OrderedTransport::new(process, handler.relay().clone(), ended, raw)
                .with_injected_lines(malformed_answers)
                .giving_idless_errors_an_id(timeouts.request_ceiling);
            let service = handler.serve(transport).await.map_err(initialize_error)?;
            Ok(Started {
                service,
                pid,
                group,
                direct: None,
            })
        }
        UpstreamTransport::Sse { url, headers } => {
            let client = http_client_for(timeouts)?;
            let headers: reqwest::header::HeaderMap = header_map(headers)?.into_iter().collect();
            let (answers, malformed_answers) =
                tokio::sync::mpsc::channel(super::direct_call::INJECT_CAPACITY);
            let malformed = super::malformed::MalformedLines::new(mount.name.clone(), answers)
                .of_event_stream();
            let stream = LegacySseTransport::open(
                client,
                url,
                headers,
                mount.name.clone(),
                raw.clone(),
                malformed,
                expired,
                timeouts.request_ceiling,
                live,
            )
            .await
            .map_err(|error| {
                UpstreamError::Initialize(format!("cannot open the event stream: {error}"))
            })?;
            let transport = OrderedTransport::new(stream, handler.relay().clone(), ended, raw)
                .with_injected_lines(malformed_answers)
                .giving_idless_errors_an_id(timeouts.request_ceiling);
            let service = handler.serve(transport).await.map_err(initialize_error)?;
            Ok(Started {
                service,
                pid: None,
                group: ProcessGroupGuard::none(),
                direct: None,
            })
        }
        UpstreamTransport::StreamableHttp { url, headers } => {
            let custom_headers = header_map(headers)?;
            let client = http_client_for(timeouts)?;
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            config.custom_headers = custom_headers.clone();
            config.retry_config = Arc::new(stream_retry());
            // An expired session is the supervisor's to handle: a silent
            // re-initialization would drop the upstream's subscriptions
            // and (per-session mounts) its state without anyone noticing.
            config.reinit_on_expired_session = false;
            // rmcp's default, 16 POSTs at once per upstream session, is
            // a hidden queue on a shared mount: an upstream answering with
            // JSON holds its POST for the request's whole run, and with 16
            // slow requests (say, blocking `tasks/result`s) every other
            // request of every client on the mount waits, rmcp's loop
            // taking nothing meanwhile. Clients are bounded by `[limits]`
            // already; this only keeps a runaway bounded.
            config.max_concurrent_requests = UPSTREAM_POSTS_AT_ONCE;
            let (inject, injected) = tokio::sync::mpsc::channel(INJECT_CAPACITY);
            let direct = Arc::new(
                DirectCalls::new(
                    client.clone(),
                    inject,
                    handler.relay().clone(),
                    StreamableHttpResponseLimits::default(),
                    timeouts.connect,
                )
                .with_live_headers(live.clone()),
            );
            let (client, standalone) =
                TracingHttpClient::new(client, raw.clone(), direct.clone(), ended.clone(), expired);
            let client = client
                .with_live_headers(live)
                .with_configured_headers(custom_headers)
                .ending_when_unreachable(handler.ends_when_unreachable())
                .for_mount(mount.name.as_str());
            let refusal = client.handshake_refusal();
            let transport = OrderedTransport::new(
                StreamableHttpClientTransport::with_client(client, config),
                handler.relay().clone(),
                ended,
                raw,
            )
            .with_injected(injected);
            let service = handler.serve(transport).await.map_err(|error| {
                // rmcp says only that its channel closed when the server
                // refused `notifications/initialized`: said how, here.
                match (refusal.get(), initialize_error(error)) {
                    (Some(refusal), UpstreamError::Initialize(said)) => {
                        UpstreamError::Initialize(format!("{said} ({refusal})"))
                    }
                    (_, other) => other,
                }
            })?;
            if !standalone.settled(STANDALONE_SETTLE_LIMIT).await {
                tracing::debug!(
                    mount = %mount.name,
                    "the upstream has not answered the GET for its message stream yet; using the session anyway"
                );
            }
            Ok(Started {
                service,
                pid: None,
                group: ProcessGroupGuard::none(),
                direct: Some(direct),
            })
        }
    }
}

/// The mount's headers as reqwest takes them (validation has checked
/// them; a name or value that is still refused fails the open).
fn header_map(
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<HashMap<reqwest::header::HeaderName, reqwest::header::HeaderValue>, UpstreamError> {
    let mut map = HashMap::new();
    for (name, value) in headers {
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| UpstreamError::Header(name.clone()))?;
        let value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|_| UpstreamError::Header(name.to_string()))?;
        map.insert(name, value);
    }
    Ok(map)
}

/// The HTTP client of one upstream session.
fn http_client_for(timeouts: Timeouts) -> Result<reqwest::Client, UpstreamError> {
    reqwest::Client::builder()
        // No redirects: a redirect could carry the configured headers
        // (credentials) to another host.
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(timeouts.connect)
        // reqwest keeps idle connections 90 s; Node and uvicorn close them
        // after 5 s, and a request written just then fails (see
        // `same_task_http::DEFAULT_IDLE_LIFETIME`).
        .pool_idle_timeout(same_task_http::DEFAULT_IDLE_LIFETIME)
        .build()
        .map_err(|error| UpstreamError::HttpClient(error.to_string()))
}

fn initialize_error(error: ClientInitializeError) -> UpstreamError {
    UpstreamError::Initialize(match error {
        // rmcp's text for these names the transport's Rust type; the cause
        // is what an operator needs.
        ClientInitializeError::TransportError { error, context } => {
            let said = http_client::with_causes(&*error.error);
            // Only when it is so: a server that answered (an HTTP 404 to
            // the post) was reached.
            match http_client::cannot_connect(&error) {
                true => format!("cannot reach the server: {said}"),
                // rmcp's own log line ("worker quit with fatal") has the
                // cause when all it hands back is a closed channel.
                false => format!("its transport failed ({context}): {said}"),
            }
        }
        // rmcp's text shows the answer as Rust's debug dump.
        ClientInitializeError::ExpectedInitResult(_)
        | ClientInitializeError::ExpectedInitResponse(_) => {
            "its answer to initialize is not an initialize result (a required field is missing or of the wrong kind)".to_owned()
        }
        other => other.to_string(),
    })
}

/// The protocol version the gateway asks upstreams for, and the newest
/// it speaks with them. rmcp defaults to 2026-07-28, which has no
/// `initialize`; the gateway speaks the handshake era upstream.
const OFFERED_VERSION: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// The client identity and capabilities a session declares upstream.
pub fn client_config(capabilities: rmcp::model::ClientCapabilities) -> ClientConfig {
    let mut info = ClientConfig::new(
        capabilities,
        rmcp::model::Implementation::new("junction", env!("CARGO_PKG_VERSION")),
    );
    info.protocol_version = OFFERED_VERSION;
    info
}

#[cfg(test)]
mod tests {
    use rmcp::transport::common::client_side_sse::SseRetryPolicy;

    use super::*;

    /// An answer to `initialize` that is not an initialize result is said
    /// so, not dumped as Rust's debug text of what rmcp made of it.
    #[test]
    fn an_unreadable_initialize_answer_is_said_plainly() {
        let answer = rmcp::model::ServerResult::CustomResult(rmcp::model::CustomResult(
            serde_json::json!({"capabilities": "none"}),
        ));
        let said =
            initialize_error(ClientInitializeError::ExpectedInitResult(Some(answer))).to_string();
        assert!(said.contains("not an initialize result"), "{said}");
        assert!(!said.contains("CustomResult"), "{said}");
    }

    /// "cannot reach the server" only for a server that was not reached:
    /// a legacy SSE post answered 404 said so too.
    #[tokio::test]
    async fn an_initialize_refused_by_a_server_does_not_say_it_was_unreachable() {
        use crate::upstream::legacy_sse::{LegacySseTransport, PostError};
        let refused = PostError::Refused {
            status: 404,
            body: ": Could not find session".to_owned(),
        };
        let error = initialize_error(ClientInitializeError::transport::<LegacySseTransport>(
            refused,
            "send initialize",
        ));
        let said = error.to_string();
        assert!(
            said.contains("HTTP 404") && !said.contains("cannot reach"),
            "{said}"
        );

        // A connection refused is.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", closed.local_addr().unwrap());
        drop(closed);
        let unreachable = reqwest::Client::new().get(url).send().await.unwrap_err();
        let error = initialize_error(ClientInitializeError::transport::<LegacySseTransport>(
            PostError::Http(unreachable),
            "send initialize",
        ));
        assert!(
            error.to_string().contains("cannot reach the server"),
            "{error}"
        );
    }

    #[test]
    fn a_broken_message_stream_is_tried_again_at_least_every_ten_seconds() {
        let retry = stream_retry();
        assert_eq!(retry.retry(0), Some(Duration::from_secs(1)));
        assert_eq!(retry.retry(2), Some(Duration::from_secs(4)));
        // Without the cap, the eighth attempt would wait over four minutes.
        for attempt in 4..64 {
            assert_eq!(retry.retry(attempt), Some(MESSAGE_STREAM_RETRY_MAX));
        }
    }
}
