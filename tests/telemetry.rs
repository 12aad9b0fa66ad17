//! Traces and metrics, observed from outside: an OTLP/HTTP receiver in this
//! test process decodes the protobuf spans the gateway exports, and
//! `/metrics` is scraped after known traffic.

mod common;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{body::Bytes, extract::State, routing::post, Router};
use common::*;
use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest,
    common::v1::{any_value, KeyValue},
    trace::v1::{span::SpanKind, Span},
};
use prost::Message;
use rmcp::model::{CallToolRequestParams, MetaObject, PaginatedRequestParams, RequestMetaObject};
use serde_json::{json, Value};

type Spans = Arc<Mutex<Vec<Span>>>;

/// An OTLP/HTTP trace receiver on 127.0.0.1; returns its base URL.
async fn otlp_receiver(spans: Spans) -> String {
    async fn receive(State(spans): State<Spans>, body: Bytes) -> &'static str {
        let request = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
        let mut all = spans.lock().unwrap();
        for resource in request.resource_spans {
            for scope in resource.scope_spans {
                all.extend(scope.spans);
            }
        }
        ""
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new()
        .route("/v1/traces", post(receive))
        .with_state(spans);
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

/// The first span received that `matches`, waiting up to 10 s for it.
async fn exported_span(spans: &Spans, what: &str, matches: impl Fn(&Span) -> bool) -> Span {
    eventually(what, Duration::from_secs(10), || {
        let found = spans.lock().unwrap().iter().find(|s| matches(s)).cloned();
        async move { found }
    })
    .await
}

/// A ready gateway serving `mounts` (TOML) that exports its traces to a
/// receiver here, and the spans received. Exported quickly instead of the
/// SDK's default 5 s batches; logs at `warn` (tests set RUST_LOG, which
/// wins over `log_level`: set to the same), and traces keep their own
/// level (the request spans are `info`), so a quiet log does not switch
/// them off.
async fn traced_gateway(mounts: &str) -> (Gateway, Spans) {
    let spans = Spans::default();
    let endpoint = otlp_receiver(spans.clone()).await;
    let config = format!(
        "{SERVER_TOML}[telemetry]\notlp_endpoint = \"{endpoint}\"\nlog_level = \"warn\"\n\n{mounts}"
    );
    let gateway = Gateway::launch(
        &config,
        "toml",
        &[("OTEL_BSP_SCHEDULE_DELAY", "100"), ("RUST_LOG", "warn")],
    )
    .await;
    gateway.wait_ready().await;
    (gateway, spans)
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|KeyValue { key: k, .. }| k == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|value| match &value.value {
            Some(any_value::Value::StringValue(s)) => Some(s.clone()),
            Some(any_value::Value::IntValue(i)) => Some(i.to_string()),
            _ => None,
        })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN_ID: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_continue_the_client_trace_and_reach_the_upstream() {
    let demo = DemoHttp::start().await;
    let (gateway, spans) = traced_gateway(&format!(
        "{}{}",
        stdio_demo_mount("shared", "isolation = \"shared\""),
        http_mount("remote", &demo.mcp_url(), ""),
    ))
    .await;
    let client = gateway.connect().await;

    let mut meta = MetaObject::new();
    meta.set_traceparent(format!("00-{TRACE_ID}-{CLIENT_SPAN_ID}-01"));
    meta.insert("x-custom".into(), json!({"kept": true}));
    let mut params = CallToolRequestParams::new("shared__meta");
    params.meta = Some(RequestMetaObject(meta));
    let result = within("tools/call shared__meta", client.peer().call_tool(params))
        .await
        .expect("call");
    let seen: Value = serde_json::from_str(ok_text(&result)).expect("meta as JSON");

    // The upstream got the client's unknown _meta key, and a traceparent in
    // the client's trace whose parent is the gateway's upstream span.
    assert_eq!(seen["x-custom"], json!({"kept": true}), "{seen}");
    let upstream_traceparent = seen["traceparent"]
        .as_str()
        .expect("traceparent")
        .to_owned();
    let parts: Vec<&str> = upstream_traceparent.split('-').collect();
    assert_eq!(parts[1], TRACE_ID, "{upstream_traceparent}");
    assert_ne!(
        parts[2], CLIENT_SPAN_ID,
        "the gateway must add its own span"
    );

    let (server, upstream) =
        eventually("the spans to be exported", Duration::from_secs(10), || {
            let spans = spans.clone();
            async move {
                let spans = spans.lock().unwrap();
                let server = spans
                    .iter()
                    .find(|s| s.name == "tools/call shared__meta")?
                    .clone();
                let upstream = spans
                    .iter()
                    .find(|s| {
                        attribute(s, "mcp.method.name").as_deref() == Some("tools/call")
                            && s.name.starts_with("tools/call shared")
                    })
                    .filter(|s| s.span_id != server.span_id)
                    .cloned()?;
                Some((server, upstream))
            }
        })
        .await;
    assert_eq!(hex(&server.trace_id), TRACE_ID);
    assert_eq!(hex(&server.parent_span_id), CLIENT_SPAN_ID);
    // Named and kinded for OpenTelemetry, though neither is a log field.
    assert_eq!(server.kind, SpanKind::Server as i32);
    assert_eq!(upstream.kind, SpanKind::Client as i32);
    assert_eq!(upstream.name, "tools/call shared");
    assert_eq!(
        attribute(&server, "mcp.method.name").as_deref(),
        Some("tools/call")
    );
    assert_eq!(
        attribute(&server, "gen_ai.tool.name").as_deref(),
        Some("shared__meta")
    );
    assert_eq!(
        attribute(&server, "junction.mount").as_deref(),
        Some("shared")
    );
    assert!(!attribute(&server, "mcp.session.id")
        .unwrap_or_default()
        .is_empty());
    // OpenTelemetry's MCP conventions: the request's id, the protocol
    // version it was sent under, the transport, a tool call's operation.
    assert!(
        attribute(&server, "jsonrpc.request.id").is_some_and(|id| id.parse::<u64>().is_ok()),
        "rmcp's client numbers its requests: {:?}",
        attribute(&server, "jsonrpc.request.id")
    );
    assert_eq!(
        attribute(&server, "mcp.protocol.version").as_deref(),
        Some("2025-11-25")
    );
    assert_eq!(
        attribute(&server, "network.transport").as_deref(),
        Some("tcp")
    );
    assert_eq!(
        attribute(&server, "gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    // The upstream span: the upstream's own id for the request, the
    // version it negotiated, a stdio child's pipe.
    assert!(
        attribute(&upstream, "jsonrpc.request.id").is_some(),
        "{:?}",
        upstream.attributes
    );
    assert_eq!(
        attribute(&upstream, "mcp.protocol.version").as_deref(),
        Some("2025-11-25")
    );
    assert_eq!(
        attribute(&upstream, "network.transport").as_deref(),
        Some("pipe")
    );
    assert_eq!(hex(&upstream.trace_id), TRACE_ID);
    assert_eq!(
        upstream.parent_span_id, server.span_id,
        "upstream span is the server span's child"
    );
    assert_eq!(
        parts[2],
        hex(&upstream.span_id),
        "the upstream's parent is the upstream span"
    );

    // An HTTP upstream also gets the context as W3C headers.
    let mut meta = MetaObject::new();
    meta.set_traceparent(format!("00-{TRACE_ID}-{CLIENT_SPAN_ID}-01"));
    let mut params = CallToolRequestParams::new("remote__meta");
    params.meta = Some(RequestMetaObject(meta));
    let result = within("tools/call remote__meta", client.peer().call_tool(params))
        .await
        .expect("call");
    let seen: Value = serde_json::from_str(ok_text(&result)).expect("meta as JSON");
    let header = seen["http:traceparent"]
        .as_str()
        .expect("traceparent header");
    assert_eq!(Some(header), seen["traceparent"].as_str(), "{seen}");
    assert!(header.contains(TRACE_ID), "{seen}");

    // A list answered from the catalog's prebuilt page gets its span in
    // the client's trace too.
    let mut meta = MetaObject::new();
    meta.set_traceparent(format!("00-{TRACE_ID}-{CLIENT_SPAN_ID}-01"));
    let mut params = PaginatedRequestParams::default();
    params.meta = Some(RequestMetaObject(meta));
    within("tools/list", client.peer().list_tools(Some(params)))
        .await
        .expect("tools/list");
    let listed = exported_span(&spans, "the tools/list span", |s| {
        s.name == "tools/list" && hex(&s.trace_id) == TRACE_ID
    })
    .await;
    assert_eq!(hex(&listed.parent_span_id), CLIENT_SPAN_ID);
    assert_eq!(
        attribute(&listed, "mcp.method.name").as_deref(),
        Some("tools/list")
    );

    // A call answered before rmcp's handler (a client that sent no progress
    // token: `downstream/quick_call.rs`) is observed the same way.
    const QUICK_TRACE_ID: &str = "5bf92f3577b34da6a3ce929d0e0e4737";
    let http = reqwest::Client::new();
    let mcp = gateway.mcp_url();
    let session = raw::open_session(&http, &mcp).await;
    raw::wait_until_calls_are_quick(&http, &mcp, &session, "remote__echo").await;
    let call = json!({
        "jsonrpc": "2.0", "id": "quick", "method": "tools/call",
        "params": {
            "name": "remote__meta",
            "_meta": {"traceparent": format!("00-{QUICK_TRACE_ID}-{CLIENT_SPAN_ID}-01")},
        },
    });
    let answer = raw::post(
        &http,
        &mcp,
        Some(&session),
        raw::JSON_POST,
        call.to_string(),
    )
    .await;
    assert_eq!(
        answer.headers["content-type"], "application/json",
        "{answer:?}"
    );
    let seen: Value = serde_json::from_str(
        answer.body["result"]["content"][0]["text"]
            .as_str()
            .expect("meta as text"),
    )
    .expect("meta as JSON");
    assert!(
        seen["http:traceparent"]
            .as_str()
            .is_some_and(|header| header.contains(QUICK_TRACE_ID)),
        "{seen}"
    );
    let quick = exported_span(&spans, "the quick call's span", |s| {
        s.name == "tools/call remote__meta" && hex(&s.trace_id) == QUICK_TRACE_ID
    })
    .await;
    assert_eq!(hex(&quick.parent_span_id), CLIENT_SPAN_ID);
    assert_eq!(
        attribute(&quick, "junction.mount").as_deref(),
        Some("remote")
    );
    assert_eq!(
        attribute(&quick, "jsonrpc.request.id").as_deref(),
        Some("quick")
    );
    assert_eq!(
        attribute(&quick, "mcp.protocol.version").as_deref(),
        Some("2025-11-25")
    );
    let remote_upstream = exported_span(&spans, "the quick call's upstream span", |s| {
        s.name == "tools/call remote" && hex(&s.trace_id) == QUICK_TRACE_ID
    })
    .await;
    assert_eq!(
        attribute(&remote_upstream, "network.transport").as_deref(),
        Some("tcp")
    );
    let recorded_session = attribute(&quick, "mcp.session.id").unwrap_or_default();
    assert!(
        !recorded_session.is_empty() && !session.contains(&recorded_session),
        "the session, recorded as the handler's spans do (not as sent): {recorded_session:?}"
    );

    // A failed request records its JSON-RPC error code, as its error type.
    // The tool name the client made up (any length) names nothing: the
    // span is `tools/call`, without a tool.
    let made_up = format!("nobody__{}", "x".repeat(10_000));
    let error = call_err(&client, &made_up, Value::Null).await;
    assert_eq!(error.code.0, -32602);
    // Under a real namespace too: the name reaches the mount (whose
    // upstream refuses it), but it is not a listed tool.
    let unlisted = format!("shared__{}", "y".repeat(10_000));
    let refused = call_err(&client, &unlisted, Value::Null).await;
    assert_eq!(refused.code.0, -32602);
    let failed = exported_span(&spans, "the failed request's span", |s| {
        s.name == "tools/call" && attribute(s, "error.type").as_deref() == Some("-32602")
    })
    .await;
    assert_eq!(
        attribute(&failed, "rpc.jsonrpc.error_code").as_deref(),
        Some("-32602")
    );
    assert_eq!(
        attribute(&failed, "rpc.response.status_code").as_deref(),
        Some("-32602")
    );
    assert_eq!(attribute(&failed, "gen_ai.tool.name"), None);
    assert_eq!(failed.status.as_ref().map(|s| s.code), Some(2), "ERROR");
    // The status carries the error's message, cut to a bounded length
    // (the message names the 10,000-character tool).
    let description = failed.status.as_ref().map_or("", |s| s.message.as_str());
    assert!(
        description.contains("nobody__xxx") && description.len() <= 512,
        "{description:?}"
    );
    let unlisted_span = exported_span(&spans, "the unlisted tool's span", |s| {
        s.name == "tools/call" && attribute(s, "junction.mount").as_deref() == Some("shared")
    })
    .await;
    assert_eq!(attribute(&unlisted_span, "gen_ai.tool.name"), None);
    assert!(
        spans
            .lock()
            .unwrap()
            .iter()
            .all(|s| !s.name.contains("yyyy")),
        "a made-up name named a span"
    );
    // A tool's own failure (`isError`) is an error too, of type tool_error.
    let failed = common::call(&client, "shared__fail", Value::Null).await;
    assert_eq!(failed.is_error, Some(true));
    let tool_error = exported_span(&spans, "the failing tool's span", |s| {
        s.name == "tools/call shared__fail"
    })
    .await;
    assert_eq!(
        attribute(&tool_error, "error.type").as_deref(),
        Some("tool_error")
    );
    assert_eq!(tool_error.status.as_ref().map(|s| s.code), Some(2), "ERROR");

    // A listed prompt names its span as a listed tool does; a resource
    // request carries its URI, a made-up one cut short.
    within(
        "prompts/get",
        client.get_prompt(
            rmcp::model::GetPromptRequestParams::new("shared__greet")
                .with_arguments(serde_json::Map::from_iter([("name".into(), json!("otel"))])),
        ),
    )
    .await
    .expect("prompts/get");
    let prompt = exported_span(&spans, "the prompt's span", |s| {
        s.name == "prompts/get shared__greet"
    })
    .await;
    assert_eq!(
        attribute(&prompt, "gen_ai.prompt.name").as_deref(),
        Some("shared__greet")
    );
    assert_eq!(attribute(&prompt, "gen_ai.operation.name"), None);
    within(
        "resources/read",
        client.read_resource(rmcp::model::ReadResourceRequestParams::new(
            "shared+demo://readme",
        )),
    )
    .await
    .expect("resources/read");
    let read = exported_span(&spans, "the read's span", |s| {
        s.name == "resources/read"
            && attribute(s, "mcp.resource.uri").as_deref() == Some("shared+demo://readme")
    })
    .await;
    assert_eq!(
        attribute(&read, "junction.mount").as_deref(),
        Some("shared")
    );
    let long_uri = format!("shared+demo://{}", "z".repeat(10_000));
    let unknown = within(
        "resources/read",
        client.read_resource(rmcp::model::ReadResourceRequestParams::new(long_uri)),
    )
    .await;
    assert!(unknown.is_err(), "{unknown:?}");
    let long_read = exported_span(&spans, "the long URI's span", |s| {
        attribute(s, "mcp.resource.uri").is_some_and(|uri| uri.contains("zzzz"))
    })
    .await;
    let recorded = attribute(&long_read, "mcp.resource.uri").unwrap_or_default();
    assert_eq!(recorded.len(), 512, "{}", recorded.len());

    // An initialize records the version it negotiated.
    let initialize = exported_span(&spans, "an initialize span", |s| s.name == "initialize").await;
    assert_eq!(
        attribute(&initialize, "mcp.protocol.version").as_deref(),
        Some("2025-11-25")
    );
    close(client).await;
}

/// A failed upstream request's span describes the failure without the
/// upstream URL's path and query (where hosted servers take their key):
/// reqwest names the URL whole in its errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_failure_is_described_without_the_url_key() {
    let spans = Spans::default();
    let endpoint = otlp_receiver(spans.clone()).await;
    // Lists its (no) resources, hangs up on anything else.
    let (port, upstream) =
        scripted_http_upstream(json!({"resources": {}}), |request| {
            match request["method"].as_str() {
                Some("resources/list") => Some(json!({"resources": []})),
                Some("resources/templates/list") => Some(json!({"resourceTemplates": []})),
                _ => None,
            }
        })
        .await;
    let url = format!("http://127.0.0.1:{port}/mcp?key=SECRET-KEY");
    let config = format!(
        "{SERVER_TOML}[telemetry]\notlp_endpoint = \"{endpoint}\"\n\n{}",
        http_mount("remote", &url, "")
    );
    let gateway = Gateway::launch(&config, "toml", &[("OTEL_BSP_SCHEDULE_DELAY", "100")]).await;
    gateway.wait_ready().await;
    let client = gateway.connect().await;
    let refused = within(
        "resources/read",
        client.read_resource(rmcp::model::ReadResourceRequestParams::new("remote+x://y")),
    )
    .await;
    assert!(refused.is_err(), "{refused:?}");
    let failed = exported_span(&spans, "the failed upstream span", |s| {
        s.name == "resources/read remote" && s.status.as_ref().is_some_and(|s| s.code == 2)
    })
    .await;
    let description = failed.status.as_ref().map_or("", |s| s.message.as_str());
    assert!(description.contains("127.0.0.1"), "{description}");
    assert!(!description.contains("SECRET-KEY"), "{description}");
    close(client).await;
    upstream.abort();
}

/// The value of one sample line of the Prometheus exposition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_exactly_the_traffic_sent() {
    let config = format!(
        "{SERVER_TOML}{}{}",
        stdio_demo_mount("shared", "isolation = \"shared\""),
        stdio_demo_mount("private", "isolation = \"per_session\""),
    );
    let gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let client = gateway.connect().await;
    for _ in 0..3 {
        let echoed = call(&client, "shared__echo", json!({"message": "hi"})).await;
        assert_eq!(ok_text(&echoed), "hi");
    }
    let failed = call(&client, "private__fail", Value::Null).await;
    assert_eq!(failed.is_error, Some(true));
    call_err(&client, "nobody__nothing", Value::Null).await;
    tool_names(&client).await;

    let metrics = metrics_text(&gateway).await;
    let expect = [
        (
            r#"junction_requests_total{mount="shared",method="tools/call",outcome="ok"}"#,
            3.0,
        ),
        (
            r#"junction_requests_total{mount="private",method="tools/call",outcome="tool_error"}"#,
            1.0,
        ),
        (
            r#"junction_requests_total{mount="-",method="tools/call",outcome="error"}"#,
            1.0,
        ),
        ("junction_downstream_sessions", 1.0),
        // Discovery for the full profile and for this client's (no
        // capabilities), plus this session's own upstream.
        (r#"junction_upstream_sessions{mount="private"}"#, 3.0),
        (
            r#"junction_request_duration_seconds_count{method="tools/call"}"#,
            5.0,
        ),
        // Answered from the catalog's prebuilt page, counted all the same.
        (
            r#"junction_requests_total{mount="-",method="tools/list",outcome="ok"}"#,
            1.0,
        ),
        (
            r#"junction_request_duration_seconds_count{method="tools/list"}"#,
            1.0,
        ),
        (
            r#"junction_upstream_request_duration_seconds_count{mount="shared",method="tools/call"}"#,
            3.0,
        ),
        // From 0, before any restart or relayed message and before
        // `/status` (which reads the restarts) was ever asked for.
        (r#"junction_upstream_restarts_total{mount="shared"}"#, 0.0),
        (r#"junction_upstream_restarts_total{mount="private"}"#, 0.0),
        (r#"junction_relayed_messages_total{kind="progress"}"#, 0.0),
    ];
    for (series, value) in expect {
        assert_eq!(
            metric_value(&metrics, series),
            Some(value),
            "{series} in\n{metrics}"
        );
    }
    // Every list page served from the cache counts; the pages here are few.
    assert!(metric_value(&metrics, "junction_discovery_cache_hits_total").unwrap_or(0.0) >= 1.0);
    // Cardinality: no session ids, arguments or URIs in labels.
    assert!(!metrics.contains("hi\""), "{metrics}");

    let status: Value = within(
        "GET /status.json",
        http.get(gateway.url("/status.json")).send(),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(status["downstream_sessions"], 1);
    let shared = &status["mounts"][0];
    assert_eq!(shared["name"], "shared");
    assert_eq!(shared["health"], "ready");
    assert!(shared["tools"].as_u64().unwrap() > 5, "{status}");
    let page = within("GET /status", http.get(gateway.url("/status")).send())
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("<b>shared</b>") && page.contains("<b>private</b>"),
        "{page}"
    );
    close(client).await;
}

/// Opens a session (raw HTTP) and calls `tool` (a demo `echo`) in it;
/// returns the client and the session id.
async fn echoed_in_a_new_session(gateway: &Gateway, tool: &str) -> (reqwest::Client, String) {
    let http = reqwest::Client::new();
    let session = raw::open_session(&http, &gateway.mcp_url()).await;
    let answer = raw::post(
        &http,
        &gateway.mcp_url(),
        Some(&session),
        raw::JSON_POST,
        raw::echo_request("7", "x").replace("demo__echo", tool),
    )
    .await;
    assert_eq!(
        answer.body["result"]["content"][0]["text"], "x",
        "{answer:?}"
    );
    (http, session)
}

/// Not even at rmcp's `trace` level does the session id reach the log:
/// rmcp's worker span names the session's worker after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trace_log_holds_no_session_id() {
    let config = format!("{SERVER_TOML}{}", stdio_demo_mount("demo", ""));
    let gateway = Gateway::launch(&config, "toml", &[("RUST_LOG", "trace")]).await;
    gateway.wait_ready().await;
    let (http, session) = echoed_in_a_new_session(&gateway, "demo__echo").await;
    // Through rmcp's session worker (a quick call does not go there).
    let subscribe = r#"{"jsonrpc":"2.0","id":8,"method":"resources/subscribe","params":{"uri":"demo+demo://readme"}}"#;
    let answer = raw::post(
        &http,
        &gateway.mcp_url(),
        Some(&session),
        raw::JSON_POST,
        subscribe,
    )
    .await;
    assert!(answer.body.get("result").is_some(), "{answer:?}");
    eventually(
        "rmcp's worker to log the request",
        Duration::from_secs(5),
        || async { gateway.proc.stderr.find("request wise channel") },
    )
    .await;
    let stderr = gateway.proc.stderr.text();
    let leaks: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains(&session))
        .collect();
    assert!(
        leaks.is_empty(),
        "the session id {session} is in the log: {leaks:#?}"
    );
}

/// JSON log lines inside a request carry its context, and the session
/// appears only as its fingerprint: the id itself, which is all it takes to
/// act in the session, never reaches the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_carry_the_request_context_but_not_the_session_id() {
    let config = format!(
        "{SERVER_TOML}[telemetry]\nlog_format = \"json\"\n\n{}",
        stdio_demo_mount("private", "isolation = \"per_session\""),
    );
    let gateway = Gateway::launch(&config, "toml", &[]).await;
    gateway.wait_ready().await;
    // Opening the per-session upstream logs a line inside the request.
    let (_http, session) = echoed_in_a_new_session(&gateway, "private__echo").await;
    let line = eventually(
        "the per-session open line",
        Duration::from_secs(5),
        || async { gateway.proc.stderr.find("per-session upstream open") },
    )
    .await;
    let record: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    // Every span the line is in, outermost first: a line inside an
    // upstream request still names the downstream request's session.
    let spans = record["spans"]
        .as_array()
        .unwrap_or_else(|| panic!("{record}"));
    assert_eq!(spans[0]["name"], "mcp.request", "{record}");
    let span = &record["span"];
    assert_eq!(span["mcp.method.name"], "tools/call", "{record}");
    assert_eq!(span["junction.mount"], "private", "{record}");
    assert_eq!(span["gen_ai.tool.name"], "private__echo", "{record}");
    // OpenTelemetry's own fields stay out of the log (traces are off).
    assert!(span.get("otel.kind").is_none(), "{record}");
    assert!(span.get("otel.name").is_none(), "{record}");
    assert_eq!(
        span["mcp.session.id"],
        junction::telemetry::redact::session_fingerprint(&session),
        "{record}"
    );
    // A number, not `Some(…)`.
    assert!(record["fields"]["pid"].is_u64(), "{record}");
    let stderr = gateway.proc.stderr.text();
    assert!(
        !stderr.contains(&session),
        "the session id {session} is in the log:\n{stderr}"
    );
    // Every line is JSON, the one that says where it listens included: a
    // pipeline reading JSON lines is fed nothing else.
    for line in stderr.lines() {
        let record: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(record["level"].is_string(), "{line}");
    }
    assert!(stderr.contains("junction listening on"), "{stderr}");
}

/// Nor at debug level, where the gateway's own sweep says which idle
/// session it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_ended_is_logged_by_its_fingerprint() {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nsession_idle_timeout = \"1s\"\nsession_hibernate_after = \"off\"\n\n{}",
        stdio_demo_mount("demo", ""),
    );
    let gateway = Gateway::launch(&config, "toml", &[("RUST_LOG", "info,junction=debug")]).await;
    gateway.wait_ready().await;
    let http = reqwest::Client::new();
    let session = raw::open_session(&http, &gateway.mcp_url()).await;
    let fingerprint = junction::telemetry::redact::session_fingerprint(&session);
    let line = eventually(
        "the idle session to end",
        Duration::from_secs(10),
        || async { gateway.proc.stderr.find("idle session ended") },
    )
    .await;
    assert!(line.contains(&fingerprint), "{line}");
    let stderr = gateway.proc.stderr.text();
    assert!(
        !stderr.contains(&session),
        "the session id {session} is in the log:\n{stderr}"
    );
}

