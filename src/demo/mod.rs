//! A small but real MCP server, `junction-demo`, built into the Junction binary.
//!
//! It has two jobs. The embedded default config mounts it twice (once
//! shared, once per session) so a newcomer immediately sees tool namespacing
//! and session isolation: `counter` and `remember`/`recall` keep state per
//! *process*, so the shared mount's state is visible to every client while
//! the per-session mount starts fresh for each one. It is also the upstream
//! fixture for the gateway's integration tests, which is why it has tools
//! that report the process id, fail on purpose, and return resource links
//! and embedded resources whose URIs the gateway must rewrite.
//!
//! It serves over stdio ([`run_stdio`]) or Streamable HTTP ([`run_http`]).

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
};

use rmcp::{
    handler::server::{
        prompt::PromptContext,
        router::{prompt::PromptRouter, tool::ToolRouter},
        tool::schema_for_output,
        wrapper::Parameters,
    },
    model::{
        CallToolResult, ContentBlock, ErrorData, GetPromptRequestParams, GetPromptResponse,
        GetPromptResult, Implementation, ListPromptsResult, ListResourceTemplatesResult,
        ListResourcesResult, ListToolsResult, PaginatedRequestParams, PromptMessage,
        ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
        ResourceContents, ResourceTemplate, Role, ServerCapabilities, ServerConfig,
    },
    prompt, prompt_router,
    service::{RequestContext, ServerInitializeError},
    tool, tool_handler, tool_router,
    transport::streamable_http_server::{
        session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
    },
    Peer, RoleServer, ServerHandler, ServiceExt,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

const README_URI: &str = "demo://readme";
const NOTES_PREFIX: &str = "demo://notes/";
const NOTES_TEMPLATE: &str = "demo://notes/{key}";
const BONUS_URI: &str = "demo://bonus";
const BONUS: &str = "bonus";

const README: &str = "\
junction-demo is a tiny MCP server that ships inside Junction.
Tools: echo, add, counter, remember, recall, pid, links, fail.
State (the counter and the remembered notes) lives in the server process:
a shared mount keeps one process for every client, a per-session mount
starts a fresh process for each client session.
Read demo://notes/<key> to see what was remembered under <key>;
subscribe to it to be told (resources/updated) when it changes.
";

/// Process-wide state. Every clone of [`DemoServer`] (for example one per
/// Streamable HTTP session) points at the same instance, so what one session
/// stores, another session of the same process can see.
#[derive(Debug, Default)]
struct State {
    counter: AtomicU64,
    notes: Mutex<HashMap<String, String>>,
    /// Over HTTP, the session manager, so `sessions` can count live
    /// sessions (tests check that a client's DELETE really ends one).
    http_sessions: std::sync::OnceLock<Arc<LocalSessionManager>>,
    /// How many `notifications/roots/list_changed` the client sent.
    roots_changes: AtomicU64,
    /// How many `slow` calls ended before finishing (cancelled by the
    /// client): lets tests see that a cancel reached this process.
    cancellations: AtomicU64,
    /// Whether the `bonus` tool, prompt and resource are listed;
    /// `toggle_bonus` flips it and announces all three lists changed, so
    /// tests can watch each kind of list change.
    bonus: AtomicBool,
    /// Resource subscriptions: URI → the sessions subscribed to it (by
    /// [`DemoServer::session`]) and where to tell them. `remember` tells
    /// the subscribers of the note it changed; the `subscriptions` tool
    /// lets tests see what a gateway holds here.
    subscriptions: Mutex<HashMap<String, HashMap<u64, Peer<RoleServer>>>>,
    /// Numbers the Streamable HTTP sessions, so each one's subscriptions
    /// are its own.
    next_session: AtomicU64,
    /// The last `logging/setLevel` a client sent this process: the
    /// `log_level` tool lets tests see what a gateway told it.
    log_level: Mutex<Option<rmcp::model::LoggingLevel>>,
}

impl State {
    fn note(&self, key: &str) -> Option<String> {
        self.notes().get(key).cloned()
    }

    fn notes(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        // A panic while holding the lock cannot leave the map half-updated
        // (every access is a single insert or get), so a poisoned lock is
        // still safe to use and the demo should keep serving.
        self.notes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn subscriptions(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<u64, Peer<RoleServer>>>> {
        // As with the notes: every access is one insert, remove or read.
        self.subscriptions.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The demo MCP server. Cheap to clone; clones share their state.
#[derive(Debug, Clone)]
pub struct DemoServer {
    state: Arc<State>,
    /// Which session of this process this clone serves (0 over stdio).
    session: u64,
    tool_router: ToolRouter<Self>,
    prompt_router: PromptRouter<Self>,
}

impl Default for DemoServer {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
struct EchoArgs {
    /// The text to send back.
    message: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct AddArgs {
    /// First addend.
    a: f64,
    /// Second addend.
    b: f64,
}

/// Only used to derive the `add` tool's output schema; the value itself is
/// built with [`number`] so integral sums are sent as JSON integers.
#[derive(Debug, Serialize, JsonSchema)]
struct AddOutput {
    /// a + b
    sum: f64,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct RememberArgs {
    /// Name to store the value under.
    key: String,
    /// Value to store.
    value: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct RecallArgs {
    /// Name the value was stored under.
    key: String,
}

/// Tools per `tools/list` page: small, so listing takes several pages.
const TOOLS_PAGE_SIZE: usize = 6;

/// Bounds on `slow`, so a test typo cannot hang a process for hours.
const MAX_SLOW_STEPS: u32 = 1_000;
const MAX_SLOW_DELAY_MS: u64 = 10_000;
/// How long `slow` waits for rmcp to take one progress notification.
const PROGRESS_SEND_LIMIT: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Debug, Deserialize, JsonSchema)]
struct SlowArgs {
    /// How many steps to take.
    steps: u32,
    /// Milliseconds per step.
    delay_ms: u64,
    /// `_meta` to send with each progress notification.
    #[serde(default)]
    meta: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct LogArgs {
    /// Log level: debug, info, notice, warning, error, critical, alert, emergency.
    level: rmcp::model::LoggingLevel,
    /// Any JSON value.
    data: serde_json::Value,
    /// `_meta` to send with the message.
    #[serde(default)]
    meta: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct AskArgs {
    /// What to ask the client's model.
    prompt: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct GreetArgs {
    /// Who to greet.
    name: String,
}

/// A sum as a JSON number: integral values that fit become JSON integers so
/// clients comparing against `5` do not trip over `5.0`.
fn number(x: f64) -> serde_json::Value {
    // Up to 2^53 every integral f64 is an exact integer, so the cast below
    // cannot lose anything; beyond that keep the float as it is.
    const LIMIT: f64 = 9_007_199_254_740_992.0; // 2^53
    if x.fract() == 0.0 && x.abs() <= LIMIT {
        serde_json::Value::from(x as i64)
    } else {
        serde_json::Value::from(x)
    }
}

/// `notification` with `meta` as its `_meta`, if given.
fn with_meta(
    mut notification: rmcp::model::ServerNotification,
    meta: Option<&serde_json::Map<String, serde_json::Value>>,
) -> rmcp::model::ServerNotification {
    use rmcp::model::GetMeta;
    if let Some(meta) = meta {
        notification.get_meta_mut().0 .0 = meta.clone();
    }
    notification
}

fn text_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn error_result(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

#[tool_router]
impl DemoServer {
    /// A server with fresh state (counter at 0, no notes).
    pub fn new() -> Self {
        Self {
            state: Arc::default(),
            session: 0,
            tool_router: Self::tool_router(),
            prompt_router: Self::prompt_router(),
        }
    }

    #[tool(description = "Return the message unchanged.")]
    async fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> CallToolResult {
        text_result(args.message)
    }

    #[tool(
        description = "Add two numbers.",
        output_schema = schema_for_output::<AddOutput>()
    )]
    async fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> CallToolResult {
        let sum = a + b;
        // f64's Display already prints 5.0 as "5", which is what a reader
        // expects from 2 + 3.
        let mut result = text_result(sum.to_string());
        result.structured_content = Some(serde_json::json!({ "sum": number(sum) }));
        result
    }

    #[tool(description = "Increment this server process's counter and return the new value.")]
    async fn counter(&self) -> CallToolResult {
        let value = self.state.counter.fetch_add(1, Ordering::Relaxed) + 1;
        text_result(value.to_string())
    }

    #[tool(
        description = "Add or remove the `bonus` tool, prompt and resource (demo://bonus) in this server process and announce that the tool, prompt and resource lists changed."
    )]
    async fn toggle_bonus(&self, context: RequestContext<RoleServer>) -> CallToolResult {
        let enabled = !self.state.bonus.fetch_xor(true, Ordering::Relaxed);
        let announced = async {
            context.peer.notify_tool_list_changed().await?;
            context.peer.notify_prompt_list_changed().await?;
            context.peer.notify_resource_list_changed().await
        };
        if let Err(error) = announced.await {
            return error_result(format!("could not announce the change: {error}"));
        }
        text_result(if enabled { "bonus on" } else { "bonus off" })
    }

    #[tool(
        description = "Return, as JSON text, the capabilities the connected client declared at initialize."
    )]
    async fn client_capabilities(&self, context: RequestContext<RoleServer>) -> CallToolResult {
        let declared = context
            .peer
            .peer_info()
            .map(|info| serde_json::to_string(&info.capabilities).unwrap_or_default())
            .unwrap_or_else(|| "null".to_owned());
        text_result(declared)
    }

    #[tool(
        description = "Ask the client's model (sampling/createMessage) and return its answer. Listed only to clients that declared sampling."
    )]
    async fn ask_model(
        &self,
        Parameters(args): Parameters<AskArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let request = rmcp::model::CreateMessageRequestParams::new(
            vec![rmcp::model::SamplingMessage::user_text(args.prompt)],
            100,
        );
        match context.peer.create_message(request).await {
            Ok(reply) => {
                let answer = reply
                    .message
                    .content
                    .first()
                    .and_then(|block| block.as_text())
                    .map(|text| text.text.clone())
                    .unwrap_or_default();
                text_result(format!("{} said: {answer}", reply.model))
            }
            Err(error) => error_result(format!("sampling failed: {error}")),
        }
    }

    #[tool(
        description = "Take `steps` steps of `delay_ms` each, reporting progress when asked; counts calls cancelled before the end."
    )]
    async fn slow(
        &self,
        Parameters(args): Parameters<SlowArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        /// Counts the call as cancelled unless it finished, including when
        /// the SDK drops this future on a client's cancel.
        struct Unfinished<'a>(&'a AtomicU64, bool);
        impl Drop for Unfinished<'_> {
            fn drop(&mut self) {
                if !self.1 {
                    self.0.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        let mut unfinished = Unfinished(&self.state.cancellations, false);
        let steps = args.steps.min(MAX_SLOW_STEPS);
        let delay = std::time::Duration::from_millis(args.delay_ms.min(MAX_SLOW_DELAY_MS));
        let token = context.meta.get_progress_token();
        for step in 1..=steps {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = context.ct.cancelled() => return error_result("cancelled"),
            }
            if let Some(token) = &token {
                let mut progress =
                    rmcp::model::ProgressNotificationParam::new(token.clone(), f64::from(step));
                progress.total = Some(f64::from(steps));
                progress.message = Some(format!("step {step} of {steps}"));
                let notification = rmcp::model::ServerNotification::ProgressNotification(
                    rmcp::model::Notification::new(progress),
                );
                // Bounded: once its client closed stdin, rmcp still writes
                // answers but never confirms a notification, and the call
                // hung here instead of answering (its child lingered
                // until rmcp gave up on it, 5 s later).
                let sent = context
                    .peer
                    .send_notification(with_meta(notification, args.meta.as_ref()));
                let _ = tokio::time::timeout(PROGRESS_SEND_LIMIT, sent).await;
            }
        }
        unfinished.1 = true;
        text_result(format!("done after {steps} steps"))
    }

    #[tool(
        description = "Ask the client for its roots (roots/list) and return their URIs, one per line; also says how many roots/list_changed it sent."
    )]
    async fn roots(&self, context: RequestContext<RoleServer>) -> CallToolResult {
        let changes = self.state.roots_changes.load(Ordering::SeqCst);
        match context.peer.list_roots().await {
            Ok(result) => {
                let uris: Vec<&str> = result.roots.iter().map(|root| root.uri.as_str()).collect();
                text_result(format!("{}\nchanges: {changes}", uris.join("\n")))
            }
            Err(error) => error_result(format!("roots/list failed: {error}")),
        }
    }

    #[tool(
        description = "Return this request's `_meta`, as JSON text (shows what reached the server); the result's own `_meta` carries a key of the server's (`x-demo`)."
    )]
    async fn meta(&self, context: RequestContext<RoleServer>) -> CallToolResult {
        let mut shown = serde_json::Map::from_iter(context.meta.0 .0.clone());
        // Over HTTP, also the trace headers and the session id the request
        // came with (the id is this server's own, shown to its client).
        if let Some(parts) = context.extensions.get::<axum::http::request::Parts>() {
            for name in ["traceparent", "tracestate", "mcp-session-id"] {
                if let Some(value) = parts.headers.get(name).and_then(|v| v.to_str().ok()) {
                    shown.insert(format!("http:{name}"), value.into());
                }
            }
        }
        let mut result = text_result(serde_json::Value::Object(shown).to_string());
        let mut meta = rmcp::model::MetaObject::new();
        meta.insert("x-demo".into(), serde_json::json!({ "from": "the server" }));
        result.meta = Some(meta);
        result
    }

    #[tool(description = "How many Streamable HTTP sessions this process has open (0 over stdio).")]
    async fn sessions(&self) -> CallToolResult {
        let open = match self.state.http_sessions.get() {
            Some(sessions) => sessions.sessions.read().await.len(),
            None => 0,
        };
        text_result(open.to_string())
    }

    #[tool(description = "How many `slow` calls this process saw cancelled.")]
    async fn cancellations(&self) -> CallToolResult {
        text_result(self.state.cancellations.load(Ordering::SeqCst).to_string())
    }

    #[tool(
        description = "Send a log message (notifications/message) with the given level and JSON data, unless it is below the level set by logging/setLevel."
    )]
    async fn log(
        &self,
        Parameters(args): Parameters<LogArgs>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        // Below the level a client set, not sent (as the SDKs' servers do).
        let set = *self
            .state
            .log_level
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(set) = set.filter(|set| (args.level as u8) < (*set as u8)) {
            return text_result(format!("not sent: below the level set ({set:?})"));
        }
        let message = rmcp::model::LoggingMessageNotificationParam::new(args.level, args.data)
            .with_logger("junction-demo");
        let notification = rmcp::model::ServerNotification::LoggingMessageNotification(
            rmcp::model::Notification::new(message),
        );
        let notification = with_meta(notification, args.meta.as_ref());
        match context.peer.send_notification(notification).await {
            Ok(()) => text_result("logged"),
            Err(error) => error_result(format!("could not log: {error}")),
        }
    }

    #[tool(description = "Only listed after toggle_bonus; says it is here.")]
    async fn bonus(&self) -> CallToolResult {
        if self.state.bonus.load(Ordering::Relaxed) {
            text_result("bonus is here")
        } else {
            error_result("the bonus tool is not enabled")
        }
    }

    /// A clone for a new Streamable HTTP session: same process state, its
    /// own subscriptions.
    fn for_new_session(&self) -> Self {
        let mut server = self.clone();
        server.session = self.state.next_session.fetch_add(1, Ordering::Relaxed) + 1;
        server
    }

    #[tool(
        description = "Store a value under a key in this server process; subscribers of demo://notes/<key>, and of demo://notes (all notes), are told that demo://notes/<key> changed, with `_meta` {\"x-demo-key\": key}."
    )]
    async fn remember(
        &self,
        Parameters(RememberArgs { key, value }): Parameters<RememberArgs>,
    ) -> CallToolResult {
        let reply = format!("stored {key}");
        self.state.notes().insert(key.clone(), value);
        let uri = format!("{NOTES_PREFIX}{key}");
        // A session subscribed to the note and to all notes is told once.
        let subscribers: HashMap<u64, Peer<RoleServer>> = {
            let subscriptions = self.state.subscriptions();
            [uri.as_str(), NOTES_PREFIX.trim_end_matches('/')]
                .iter()
                .filter_map(|subscribed| subscriptions.get(*subscribed))
                .flat_map(|sessions| sessions.iter().map(|(id, peer)| (*id, peer.clone())))
                .collect()
        };
        for peer in subscribers.into_values() {
            let mut params = rmcp::model::ResourceUpdatedNotificationParam::new(uri.clone());
            let mut meta = rmcp::model::NotificationMetaObject::new();
            meta.insert(
                "x-demo-key".to_owned(),
                serde_json::Value::String(key.clone()),
            );
            params.meta = Some(meta);
            if let Err(error) = peer.notify_resource_updated(params).await {
                tracing::debug!(%uri, %error, "could not tell a subscriber");
            }
        }
        text_result(reply)
    }

    #[tool(
        description = "The resource URIs this process's clients are subscribed to, one line per session and URI, sorted."
    )]
    async fn subscriptions(&self) -> CallToolResult {
        let mut lines: Vec<String> = self
            .state
            .subscriptions()
            .iter()
            .flat_map(|(uri, sessions)| std::iter::repeat_n(uri.clone(), sessions.len()))
            .collect();
        lines.sort();
        text_result(lines.join("\n"))
    }

    #[tool(
        description = "The level the last logging/setLevel this process got asked for, or \"unset\"."
    )]
    async fn log_level(&self) -> CallToolResult {
        let level = *self
            .state
            .log_level
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match level {
            Some(level) => text_result(
                serde_json::to_value(level)
                    .ok()
                    .and_then(|value| value.as_str().map(str::to_owned))
                    .unwrap_or_default(),
            ),
            None => text_result("unset".to_owned()),
        }
    }

    #[tool(description = "Return the value stored under a key in this server process.")]
    async fn recall(
        &self,
        Parameters(RecallArgs { key }): Parameters<RecallArgs>,
    ) -> CallToolResult {
        match self.state.note(&key) {
            Some(value) => text_result(value),
            // A tool-level error rather than a protocol error: the call was
            // fine, there is just nothing stored, and the caller should see why.
            None => error_result(format!("no value for {key}")),
        }
    }

    #[tool(description = "Return the id of this server process.")]
    async fn pid(&self) -> CallToolResult {
        text_result(std::process::id().to_string())
    }

    #[tool(
        description = "Return a link to demo://readme and the embedded note demo://notes/hello."
    )]
    async fn links(&self) -> CallToolResult {
        let hello = self
            .state
            .note("hello")
            .unwrap_or_else(|| "(empty)".to_owned());
        CallToolResult::success(vec![
            ContentBlock::resource_link(
                Resource::new(README_URI, "readme").with_mime_type("text/plain"),
            ),
            ContentBlock::resource(ResourceContents::text(
                hello,
                format!("{NOTES_PREFIX}hello"),
            )),
        ])
    }

    #[tool(description = "Always fail, as a tool error.")]
    async fn fail(&self) -> CallToolResult {
        error_result("failed on purpose")
    }
}

