//! The upstream fixture: a lean rmcp server whose tools do nothing but echo,
//! so what the benchmark measures is the cost of the MCP plumbing (and, when
//! it is behind Junction, of the gateway).
//!
//! `bench fixture --http 127.0.0.1:0 [--tools N]` serves Streamable HTTP at
//! `/mcp` (rmcp `StreamableHttpService` + `LocalSessionManager`, as
//! `junction demo-server --http` does) and prints
//! `bench fixture listening on ADDR` to stderr; `bench fixture --stdio`
//! serves stdio. Tool 0 is `echo`, the others `tool_01` … (all echo).

use std::{borrow::Cow, sync::Arc};

use rmcp::{
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
        Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
        ServerConfig, Tool,
    },
    service::RequestContext,
    transport::streamable_http_server::{
        session::local::LocalSessionManager, StreamableHttpServerConfig, StreamableHttpService,
    },
    RoleServer, ServerHandler, ServiceExt,
};

#[derive(Clone)]
pub struct Fixture {
    tools: Arc<Vec<Tool>>,
}

impl Fixture {
    pub fn new(count: usize) -> Self {
        let schema: JsonObject = serde_json::from_str(
            r#"{"type":"object","properties":{"message":{"type":"string","description":"The text to send back."}},"required":["message"]}"#,
        )
        .expect("static schema");
        let schema = Arc::new(schema);
        let tools = (0..count.max(1))
            .map(|i| {
                let name: Cow<'static, str> = if i == 0 {
                    "echo".into()
                } else {
                    format!("tool_{i:02}").into()
                };
                Tool::new(
                    name,
                    format!(
                        "Benchmark tool number {i}: returns its `message` argument unchanged \
                         as one text content block."
                    ),
                    schema.clone(),
                )
            })
            .collect();
        Self {
            tools: Arc::new(tools),
        }
    }
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("junction-bench-fixture", "0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let message = request
            .arguments
            .as_ref()
            .and_then(|args| args.get("message"))
            .and_then(|m| m.as_str())
            .unwrap_or("")
            .to_owned();
        Ok(CallToolResult::success(vec![ContentBlock::text(message)]).into())
    }
}

/// Serves Streamable HTTP on `addr` until killed.
pub async fn run_http(addr: &str, tools: usize) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    // axum::serve leaves Nagle on: an SSE answer written after its headers
    // would wait for the client's delayed ACK (~40 ms). A well-configured
    // upstream turns it off; the fixture does unless told not to.
    let nodelay = std::env::var_os("BENCH_FIXTURE_NAGLE").is_none();
    let listener = axum::serve::ListenerExt::tap_io(listener, move |tcp| {
        if nodelay {
            let _ = tcp.set_nodelay(true);
        }
    });
    let fixture = Fixture::new(tools);
    let mut sessions = LocalSessionManager::default();
    // Idle benchmark sessions must outlive the run (rmcp's default is 5 min).
    sessions.session_config.keep_alive = Some(std::time::Duration::from_secs(1800));
    // What-if knobs for experiments (the same rmcp settings Junction's own
    // endpoint uses): BENCH_FIXTURE_TTL_MS (completed_cache_ttl),
    // BENCH_FIXTURE_CHANNEL (channel_capacity), BENCH_FIXTURE_NO_PRIMING.
    let env_num = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    if let Some(ms) = env_num("BENCH_FIXTURE_TTL_MS") {
        sessions.session_config.completed_cache_ttl = std::time::Duration::from_millis(ms);
    }
    if let Some(cap) = env_num("BENCH_FIXTURE_CHANNEL") {
        sessions.session_config.channel_capacity = cap.max(1) as usize;
    }
    let mut config = StreamableHttpServerConfig::default();
    if std::env::var_os("BENCH_FIXTURE_NO_PRIMING").is_some() {
        sessions.session_config.sse_retry = None;
        config = config.with_sse_retry(None);
    }
    let service: StreamableHttpService<Fixture, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(fixture.clone()), Arc::new(sessions), config);
    let app = axum::Router::new().nest_service("/mcp", service);
    eprintln!("bench fixture listening on {bound}");
    axum::serve(listener, app).await?;
    Ok(())
}

/// Serves stdio until stdin closes.
pub async fn run_stdio(tools: usize) -> anyhow::Result<()> {
    let service = match Fixture::new(tools).serve(rmcp::transport::stdio()).await {
        Ok(service) => service,
        Err(_) => return Ok(()),
    };
    let _ = service.waiting().await;
    Ok(())
}