/// rmcp logs the upstream session it fails to delete, id and all (here:
/// the upstream is gone when the gateway shuts down). The gateway's log
/// gets that line with the id's fingerprint instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcps_lines_show_upstream_session_ids_only_as_fingerprints() {
    let mut demo = DemoHttp::start().await;
    let config = format!(
        "{SERVER_TOML}{}",
        http_mount("remote", &demo.mcp_url(), "isolation = \"shared\"")
    );
    let mut gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    let seen: Value =
        serde_json::from_str(ok_text(&call(&client, "remote__meta", json!({})).await))
            .expect("meta as JSON");
    let upstream_session = seen["http:mcp-session-id"]
        .as_str()
        .expect("the upstream's session id")
        .to_owned();
    close(client).await;

    demo.proc.stop();
    gateway.proc.stop();
    // The line looked for is printed just before the process exits.
    gateway.proc.stderr.drained().await;
    let stderr = gateway.proc.stderr.text();
    let fingerprint = junction::telemetry::redact::session_fingerprint(&upstream_session);
    assert!(
        stderr.lines().any(|line| line.contains("junction::rmcp")
            && line.contains("fail to delete session")
            && line.contains(&format!("session={fingerprint}"))),
        "no fingerprinted line for the failed delete:\n{stderr}"
    );
    assert!(
        !stderr.contains(&upstream_session),
        "the upstream session id {upstream_session} is in the log:\n{stderr}"
    );
}