#[prompt_router]
impl DemoServer {
    #[prompt(description = "Ask the model to greet someone, with the demo readme attached.")]
    async fn greet(
        &self,
        Parameters(GreetArgs { name }): Parameters<GreetArgs>,
    ) -> GetPromptResult {
        GetPromptResult::new(vec![
            PromptMessage::new_text(Role::User, format!("Say hello to {name}.")),
            PromptMessage::new(
                Role::User,
                ContentBlock::resource(ResourceContents::text(README, README_URI)),
            ),
        ])
    }

    #[prompt(
        name = "bonus",
        description = "Only listed after toggle_bonus; says it is here."
    )]
    async fn bonus_prompt(&self) -> GetPromptResult {
        GetPromptResult::new(vec![PromptMessage::new_text(Role::User, "bonus is here")])
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for DemoServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_logging()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_resources_list_changed()
                .enable_resources_subscribe()
                .build(),
        )
        .with_server_info(Implementation::new(
            "junction-demo",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(
            "Demo server: try echo, add, counter, remember/recall, and read demo://readme.",
        )
    }

    async fn on_roots_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleServer>,
    ) {
        self.state.roots_changes.fetch_add(1, Ordering::SeqCst);
    }

    /// Lists tools in pages of [`TOOLS_PAGE_SIZE`], so clients (and the
    /// gateway's discovery) must follow `nextCursor` to see them all.
    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let bonus = self.state.bonus.load(Ordering::Relaxed);
        // Like real servers, offer sampling-based tools only to clients
        // that can answer sampling requests.
        let sampling = context
            .peer
            .peer_info()
            .is_some_and(|info| info.capabilities.sampling.is_some());
        let mut tools: Vec<_> = self
            .tool_router
            .list_all()
            .into_iter()
            .filter(|tool| bonus || tool.name != BONUS)
            .filter(|tool| sampling || tool.name != "ask_model")
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        let start = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(cursor) => cursor
                .strip_prefix("offset:")
                .and_then(|offset| offset.parse::<usize>().ok())
                .filter(|offset| *offset <= tools.len())
                .ok_or_else(|| ErrorData::invalid_params(format!("bad cursor {cursor:?}"), None))?,
        };
        let end = (start + TOOLS_PAGE_SIZE).min(tools.len());
        let mut result = ListToolsResult::with_all_items(tools[start..end].to_vec());
        result.next_cursor = (end < tools.len()).then(|| format!("offset:{end}"));
        Ok(result)
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let bonus = self.state.bonus.load(Ordering::Relaxed);
        let prompts = self
            .prompt_router
            .list_all()
            .into_iter()
            .filter(|prompt| bonus || prompt.name != BONUS)
            .collect();
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name == BONUS && !self.state.bonus.load(Ordering::Relaxed) {
            return Err(ErrorData::invalid_params(
                "the bonus prompt is not enabled",
                None,
            ));
        }
        let prompt = PromptContext::new(self, request.name, request.arguments, context);
        self.prompt_router.get_prompt(prompt).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut resources = vec![Resource::new(README_URI, "readme")
            .with_description("What this demo server is and what it offers.")
            .with_mime_type("text/plain")];
        if self.state.bonus.load(Ordering::Relaxed) {
            resources.push(Resource::new(BONUS_URI, BONUS).with_mime_type("text/plain"));
        }
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(NOTES_TEMPLATE, "note")
                .with_description("The value stored with the remember tool under {key}.")
                .with_mime_type("text/plain"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let text = if uri == README_URI {
            README.to_owned()
        } else if uri == BONUS_URI && self.state.bonus.load(Ordering::Relaxed) {
            "bonus is here".to_owned()
        } else if let Some(key) = uri.strip_prefix(NOTES_PREFIX).filter(|k| !k.is_empty()) {
            // An unset note is a valid, empty resource rather than "not
            // found": the template promises every key is readable.
            self.state.note(key).unwrap_or_else(|| "(empty)".to_owned())
        } else {
            return Err(ErrorData::resource_not_found(
                format!("no resource {uri}"),
                Some(serde_json::json!({ "uri": uri })),
            ));
        };
        Ok(ReadResourceResult::new(vec![ResourceContents::text(text, uri)]).into())
    }

    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        *self
            .state
            .log_level
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(request.level);
        Ok(())
    }

    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = request.uri;
        if !uri.starts_with("demo://") {
            return Err(ErrorData::resource_not_found(
                format!("no resource {uri}"),
                Some(serde_json::json!({ "uri": uri })),
            ));
        }
        self.state
            .subscriptions()
            .entry(uri)
            .or_default()
            .insert(self.session, context.peer);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let mut subscriptions = self.state.subscriptions();
        if let Some(sessions) = subscriptions.get_mut(&request.uri) {
            sessions.remove(&self.session);
            if sessions.is_empty() {
                subscriptions.remove(&request.uri);
            }
        }
        Ok(())
    }
}

