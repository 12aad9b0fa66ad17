//! The HTTP surface: the MCP endpoint, `/healthz` and `/readyz`.
//!
//! The MCP endpoint is rmcp's Streamable HTTP service in session mode, with
//! the gateway's own Host and Origin allow-lists (idle sessions are ended
//! by the [`resumable`] sweep, not by rmcp's timer); each new client
//! session gets a fresh [`DownstreamSession`], and request streams survive
//! a dropped connection ([`resumable`]). [`serve`] takes an already
//! bound listener (tests bind port 0) and a shutdown future.

use std::{future::Future, sync::Arc};

use axum::{
    extract::State,
    http::StatusCode,
    response::IntoResponse,
    routing::{any, get},
    serve::ListenerExt,
    Json, Router,
};
use rmcp::transport::{
    streamable_http_server::session::local::LocalSessionManager, StreamableHttpServerConfig,
    StreamableHttpService,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{
    downstream::{hibernation::HibernationStore, DownstreamSession, ServedEndpoint},
    gateway::Gateway,
    header_names,
};
pub use connections::serve as serve_connections;
pub(crate) use json_guard::json_kind;
use lanes::Lanes;

pub mod admin;
mod admission;
mod answer_slot;
mod batch;
mod call_bypass;
mod connections;
mod cors;
mod host_check;
mod json_guard;
mod lane_dispatch;
pub mod lanes;
mod one_write;
mod priming;
mod resumable;
mod sse_endpoint;
mod status_page;
mod whole_body;

/// What rmcp keeps of a session's `GET` stream for its next `GET`.
pub(crate) use resumable::RMCP_EVENTS_KEPT;

/// Builds the app. Cancelling `shutdown` ends every MCP session and stream.
pub fn router(gateway: Arc<Gateway>, shutdown: CancellationToken) -> Router {
    let server = &gateway.config().server;
    let mut sessions = LocalSessionManager::default();
    // Idle sessions are ended by the gateway's sweep (`resumable`): rmcp's
    // timer would see only requests that reach its session worker, and
    // end sessions kept busy by quick answers.
    sessions.session_config.keep_alive = None;
    // What rmcp keeps of a session's `GET` stream while the gateway reads
    // none of it (before the session's first `GET`, after a wake), and
    // how many messages each of its streams buffers for a slow reader
    // before the session's worker waits (`resumable/standalone.rs`).
    sessions.session_config.channel_capacity = resumable::RMCP_EVENTS_KEPT;
    let mut mcp_config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(server.allowed_hosts.clone())
        .with_cancellation_token(shutdown.clone());
    mcp_config = match &server.allowed_origins {
        Some(origins) => mcp_config
            .with_allowed_origins(origins.clone())
            .enforce_origin_validation(),
        None => mcp_config.disable_allowed_origins(),
    };
    // `json_guard` enforces `[limits] max_body_size` (live) before rmcp
    // sees a body; rmcp's own cap only has to stay out of its way.
    mcp_config.max_request_body_bytes = usize::MAX;
    // Idle sessions sleep; rmcp wakes them through its session store.
    if gateway.hibernation().after().is_some() {
        mcp_config.session_store = Some(Arc::new(HibernationStore(gateway.hibernation().clone())));
    }
    let manager = Arc::new(resumable::ResumableSessions::new(
        &gateway,
        sessions,
        gateway.request_streams().clone(),
        gateway.task_tools().clone(),
        gateway.hibernation().clone(),
    ));
    resumable::spawn_sweeper(&manager);
    let factory_gateway = gateway.clone();
    let mcp = StreamableHttpService::new(
        move || {
            // Normally reserved by `admission::admit` for this request.
            let limit = factory_gateway.config().limits.max_sessions;
            // A session waking up already holds its place (its sleeper
            // kept the ticket); the one made here for it is dropped at
            // once. The flag is read on every call, so it never outlives
            // the restore that set it.
            let waking = resumable::take_waking();
            let limit = if waking { usize::MAX } else { limit };
            let ticket = admission::take_reserved_ticket()
                .or_else(|| factory_gateway.sessions().reserve(limit))
                .ok_or_else(|| std::io::Error::other("session limit reached"))?;
            Ok(DownstreamSession::new(factory_gateway.clone(), ticket))
        },
        manager.clone(),
        mcp_config,
    );
    // One service behind an `Arc`: `route_service` and each layer would
    // clone it per request, copying its Host/Origin allow-lists each time.
    let mcp = Arc::new(mcp);
    let endpoints_mcp = mcp.clone();
    let endpoints_sessions = manager.clone();
    let endpoints_gateway = gateway.clone();
    // The edge's checks, outermost first, stacked once here over concrete
    // services. As `Router::layer`s each wrapped a boxed route, and axum's
    // `from_fn` clones its inner service on every request: each request
    // cloned the boxed stack beneath every layer (~25 allocations).
    let edge = tower::ServiceBuilder::new()
        // Outermost: a foreign Host or Origin gets its 403 before any of
        // the gateway's own answers (rmcp checks too, but last; not for a
        // request `call_bypass` takes, whose Host is read alike by both).
        .layer(axum::middleware::from_fn_with_state(
            Edge {
                sessions: manager.clone(),
                allowed: host_check::Allowed {
                    hosts: host_check::AllowedHosts::new(&server.allowed_hosts),
                    origins: server.allowed_origins.clone().map(Into::into),
                },
            },
            session_answers,
        ))
        .layer(axum::middleware::from_fn_with_state(
            gateway.clone(),
            admission::admit,
        ))
        .layer(axum::middleware::from_fn_with_state(
            json_guard::BodyRules {
                limit: body_limit(&gateway),
                read_timeout: gateway.config().server.request_read_timeout,
                annotate: note_from_body,
                batches: Some(std::sync::Arc::new(batch::answer)),
            },
            json_guard::check_json_body,
        ))
        // Innermost: the session's place is reserved only for a body
        // `json_guard` has read and passed.
        .layer(axum::middleware::from_fn_with_state(
            gateway.clone(),
            admission::reserve_session,
        ));
    let main_sessions = manager.clone();
    let main_endpoint = edge.service(tower::service_fn(move |request: axum::extract::Request| {
        let mcp = mcp.clone();
        let sessions = main_sessions.clone();
        async move { Ok::<_, std::convert::Infallible>(serve_mcp(mcp, sessions, request).await) }
    }));
    // `[endpoints.NAME]`, read live: a reload adds and removes them.
    let named_endpoints = edge.service(tower::service_fn(
        move |mut request: axum::extract::Request| {
            let mcp = endpoints_mcp.clone();
            let sessions = endpoints_sessions.clone();
            let config = endpoints_gateway.config();
            // The name is read from the path, not with axum's `Path`: the
            // older transport's bridge (`sse_endpoint.rs`) passes requests
            // on from its own route, whose captured segment they carry.
            let name = endpoint_segment(request.uri().path()).to_owned();
            let served = config
                .endpoint(&name)
                .map(|endpoint| ServedEndpoint(endpoint.name.clone()));
            async move {
                let Some(served) = served else {
                    return Ok::<_, std::convert::Infallible>(no_such_endpoint(&name));
                };
                request.extensions_mut().insert(served);
                Ok(serve_mcp(mcp, sessions, request).await)
            }
        },
    ));
    let mcp: Router = Router::new()
        .route_service(&server.path, main_endpoint)
        .route_service(
            &crate::config::endpoint_path(&server.path, "{endpoint}"),
            named_endpoints,
        );
    let older_transport = server.sse_path.clone().map(|sse_path| {
        let endpoint = sse_endpoint::SseEndpoint::new(gateway.clone(), mcp.clone(), shutdown);
        Router::new()
            .route(&sse_path, any(sse_endpoint::SseEndpoint::handle))
            .route(
                &crate::config::endpoint_path(&sse_path, "{endpoint}"),
                any(sse_endpoint::SseEndpoint::handle_endpoint),
            )
            .with_state(endpoint)
            .layer(axum::middleware::from_fn_with_state(
                host_check::Allowed {
                    hosts: host_check::AllowedHosts::new(&server.allowed_hosts),
                    origins: server.allowed_origins.clone().map(Into::into),
                },
                host_check::require_allowed_host,
            ))
    });
    let admin_here = gateway.config().admin.enabled && gateway.config().admin.listen.is_none();
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(gateway.clone())
        .merge(mcp)
        .merge(older_transport.unwrap_or_default());
    if admin_here {
        let allowed = host_check::Allowed {
            hosts: host_check::AllowedHosts::new(&gateway.config().server.allowed_hosts),
            origins: None,
        };
        app.merge(
            admin::router(gateway).layer(axum::middleware::from_fn_with_state(
                allowed,
                host_check::require_allowed_host,
            )),
        )
    } else {
        app
    }
}

/// rmcp's Streamable HTTP service, as the gateway runs it.
type McpService = StreamableHttpService<DownstreamSession, resumable::ResumableSessions>;

/// One request to the MCP endpoint (the main one, or an `[endpoints]` one
/// with its [`ServedEndpoint`] noted), through rmcp's service.
async fn serve_mcp(
    mcp: Arc<McpService>,
    sessions: Arc<resumable::ResumableSessions>,
    request: axum::extract::Request,
) -> axum::response::Response {
    // Boxed: hyper allocates a slot the size of this future for every
    // open connection, busy or idle. With rmcp's `handle` inline, adding
    // the answer slot grew idle sessions (each with its connection) by
    // ~9 KiB.
    let is_post = request.method() == axum::http::Method::POST;
    let expects_priming = priming::expects_priming(
        request.headers(),
        request.extensions().get::<priming::RequestedVersion>(),
    );
    if !is_post {
        let response = Box::pin(mcp.handle(request))
            .await
            .map(axum::body::Body::new);
        return match expects_priming {
            true => response,
            false => priming::without_priming(response),
        };
    }
    let handle = Box::pin(async move {
        match call_bypass::serve(&mcp.config, &sessions, request).await {
            Ok(response) => response,
            Err(request) => mcp.handle(request).await.map(axum::body::Body::new),
        }
    });
    // One deadline for both waits: a quick call's answer
    // (`downstream/quick_call.rs`) and a quick SSE stream.
    let deadline = tokio::time::Instant::now() + one_write::HOLD;
    let response = answer_slot::around(deadline, handle).await;
    let response = one_write::gather_quick_answer(response, deadline).await;
    match expects_priming {
        true => response,
        false => priming::without_priming(response),
    }
}

/// NAME of a request to `{path}/NAME`: its last segment as it is (not
/// percent-decoded: `%69de` is not `ide`).
fn endpoint_segment(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The answer on `{path}/NAME` for a NAME no `[endpoints]` table has.
fn no_such_endpoint(name: &str) -> axum::response::Response {
    // Quoted and cut: the path is the client's to choose.
    let name: String = name.chars().take(64).collect();
    let message = format!("Not Found: no endpoint named {name:?} (see [endpoints] in the config)");
    (StatusCode::NOT_FOUND, message).into_response()
}

/// Binds `[admin] listen`, if the admin endpoints have an address of their
/// own. Done before the gateway starts anything: a port taken fails the
/// start cleanly, before any child runs or "listening" is announced.
pub async fn bind_admin(
    config: &crate::config::Config,
) -> std::io::Result<Option<tokio::net::TcpListener>> {
    match config.admin.listen {
        Some(address) if config.admin.enabled => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .map_err(|error| {
                    std::io::Error::new(
                        error.kind(),
                        format!("cannot listen on {address} (admin.listen): {error}"),
                    )
                })?;
            Ok(Some(listener))
        }
        _ => Ok(None),
    }
}

/// Serves on `lanes` serving threads (see [`lanes`]) until `shutdown`
/// resolves, then stops accepting, ends the MCP sessions, and waits for
/// open requests to finish. With `admin_listener` (`[admin] listen`, see [`bind_admin`]),
/// `/metrics` and `/status` are served there instead.
///
/// The lanes come back still running what they started: close them once
/// the gateway has shut its sessions down.
pub async fn serve(
    listener: tokio::net::TcpListener,
    admin_listener: Option<tokio::net::TcpListener>,
    gateway: Arc<Gateway>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    lanes: usize,
) -> std::io::Result<Lanes> {
    if let Some(listener) = &admin_listener {
        crate::telemetry::say(
            "INFO",
            &format!(
                "junction admin listening on {} (/metrics, /status)",
                listener.local_addr()?
            ),
        );
    }
    let sessions_token = CancellationToken::new();
    let app = router(gateway.clone(), sessions_token.clone());
    let stop_accepting = CancellationToken::new();
    let read_timeout = gateway.config().server.request_read_timeout;
    let admin = admin_listener.map(|listener| {
        let app = admin::router(gateway.clone());
        let stopped = stop_accepting.clone().cancelled_owned();
        tokio::spawn(connections::serve(
            listener.tap_io(no_delay),
            app,
            read_timeout,
            stopped,
        ))
    });
    let lane_listeners = lane_dispatch::split(listener, lanes, no_delay, stop_accepting.clone())?;
    let mut lanes = Lanes::start(
        lane_listeners
            .into_iter()
            .map(|listener| {
                let app = app.clone();
                let stop_accepting = stop_accepting.clone();
                move || async move {
                    let stopped = stop_accepting.cancelled_owned();
                    connections::serve(listener, app, read_timeout, stopped).await;
                    Ok(())
                }
            })
            .collect(),
    )?;
    tokio::select! {
        () = shutdown => {}
        // Lanes serve until told to stop; one that ended on its own failed.
        () = lanes.one_ended() => {}
    }
    // New work is refused from here; requests in flight get the grace
    // period to be answered.
    gateway.drain().await;
    // Long-lived SSE streams would hold graceful shutdown open.
    sessions_token.cancel();
    stop_accepting.cancel();
    let served = lanes.served().await;
    if let Some(admin) = admin {
        let _ = admin.await;
    }
    served.map(|()| lanes)
}

/// `[limits] max_body_size` as it is now.
fn body_limit(gateway: &Arc<Gateway>) -> json_guard::BodyLimit {
    let gateway = Arc::downgrade(gateway);
    Arc::new(move || {
        gateway
            .upgrade()
            .map_or(crate::config::defaults::MAX_BODY_SIZE, |gateway| {
                gateway.config().limits.max_body_size
            })
    })
}

/// What the layers past `json_guard` need from a body: a `tools/call`'s
/// `task` (2025-11-25), for which rmcp's model has no place, reaches the
/// session as a request extension; so does the version an `initialize`
/// asks for, which decides whether its stream is primed (`priming.rs`).
fn note_from_body(
    body: &[u8],
    headers: &axum::http::HeaderMap,
    extensions: &mut axum::http::Extensions,
) {
    let version = headers
        .get(&header_names::MCP_PROTOCOL_VERSION)
        .map(axum::http::HeaderValue::as_bytes);
    if let Some(task) = crate::downstream::tasks::task_augmentation(body, version) {
        extensions.insert(task);
    }
    // Only an `initialize` goes without a session: nothing to look for
    // in the bodies of a session's requests.
    if !headers.contains_key(&header_names::MCP_SESSION_ID)
        && memchr::memmem::find(body, b"\"initialize\"").is_some()
    {
        #[derive(serde::Deserialize)]
        struct Initialize {
            method: String,
            params: Option<Params>,
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Params {
            protocol_version: Option<String>,
        }
        if let Ok(Initialize {
            method,
            params: Some(Params {
                protocol_version: Some(version),
            }),
        }) = serde_json::from_slice(body)
        {
            if method == "initialize" {
                extensions.insert(priming::RequestedVersion(version));
            }
        }
    }
}

/// What the MCP endpoint's outermost layer needs: the sessions, and the
/// `Host`/`Origin` allow-lists it checks first. One layer, not two: the
/// check as a layer of its own, outermost, cost every idle session
/// 3.5 KiB more resident memory (`bench --only memory`: 63.2 KiB each at
/// 10,000 awake, 66.8 with it; cause not traced; a layer further in,
/// `reserve_session`, cost 0.5).
#[derive(Clone)]
struct Edge {
    sessions: Arc<resumable::ResumableSessions>,
    allowed: host_check::Allowed,
}

/// The `Host`/`Origin` check ([`host_check::refusal`]), then the answers
/// for a session id the gateway does not know, where rmcp's own
/// answer is not the spec's.
///
/// rmcp answers a session DELETE with 202, known session or not. The
/// spec wants 404 for a session that is unknown (or already ended), and
/// the Python SDK treats anything but 200/204 as a failed termination and
/// warns, so: 404 for an unknown session, 204 for one ended (it is gone,
/// there is no body). The Host and Origin checks, and rmcp's protocol
/// version check, answer first either way.
///
/// A POST whose body `json_guard` refuses never reaches rmcp's session
/// check; if it names a session that is unknown, it gets rmcp's
/// 404 too: the client has to start a new session whatever its body, and
/// a 400 would have it fix the body and send it to the dead session again.
/// Only refused bodies pay for the lookup, and (before they are read)
/// bodies over 64 KiB or of no stated length, see [`answer_for_session`].
async fn session_answers(
    axum::extract::State(edge): axum::extract::State<Edge>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if let Some(refused) = host_check::refusal(&edge.allowed, &request) {
        return refused;
    }
    // An id that is not text names no session to rmcp, which then takes a
    // POST for a new session's, while the gateway's own checks (the body
    // bounds of a request outside a session, the early lookup of a large
    // body's session) saw a session. Refused first, the body dropped
    // unparsed (read, so the connection stays usable), so that everything
    // after agrees: a header present is text.
    if request
        .headers()
        .get(&header_names::MCP_SESSION_ID)
        .is_some_and(|id| id.to_str().is_err())
    {
        crate::telemetry::metrics().count_refused(crate::telemetry::metrics::Refusal::Malformed);
        json_guard::discard(request.into_body()).await;
        return (
            StatusCode::BAD_REQUEST,
            "Bad Request: Mcp-Session-Id must be visible ASCII text",
        )
            .into_response();
    }
    // A page's request, its origin on the allow-list: the browser reads
    // the answer only if it says so. Not with the check off (`["*"]`):
    // that would let every website a user visits drive the gateway (and
    // run its stdio tools) from the user's browser.
    let origin = match &edge.allowed.origins {
        Some(_) => request.headers().get(axum::http::header::ORIGIN).cloned(),
        None => None,
    };
    let names_session = request
        .headers()
        .contains_key(&header_names::MCP_SESSION_ID);
    let response = match origin {
        None => answer_for_session(&edge, request, next).await,
        Some(origin) => {
            if let Some(preflight) = cors::preflight(request.method(), request.headers(), &origin) {
                return preflight;
            }
            let mut response = answer_for_session(&edge, request, next).await;
            cors::allow(&mut response, origin);
            response
        }
    };
    // A session that has ended (or never was), whoever answered so: the
    // gateway here, or rmcp.
    if names_session && response.status() == StatusCode::NOT_FOUND {
        crate::telemetry::metrics()
            .count_refused(crate::telemetry::metrics::Refusal::UnknownSession);
    }
    response
}

/// A `GET` resuming (`last_event_id`) a stream that cannot be resumed is
/// refused, not answered with the empty stream rmcp answers: a client
/// takes an empty stream for one to open again, and the TypeScript SDK
/// (which resumes after any error answer, taking it for none) then opens
/// a second `GET` stream (see `resumable/mod.rs`). A stream of the
/// session's that has ended gets 405, the answer the spec gives a `GET`
/// with no stream to give: the TypeScript SDK resumes the stream of every
/// call its user cancelled (no answer ever comes on it), and took a 400
/// for an error to report, twice; it and rmcp's client stop at a 405.
/// (Streams are numbered per session: an id of another session's stream
/// names this session's stream of that number, if it has had one.) An
/// ended stream kept unread past its minute gets 405 too: what it held is
/// gone. Any other id (never given out, none of the gateway's) gets 400.
/// An unknown session is left to rmcp's 404.
async fn refuse_unknown_resume(
    sessions: &resumable::ResumableSessions,
    session: Option<&rmcp::transport::streamable_http_server::session::SessionId>,
    last_event_id: Option<String>,
) -> Option<axum::response::Response> {
    let (session, last_event_id) = (session?, last_event_id?);
    if sessions.can_resume(session, &last_event_id) || !sessions.knows_session(session).await {
        return None;
    }
    if sessions.names_ended_stream(session, &last_event_id) {
        return Some(
            (
                StatusCode::METHOD_NOT_ALLOWED,
                [(axum::http::header::ALLOW, "GET, POST, DELETE")],
                "Method Not Allowed: the stream Last-Event-ID names has ended; nothing more will be sent on it",
            )
                .into_response(),
        );
    }
    Some(
        (
            StatusCode::BAD_REQUEST,
            "Bad Request: Last-Event-ID names no stream of this session that can be resumed",
        )
            .into_response(),
    )
}

/// Bodies longer than this (or of no stated length) are let in only for a
/// session that exists.
const LOOK_UP_SESSION_FIRST_ABOVE: usize = 64 * 1024;

/// [`session_answers`] once the request is let in.
async fn answer_for_session(
    edge: &Edge,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let sessions = &edge.sessions;
    let method = request.method().clone();
    let session = request
        .headers()
        .get(&header_names::MCP_SESSION_ID)
        .and_then(|id| id.to_str().ok())
        .map(rmcp::transport::streamable_http_server::session::SessionId::from);
    if method != axum::http::Method::DELETE && method != axum::http::Method::POST {
        let resumes = (method == axum::http::Method::GET)
            .then(|| {
                // Bytes past ASCII are in no id the gateway gives out: kept
                // (lossily) so the resume is refused, where rmcp would take
                // an id it cannot read for no id and open a fresh stream.
                let id = request.headers().get(&header_names::LAST_EVENT_ID)?;
                Some(String::from_utf8_lossy(id.as_bytes()).into_owned())
            })
            .flatten();
        if let Some(refused) = refuse_unknown_resume(sessions, session.as_ref(), resumes).await {
            return refused;
        }
        let response = next.run(request).await;
        return without_internal_details(sessions, session.as_ref(), response).await;
    }
    if method == axum::http::Method::POST {
        // A large body is parsed (by the guard, then rmcp) into many times
        // its size: for a session that does not exist, say so first, so
        // that posts to made-up sessions cost no more than reading them.
        // Small ones, nearly all, skip the lookup; rmcp checks them.
        if let Some(id) = &session {
            let large = request
                .headers()
                .get(axum::http::header::CONTENT_LENGTH)
                .and_then(|length| length.to_str().ok()?.parse::<usize>().ok())
                .is_none_or(|length| length > LOOK_UP_SESSION_FIRST_ABOVE);
            if large && !sessions.knows_session(id).await {
                json_guard::discard(request.into_body()).await;
                return session_not_found();
            }
        }
        let response = next.run(request).await;
        if response
            .extensions()
            .get::<json_guard::BodyRefused>()
            .is_none()
        {
            return without_internal_details(sessions, session.as_ref(), response).await;
        }
        // Counted here: `json_guard` uses nothing of the crate (the fuzz
        // crate compiles it alone). A 200 is a params error, answered.
        use crate::telemetry::metrics::Refusal;
        let refusal = match response.status() {
            StatusCode::PAYLOAD_TOO_LARGE => Some(Refusal::BodyTooLarge),
            StatusCode::REQUEST_TIMEOUT => Some(Refusal::BodyTooSlow),
            StatusCode::BAD_REQUEST => Some(Refusal::Malformed),
            _ => None,
        };
        if let Some(id) = &session {
            if !sessions.knows_session(id).await {
                return session_not_found();
            }
        }
        if let Some(refusal) = refusal {
            crate::telemetry::metrics().count_refused(refusal);
        }
        return response;
    }
    let known = match &session {
        Some(id) => sessions.knows_session(id).await,
        None => true,
    };
    let mut response = next.run(request).await;
    if response.status() == StatusCode::ACCEPTED {
        if known {
            *response.status_mut() = StatusCode::NO_CONTENT;
        } else {
            response = session_not_found();
        }
    }
    response
}

/// rmcp's 500 answer, as a client should get it. rmcp checks the session,
/// then hands the request to it: a session that ended in between (a
/// `DELETE` racing the request) fails the second step with 500, its id in
/// the text; the client must start a new session, so it gets what an
/// unknown session gets (404). Any other 500 keeps its status, its text
/// with session ids fingerprinted (as in the log): an error text sent to a
/// client names no session.
async fn without_internal_details(
    sessions: &resumable::ResumableSessions,
    session: Option<&rmcp::transport::streamable_http_server::session::SessionId>,
    response: axum::response::Response,
) -> axum::response::Response {
    if response.status() != StatusCode::INTERNAL_SERVER_ERROR {
        return response;
    }
    if let Some(id) = session {
        if !sessions.knows_session(id).await {
            return session_not_found();
        }
    }
    let (mut parts, body) = response.into_parts();
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    let text = axum::body::to_bytes(body, INTERNAL_ERROR_TEXT_MAX)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let text = crate::telemetry::redact::fingerprint_session_ids(&text).unwrap_or(text);
    axum::response::Response::from_parts(parts, axum::body::Body::from(text))
}

/// Bound on the text of a 500 answer read to scrub it (rmcp's are a line).
const INTERNAL_ERROR_TEXT_MAX: usize = 64 * 1024;

/// As rmcp answers any other request for an unknown session.
fn session_not_found() -> axum::response::Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}

/// Turns off Nagle's algorithm on an accepted connection. rmcp writes an SSE
/// answer in more than one write; with Nagle on, the last one waits for the
/// client's delayed ACK (~40 ms on Linux) on every request.
pub fn no_delay(stream: &mut tokio::net::TcpStream) {
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "cannot set TCP_NODELAY");
    }
}