/// A quiet log (`warn`) still says which request a warning is about: the
/// request spans are the log's at any level (they were off below `info`,
/// so a warning inside a request carried no span at all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warning_in_a_quiet_log_names_its_request() {
    let dir = tempfile::tempdir().expect("temp dir");
    // The second start (the first for a client without sampling) fails,
    // which the list request that waited for it warns about.
    let config = format!(
        "{SERVER_TOML}[telemetry]\nlog_format = \"json\"\nlog_level = \"warn\"\n\n{}",
        second_start_fails_mount("own", dir.path())
    );
    let gateway = Gateway::launch(&config, "toml", &[("RUST_LOG", "warn")]).await;
    gateway.wait_ready().await;
    let client = gateway.connect().await;
    tool_names(&client).await;
    let line = eventually("the warning", Duration::from_secs(10), || async {
        gateway
            .proc
            .stderr
            .find("discovery for a client profile failed")
    })
    .await;
    let record: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(record["span"]["mcp.method.name"], "tools/list", "{record}");
    assert!(
        !record["span"]["mcp.session.id"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "{record}"
    );
    close(client).await;
}

/// The call that opens a per-session upstream has its span ended and
/// exported as any other: rmcp attached the span current when the
/// upstream was opened (that call's) to the upstream's service loop, held
/// it open for the session's life, and gave the loop's log lines that
/// call's context.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_that_opens_a_per_session_upstream_has_its_span_ended() {
    let (gateway, spans) =
        traced_gateway(&stdio_demo_mount("private", "isolation = \"per_session\"")).await;
    let client = gateway.connect().await;
    let mut meta = MetaObject::new();
    meta.set_traceparent(format!("00-{TRACE_ID}-{CLIENT_SPAN_ID}-01"));
    let mut params = CallToolRequestParams::new("private__pid");
    params.meta = Some(RequestMetaObject(meta));
    within("tools/call private__pid", client.peer().call_tool(params))
        .await
        .expect("call");
    // The session (and the upstream it opened) lives on meanwhile.
    exported_span(&spans, "the opening call's span", |span| {
        span.name == "tools/call private__pid" && hex(&span.trace_id) == TRACE_ID
    })
    .await;
    close(client).await;
}