/// Serve one [`DemoServer`] on stdin/stdout until stdin closes.
///
/// Stdout carries only protocol messages; diagnostics go through `tracing`,
/// which the binary points at stderr.
pub async fn run_stdio() -> anyhow::Result<()> {
    let service = match DemoServer::new().serve(rmcp::transport::stdio()).await {
        Ok(service) => service,
        // The client went away before the handshake (for example a gateway
        // that gave up while starting us). That is a normal end, not a failure.
        Err(ServerInitializeError::ConnectionClosed(reason)) => {
            tracing::debug!(%reason, "stdin closed before initialization");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let reason = service.waiting().await?;
    tracing::debug!(?reason, "demo stdio server stopped");
    Ok(())
}

/// Serve [`DemoServer`] over Streamable HTTP at `/mcp` on `listener`.
///
/// Sessions are stateful; each gets its own clone of one `DemoServer`, so the
/// counter and notes are shared by every session of this process. Runs until
/// the process is killed (or the listener fails).
pub async fn run_http(
    listener: tokio::net::TcpListener,
    unknown_session_400: bool,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let mut config = StreamableHttpServerConfig::default();
    // rmcp only accepts loopback Host headers by default (DNS-rebinding
    // protection). Also accept the address we were actually bound to, so a
    // demo bound to a specific interface is reachable at that address.
    if !addr.ip().is_unspecified() && !addr.ip().is_loopback() {
        config
            .allowed_hosts
            .extend([addr.ip().to_string(), addr.to_string()]);
    }
    let server = DemoServer::new();
    let sessions = Arc::new(LocalSessionManager::default());
    let _ = server.state.http_sessions.set(sessions.clone());
    let service: StreamableHttpService<DemoServer, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(server.for_new_session()), sessions, config);
    let mut app = axum::Router::new().nest_service("/mcp", service);
    if unknown_session_400 {
        app = app.layer(axum::middleware::from_fn(unknown_session_is_bad_request));
    }
    tracing::info!(%addr, "demo server listening on http://{addr}/mcp");
    // Served as the gateway serves, slow and silent clients let go of alike.
    crate::http::serve_connections(
        axum::serve::ListenerExt::tap_io(listener, crate::http::no_delay),
        app,
        crate::config::defaults::REQUEST_READ_TIMEOUT,
        std::future::pending(),
    )
    .await;
    Ok(())
}

/// Answers like the session handling many TypeScript servers copy from the
/// SDK's examples: an unknown session id is a 400 with a JSON-RPC error
/// whose id is null.
async fn unknown_session_is_bad_request(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let response = next.run(request).await;
    if response.status() != axum::http::StatusCode::NOT_FOUND {
        return response;
    }
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::BAD_REQUEST,
        axum::Json(serde_json::json!({
            "jsonrpc": "2.0",
            "error": {"code": -32000, "message": "Bad Request: No valid session ID provided"},
            "id": null,
        })),
    )
        .into_response()
}

#[cfg(test)]
mod tests;