async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, "ok\n")
}

/// Readiness, and each mount's state and last error. A probe may call by
/// any Host (the pod's address); what the mounts are and why they fail is
/// told only to an allowed one, as the operator pages are (DNS rebinding).
async fn readyz(
    State(gateway): State<Arc<Gateway>>,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
) -> impl IntoResponse {
    // Draining (SIGTERM received): new work is refused with 503, so a load
    // balancer that routes by this probe must stop sending any.
    let draining = gateway.is_draining();
    let ready = gateway.is_ready() && !draining;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    // Parsed per probe: probes are rare, requests to the MCP endpoint not.
    let allowed = host_check::AllowedHosts::new(&gateway.config().server.allowed_hosts);
    if !host_check::host_allowed(&uri, &headers, &allowed) {
        return (status, Json(json!({ "ready": ready })));
    }
    let mounts: Vec<_> = gateway
        .mounts()
        .iter()
        .map(|mount| {
            let status = mount.status();
            json!({
                "name": mount.config.name.as_str(),
                "transport": mount.config.transport.kind(),
                "isolation": mount.config.isolation.as_str(),
                "state": status.phase,
                "last_error": status.last_error,
                "restarts": status.restarts,
            })
        })
        .collect();
    let mut body = json!({ "ready": ready, "mounts": mounts });
    if draining {
        body["draining"] = json!(true);
    }
    (status, Json(body))
}