/// Requests the HTTP edge refuses before any session handles them are
/// counted by reason: nothing counted them, and at `max_sessions` every
/// new client got 503 while the metrics showed no error at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_at_the_edge_are_counted_by_reason() {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[limits]\nmax_sessions = 1\nmax_body_size = 1000\n\n{}",
        stdio_demo_mount("shared", "")
    );
    let gateway = Gateway::launch(&config, "toml", &[]).await;
    gateway.wait_ready().await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let _only = raw::open_session(&http, &url).await;
    let post = |body: String, session: Option<&'static str>, host: Option<&'static str>| {
        let mut request = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", raw::ACCEPT_BOTH)
            .body(body);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        if let Some(host) = host {
            request = request.header("host", host);
        }
        async move {
            within("a refused POST", request.send())
                .await
                .expect("POST")
                .status()
        }
    };
    assert_eq!(post(raw::INITIALIZE.to_owned(), None, None).await, 503);
    assert_eq!(post("{not json".to_owned(), None, None).await, 400);
    assert_eq!(post("x".repeat(5000), None, None).await, 413);
    assert_eq!(
        post(raw::INITIALIZE.to_owned(), Some("no-such-session"), None).await,
        404
    );
    assert_eq!(
        post(raw::INITIALIZE.to_owned(), None, Some("evil.example")).await,
        403
    );
    let metrics = metrics_text(&gateway).await;
    for reason in [
        "session_limit",
        "malformed",
        "body_too_large",
        "unknown_session",
        "host",
    ] {
        assert_eq!(
            metric_value(
                &metrics,
                &format!("junction_refused_requests_total{{reason=\"{reason}\"}}")
            ),
            Some(1.0),
            "{reason}: {metrics}"
        );
    }
}

/// A call its client cancels is no failure: neither its span nor the
/// upstream request's is marked ERROR (they were, `_OTHER` and
/// `tool_error`, whenever a user pressed Stop), and it adds no sample to
/// the upstream's latency (the time until a user gave up is none of the
/// upstream's). The mount's name is this test's own: the metrics are the
/// test process's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_is_no_error_in_its_spans() {
    use rmcp::model::{CallToolRequest, ClientRequest};
    let (gateway, spans) = traced_gateway(&stdio_demo_mount("stoppable", "")).await;
    let client = gateway.connect().await;
    let params = CallToolRequestParams::new("stoppable__slow").with_arguments(
        json!({"steps": 100, "delay_ms": 50})
            .as_object()
            .cloned()
            .unwrap(),
    );
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = within(
        "sending the slow call",
        client
            .peer()
            .send_cancellable_request(request, Default::default()),
    )
    .await
    .expect("request sent");
    eventually(
        "the call to make progress",
        Duration::from_secs(5),
        || async { (!client.service().progress().is_empty()).then_some(()) },
    )
    .await;
    within("cancelling the call", handle.cancel(Some("stop".into())))
        .await
        .expect("cancel sent");
    for name in ["tools/call stoppable__slow", "tools/call stoppable"] {
        let span = exported_span(&spans, name, |span| span.name == name).await;
        assert_ne!(
            span.status.as_ref().map(|s| s.code),
            Some(2),
            "{name}: ERROR"
        );
    }
    let metrics = metrics_text(&gateway).await;
    let samples = metric_value(
        &metrics,
        "junction_upstream_request_duration_seconds_count{mount=\"stoppable\",method=\"tools/call\"}",
    );
    assert_eq!(samples.unwrap_or(0.0), 0.0, "{metrics}");
    close(client).await;
}

/// A text log line holds one event: a line break a client put in a tool
/// name is written `\n`, so what follows it cannot pass for a log line of
/// the gateway's own (it did, at debug level: a forged `ERROR` line).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_break_from_a_client_does_not_start_a_log_line() {
    let config = format!("{SERVER_TOML}{}", stdio_demo_mount("demo", ""));
    let gateway = Gateway::launch(&config, "toml", &[("RUST_LOG", "debug")]).await;
    gateway.wait_ready().await;
    let http = reqwest::Client::new();
    let session = raw::open_session(&http, &gateway.mcp_url()).await;
    let forged = "2026-12-02T00:00:00.000000Z ERROR junction: FORGED LINE";
    let call = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": format!("demo__nope\n{forged}"), "arguments": {}},
    });
    let answer = raw::post(
        &http,
        &gateway.mcp_url(),
        Some(&session),
        raw::JSON_POST,
        call.to_string(),
    )
    .await;
    assert!(answer.body.get("error").is_some(), "{answer:?}");
    // The call is logged (escaped) before its answer is written.
    eventually("the call in the log", OP_TIMEOUT, || async {
        gateway.proc.stderr.find("FORGED LINE").map(drop)
    })
    .await;
    let lines = gateway.proc.stderr.snapshot();
    assert!(
        !lines.iter().any(|line| line.starts_with(forged)),
        "a forged line: {lines:#?}"
    );
}
