//! What upstreams send back reaches the right client: sampling, progress,
//! log messages and cancellation, through shared and per-session mounts,
//! with the real gateway in front of real demo-server processes.

// Sampling, roots and logging are deprecated by SEP-2577 (2026-07-28) but
// are what handshake-era clients and servers use.
#![allow(deprecated)]

mod common;

use std::time::Duration;

use common::*;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, JsonObject};
use serde_json::{json, Value};

/// A `shared` and a `per_session` stdio demo mount.
fn config() -> String {
    format!(
        "{SERVER_TOML}{}{}",
        stdio_demo_mount("shared", "isolation = \"shared\""),
        stdio_demo_mount("private", "isolation = \"per_session\""),
    )
}

fn sampling() -> rmcp::model::ClientCapabilities {
    serde_json::from_value(json!({"sampling": {}})).unwrap()
}

fn slow_args(steps: u32, delay_ms: u64) -> Value {
    json!({"steps": steps, "delay_ms": delay_ms})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_session_lists_follow_the_client_and_sampling_is_relayed() {
    let gateway = Gateway::start(&config()).await;
    let url = gateway.mcp_url();
    let (plain, sampler) = tokio::join!(gateway.connect(), connect_with(&url, sampling()));

    // The per-session upstream offers ask_model only to a client that can
    // answer sampling; the shared one lists it for everyone.
    let plain_tools = tool_names(&plain).await;
    let sampler_tools = tool_names(&sampler).await;
    assert!(
        !plain_tools.contains(&"private__ask_model".to_owned()),
        "{plain_tools:?}"
    );
    assert!(
        sampler_tools.contains(&"private__ask_model".to_owned()),
        "{sampler_tools:?}"
    );
    assert!(plain_tools.contains(&"shared__ask_model".to_owned()));

    for tool in ["private__ask_model", "shared__ask_model"] {
        let answer = call(&sampler, tool, json!({"prompt": "hello"})).await;
        assert_eq!(ok_text(&answer), "test-model said: echo: hello", "{tool}");
    }
    assert_eq!(sampler.service().sampling_requests(), 2);

    // A client without sampling is never sent a sampling request: the
    // upstream gets an error and says so in its tool result.
    let refused = call(&plain, "shared__ask_model", json!({"prompt": "x"})).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert!(
        text(&refused).contains("did not declare sampling"),
        "{refused:?}"
    );
    assert_eq!(plain.service().sampling_requests(), 0);

    close(plain).await;
    close(sampler).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reaches_only_the_request_that_asked() {
    let gateway = Gateway::start(&config()).await;
    let (a, b) = tokio::join!(gateway.connect(), gateway.connect());
    // Both run on the one shared upstream session at the same time. A's
    // call is sent by hand to learn the progress token its client chose.
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("shared__slow")
            .with_arguments(slow_args(4, 30).as_object().cloned().unwrap()),
    ));
    let handle = within(
        "sending A's call",
        a.peer()
            .send_cancellable_request(request, Default::default()),
    )
    .await
    .expect("request sent");
    let token_a = handle.progress_token.clone();
    let (done_a, done_b) = tokio::join!(
        within("A's call", handle.await_response()),
        call(&b, "shared__slow", slow_args(2, 30)),
    );
    let Ok(rmcp::model::ServerResult::CallToolResult(done_a)) = done_a else {
        panic!("A's call failed: {done_a:?}");
    };
    assert_eq!(ok_text(&done_a), "done after 4 steps");
    assert_eq!(ok_text(&done_b), "done after 2 steps");
    // rmcp's client hands each notification to its handler on a task of its
    // own, so the last progress can be recorded just after the answer.
    let progress_a = progress_after(&a, 4).await;
    let progress_b = progress_after(&b, 2).await;
    let steps = |progress: &[(rmcp::model::ProgressToken, f64)]| -> Vec<f64> {
        progress.iter().map(|(_, step)| *step).collect()
    };
    assert_eq!(steps(&progress_a), [1.0, 2.0, 3.0, 4.0], "{progress_a:?}");
    assert_eq!(steps(&progress_b), [1.0, 2.0], "{progress_b:?}");
    // A's progress carries the token A's client sent, not the gateway's.
    assert!(
        progress_a.iter().all(|(token, _)| *token == token_a),
        "{progress_a:?}"
    );
    assert!(progress_b.windows(2).all(|w| w[0].0 == w[1].0));

    // The same through a per-session upstream.
    let done = call(&a, "private__slow", slow_args(3, 10)).await;
    assert_eq!(ok_text(&done), "done after 3 steps");
    assert_eq!(progress_after(&a, 7).await.len(), 7);
    assert_eq!(b.service().progress().len(), 2);
    close(a).await;
    close(b).await;
}

/// The client's progress once it has recorded `count` notifications; more
/// than `count` shows up in the caller's assertion.
async fn progress_after(client: &Client, count: usize) -> Vec<(rmcp::model::ProgressToken, f64)> {
    eventually("progress notifications", Duration::from_secs(5), || async {
        let progress = client.service().progress();
        (progress.len() >= count).then_some(progress)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_messages_reach_only_the_caller_with_their_data_unchanged() {
    let gateway = Gateway::start(&config()).await;
    let (a, b) = tokio::join!(gateway.connect(), gateway.connect());
    let payloads = [
        json!("plain text"),
        json!(42),
        json!({"nested": {"list": [1, "two", null]}}),
        json!([true, 2.5]),
    ];
    for data in &payloads {
        let logged = call(&a, "shared__log", json!({"level": "info", "data": data})).await;
        assert_eq!(ok_text(&logged), "logged");
    }
    let logged = call(
        &a,
        "private__log",
        json!({"level": "warning", "data": "own"}),
    )
    .await;
    assert_eq!(ok_text(&logged), "logged");
    let mut expected: Vec<Value> = payloads.to_vec();
    expected.push(json!("own"));
    eventually("A's log messages", Duration::from_secs(5), || async {
        (a.service().logs() == expected).then_some(())
    })
    .await;
    // B caused none of them and got none.
    let ping = call(&b, "shared__echo", json!({"message": "still here"})).await;
    assert_eq!(ok_text(&ping), "still here");
    assert!(b.service().logs().is_empty(), "{:?}", b.service().logs());
    close(a).await;
    close(b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unattributable_sampling_request_is_refused_not_guessed() {
    let gateway = Gateway::start(&config()).await;
    let url = gateway.mcp_url();
    let (busy, sampler) = tokio::join!(gateway.connect(), connect_with(&url, sampling()));
    // While `busy` has a call in flight on the shared stdio session, a
    // sampling request from that session could belong to either client:
    // stdio carries no request association in the handshake era.
    let (slow, answer) = tokio::join!(call(&busy, "shared__slow", slow_args(20, 50)), async {
        // Let the slow call reach the upstream first.
        eventually(
            "busy's call to be in flight",
            Duration::from_secs(5),
            || async { (!busy.service().progress().is_empty()).then_some(()) },
        )
        .await;
        call(&sampler, "shared__ask_model", json!({"prompt": "whose?"})).await
    });
    assert_eq!(ok_text(&slow), "done after 20 steps");
    assert_eq!(answer.is_error, Some(true), "{answer:?}");
    assert!(text(&answer).contains("cannot route"), "{answer:?}");
    // The refusal, which the upstream may hand to its client, counts no
    // other client's requests.
    let refused = text(&answer);
    let why = refused.split("cannot route").nth(1).unwrap_or_default();
    assert!(
        !why.contains(char::is_numeric),
        "the refusal tells how busy other clients are: {answer:?}"
    );
    assert_eq!(sampler.service().sampling_requests(), 0);
    assert_eq!(busy.service().sampling_requests(), 0);

    // Alone on the session, the same request is attributed and answered.
    let answer = call(&sampler, "shared__ask_model", json!({"prompt": "mine"})).await;
    assert_eq!(ok_text(&answer), "test-model said: echo: mine");
    close(busy).await;
    close(sampler).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_cancel_stops_its_upstream_call_and_nothing_else() {
    let gateway = Gateway::start(&config()).await;
    let (a, b) = tokio::join!(gateway.connect(), gateway.connect());

    let mut args = JsonObject::new();
    args.insert("steps".into(), json!(100));
    args.insert("delay_ms".into(), json!(50));
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("shared__slow").with_arguments(args),
    ));
    let handle = within(
        "sending A's slow call",
        a.peer()
            .send_cancellable_request(request, Default::default()),
    )
    .await
    .expect("request sent");
    // B's call runs on the same shared upstream session meanwhile.
    let b_call = tokio::spawn({
        let b = b.peer().clone();
        async move {
            b.call_tool(
                CallToolRequestParams::new("shared__slow").with_arguments(
                    json!({"steps": 10, "delay_ms": 50})
                        .as_object()
                        .cloned()
                        .unwrap(),
                ),
            )
            .await
        }
    });
    eventually(
        "A's call to make progress",
        Duration::from_secs(5),
        || async { (!a.service().progress().is_empty()).then_some(()) },
    )
    .await;
    within("cancelling A's call", handle.cancel(Some("test".into())))
        .await
        .expect("cancel sent");

    // The upstream saw exactly one cancel, and B's call finished normally.
    eventually(
        "the upstream to see the cancel",
        Duration::from_secs(5),
        || async {
            let count = call(&b, "shared__cancellations", Value::Null).await;
            (ok_text(&count) == "1").then_some(())
        },
    )
    .await;
    let b_result = within("B's call", b_call).await.unwrap().expect("B's call");
    assert_eq!(ok_text(&b_result), "done after 10 steps");
    let count = call(&b, "shared__cancellations", Value::Null).await;
    assert_eq!(ok_text(&count), "1");
    // Counted as cancelled, not as the mount's failure: per-mount error
    // rates rose whenever a user pressed Stop.
    let series = |outcome: &str| {
        format!("junction_requests_total{{mount=\"shared\",method=\"tools/call\",outcome=\"{outcome}\"}} ")
    };
    let metrics = eventually(
        "the cancelled call to be counted",
        Duration::from_secs(5),
        || async {
            let metrics = metrics_text(&gateway).await;
            metrics.contains(&series("cancelled")).then_some(metrics)
        },
    )
    .await;
    assert!(!metrics.contains(&series("tool_error")), "{metrics}");
    close(a).await;
    close(b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roots_requests_and_changes_reach_the_right_client() {
    let gateway = Gateway::start(&config()).await;
    let url = gateway.mcp_url();
    let roots: rmcp::model::ClientCapabilities =
        serde_json::from_value(json!({"roots": {"listChanged": true}})).unwrap();
    let (plain, rooted) = tokio::join!(gateway.connect(), connect_with(&url, roots));

    for tool in ["private__roots", "shared__roots"] {
        let answer = call(&rooted, tool, Value::Null).await;
        assert!(
            ok_text(&answer).starts_with("file:///junction-test-root\n"),
            "{tool}: {answer:?}"
        );
    }
    let refused = call(&plain, "shared__roots", Value::Null).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert!(
        text(&refused).contains("did not declare roots"),
        "{refused:?}"
    );

    // The client's roots/list_changed reaches its per-session upstream.
    within(
        "roots/list_changed",
        rooted.peer().notify_roots_list_changed(),
    )
    .await
    .expect("notification sent");
    eventually(
        "the upstream to hear about the change",
        Duration::from_secs(5),
        || async {
            let answer = call(&rooted, "private__roots", Value::Null).await;
            ok_text(&answer).ends_with("changes: 1").then_some(())
        },
    )
    .await;
    close(plain).await;
    close(rooted).await;
}

/// A `per_session` mount's own sessions only list what the server offers
/// (one per client profile): a server that asks for roots as it starts is
/// told there are none, quietly. It was refused -32603 ("cannot route"),
/// with a warning in the gateway's log, each time a client with roots
/// made the mount discover its profile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_only_lists_has_no_roots() {
    let dir = tempfile::tempdir().unwrap();
    let answers = dir.path().join("answers");
    let mount = python_fixture_mount_with_args(
        "rooted",
        "roots_at_start.py",
        &[answers.to_str().expect("a UTF-8 path")],
        "isolation = \"per_session\"",
    );
    let gateway = Gateway::start(&format!("{SERVER_TOML}{mount}")).await;
    let roots: rmcp::model::ClientCapabilities =
        serde_json::from_value(json!({"roots": {}})).unwrap();
    let client = connect_with(&gateway.mcp_url(), roots).await;
    // Lists of its profile: discovered by a session of the mount's own.
    let tools = within("tools/list", client.peer().list_all_tools())
        .await
        .expect("tools listed");
    assert!(
        tools.iter().any(|tool| tool.name == "rooted__ping"),
        "{tools:?}"
    );
    let written = eventually(
        "the server's roots answers",
        Duration::from_secs(10),
        || async {
            let text = std::fs::read_to_string(&answers).unwrap_or_default();
            (text.lines().count() >= 2).then_some(text)
        },
    )
    .await;
    for line in written.lines() {
        let answer: Value = serde_json::from_str(line).unwrap();
        assert_eq!(answer, json!({"result": {"roots": []}}), "{written}");
    }
    let stderr = gateway.proc.stderr.text();
    assert!(!stderr.contains("cannot be routed"), "{stderr}");
    close(client).await;
}

/// Log lines an upstream writes after its answer are not the call's: they
/// never ride its stream ahead of the answer (they did, when read before
/// the call had taken the answer the transport had already read), while
/// those written before the answer still do, in order (black-box helper).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_written_after_an_answer_do_not_overtake_it() {
    let mount = python_fixture_mount(
        "chatty",
        "logs_around_answer.py",
        "isolation = \"per_session\"",
    );
    let gateway = Gateway::start(&format!("{SERVER_TOML}{mount}")).await;
    let http = reqwest::Client::new();
    let session = raw::open_session(&http, &gateway.mcp_url()).await;
    // Each run a race in the old code: lose it a few times over.
    for run in 0..10 {
        let call = json!({"jsonrpc": "2.0", "id": run, "method": "tools/call",
            "params": {"name": "chatty__burst", "arguments": {}}});
        let answer = raw::post(
            &http,
            &gateway.mcp_url(),
            Some(&session),
            raw::JSON_POST,
            call.to_string(),
        )
        .await;
        let logs: Vec<&str> = answer
            .messages
            .iter()
            .filter(|message| message["method"] == "notifications/message")
            .filter_map(|message| message["params"]["data"].as_str())
            .collect();
        let before: Vec<String> = (0..5).map(|n| format!("before {n}")).collect();
        assert_eq!(logs, before, "run {run}: {:#?}", answer.messages);
        assert_eq!(answer.tool_text(), Some("done"), "run {run}: {answer:?}");
    }
}

/// `quiet` (level `error`) got its `shared__log error` message, and
/// nothing below it.
async fn assert_only_its_error_reached(quiet: &Client) {
    eventually("quiet's error message", Duration::from_secs(5), || async {
        (!quiet.service().logs().is_empty()).then_some(())
    })
    .await;
    assert_eq!(quiet.service().logs(), [json!("shared__log error")]);
}

/// `logging/setLevel` `level` from `client`.
async fn set_level(client: &Client, level: rmcp::model::LoggingLevel) {
    within(
        "logging/setLevel",
        client
            .peer()
            .set_level(rmcp::model::SetLevelRequestParams::new(level)),
    )
    .await
    .expect("logging/setLevel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_session_gets_log_messages_at_its_own_level() {
    use rmcp::model::LoggingLevel;
    let gateway = Gateway::start(&config()).await;
    let (quiet, chatty) = tokio::join!(gateway.connect(), gateway.connect());
    set_level(&quiet, LoggingLevel::Error).await;
    set_level(&chatty, LoggingLevel::Debug).await;

    // The shared upstream logs everything; quiet's own level still
    // filters what reaches quiet. Its per-session upstream opens after the
    // setLevel and gets the level too (so it does not send the warning).
    for (client, tool, level, answer) in [
        (&quiet, "shared__log", "info", "logged"),
        (
            &quiet,
            "private__log",
            "warning",
            "not sent: below the level set (Error)",
        ),
        (&quiet, "shared__log", "error", "logged"),
        (&chatty, "shared__log", "info", "logged"),
    ] {
        let data = format!("{tool} {level}");
        let logged = call(client, tool, json!({"level": level, "data": data})).await;
        assert_eq!(ok_text(&logged), answer);
    }
    eventually("chatty's info message", Duration::from_secs(5), || async {
        (chatty.service().logs() == [json!("shared__log info")]).then_some(())
    })
    .await;
    assert_only_its_error_reached(&quiet).await;
    close(quiet).await;
    close(chatty).await;
}

/// A session that set no level gets every level from a shared upstream,
/// whatever another session set: the shared upstream was told the most
/// verbose level any session had set, so one client's `error` cut every
/// other client (those that set nothing, and those that came later) down
/// to errors, even after it left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_set_no_level_gets_every_level_from_a_shared_mount() {
    use rmcp::model::LoggingLevel;
    let gateway = Gateway::start(&config()).await;
    let (quiet, unset) = tokio::join!(gateway.connect(), gateway.connect());
    set_level(&quiet, LoggingLevel::Error).await;
    async fn log(client: &Client, level: &str) {
        let data = format!("shared__log {level}");
        let logged = call(client, "shared__log", json!({"level": level, "data": data})).await;
        assert_eq!(ok_text(&logged), "logged");
    }
    log(&unset, "info").await;
    log(&quiet, "info").await;
    log(&quiet, "error").await;
    eventually("unset's info message", Duration::from_secs(5), || async {
        (unset.service().logs() == [json!("shared__log info")]).then_some(())
    })
    .await;
    assert_only_its_error_reached(&quiet).await;
    close(quiet).await;
    let later = gateway.connect().await;
    log(&later, "debug").await;
    eventually(
        "a later session's debug message",
        Duration::from_secs(5),
        || async { (later.service().logs() == [json!("shared__log debug")]).then_some(()) },
    )
    .await;
    close(unset).await;
    close(later).await;
}

/// `_meta` keys the gateway knows nothing of pass through both ways: the
/// client's reach the upstream, the upstream's reach the client, over a
/// stdio and a Streamable HTTP upstream, shared and per-session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_meta_keys_pass_through_both_ways() {
    let demo = DemoHttp::start().await;
    let config = format!(
        "{}{}{}",
        config(),
        http_mount("hshared", &demo.mcp_url(), "isolation = \"shared\""),
        http_mount("hprivate", &demo.mcp_url(), "isolation = \"per_session\""),
    );
    let gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    for mount in ["shared", "private", "hshared", "hprivate"] {
        let mut meta = rmcp::model::MetaObject::new();
        meta.insert("x-custom".into(), json!({"kept": [1, "two"]}));
        let mut params = CallToolRequestParams::new(format!("{mount}__meta"));
        params.meta = Some(rmcp::model::RequestMetaObject(meta));
        let result = within(&format!("{mount}__meta"), client.peer().call_tool(params))
            .await
            .expect("call");
        let seen: Value = serde_json::from_str(ok_text(&result)).expect("meta as JSON");
        assert_eq!(
            seen["x-custom"],
            json!({"kept": [1, "two"]}),
            "{mount}: {seen}"
        );
        let answered = result.meta.as_ref().map(|meta| meta.0.get("x-demo"));
        assert_eq!(
            answered,
            Some(Some(&json!({"from": "the server"}))),
            "{mount}: {result:?}"
        );
    }
    close(client).await;
}

/// What an upstream puts in a log message's or a progress notification's
/// `_meta` (trace context, a related task, its own keys) reaches the
/// client with it, on shared and per-session stdio mounts and on an HTTP
/// one (whose calls take the direct path): the relay rebuilt both from
/// their params alone, and rmcp hands a notification's `_meta` over where
/// it was not looked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_and_progress_keep_their_meta() {
    let upstream = DemoHttp::start().await;
    let config = format!(
        "{SERVER_TOML}{}{}{}",
        stdio_demo_mount("shared", "isolation = \"shared\""),
        stdio_demo_mount("private", "isolation = \"per_session\""),
        http_mount("remote", &upstream.mcp_url(), ""),
    );
    let gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let session = raw::open_session(&http, &url).await;
    let meta = json!({"x-trace": "t1", "vendor.example/span": {"id": 7}});
    let mut id = 2;
    for mount in ["shared", "private", "remote"] {
        let calls = [
            (
                "notifications/message",
                json!({"name": format!("{mount}__log"), "arguments": {"level": "info", "data": "d", "meta": meta}}),
            ),
            (
                "notifications/progress",
                json!({"name": format!("{mount}__slow"), "arguments": {"steps": 1, "delay_ms": 1, "meta": meta},
                       "_meta": {"progressToken": "p1"}}),
            ),
        ];
        for (method, params) in calls {
            // rmcp's HTTP server (the demo's) sends a tool's log message on
            // its GET stream, not the call's; the gateway then relays it by
            // who has a call in flight, which may already be answered.
            if mount == "remote" && method == "notifications/message" {
                continue;
            }
            id += 1;
            let body =
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params});
            let answer = raw::post(
                &http,
                &url,
                Some(&session),
                raw::JSON_POST,
                body.to_string(),
            )
            .await;
            let relayed: Vec<&Value> = answer
                .messages
                .iter()
                .filter(|message| message["method"] == method)
                .collect();
            assert_eq!(relayed.len(), 1, "{mount}: {:#?}", answer.messages);
            assert_eq!(
                relayed[0]["params"]["_meta"], meta,
                "{mount}: {:#?}",
                relayed[0]
            );
        }
    }
}

/// A gateway over `flood_sampling.py` (mount `flood`) and a raw session
/// of a client that declares sampling and never answers.
struct SilentSampler {
    _gateway: Gateway,
    http: reqwest::Client,
    url: String,
    session: String,
    /// The scripted upstream's server, when it is one (`over_script`).
    _upstream: Option<tokio::task::JoinHandle<()>>,
}

impl SilentSampler {
    /// Over the stdio fixture `flood_sampling.py`.
    async fn start() -> Self {
        Self::over(&python_fixture_mount("flood", "flood_sampling.py", "")).await
    }

    /// Over `mount`, named `flood`.
    async fn over(mount: &str) -> Self {
        let gateway = Gateway::start(&format!("{SERVER_TOML}{mount}")).await;
        let http = reqwest::Client::new();
        let url = gateway.mcp_url();
        let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"silent-sampler","version":"0"}}}"#;
        let session = raw::open_session_with(&http, &url, initialize).await;
        Self {
            _gateway: gateway,
            http,
            url,
            session,
            _upstream: None,
        }
    }

    /// Over a scripted Streamable HTTP upstream answering as `script`
    /// (`common::scripted_sse_upstream`).
    async fn over_script(script: fn(&Value) -> common::ScriptedReply) -> Self {
        let (port, serving) = common::scripted_sse_upstream(json!({"tools": {}}), script).await;
        let url = format!("http://127.0.0.1:{port}/mcp");
        let mut sampler = Self::over(&http_mount("flood", &url, "")).await;
        sampler._upstream = Some(serving);
        sampler
    }

    /// `tools/call flood__<tool>`, answered with every message of its
    /// stream.
    async fn call(&self, tool: &str, arguments: Value) -> raw::Answer {
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": format!("flood__{tool}"), "arguments": arguments}});
        raw::post(
            &self.http,
            &self.url,
            Some(&self.session),
            raw::JSON_POST,
            call.to_string(),
        )
        .await
    }
}

/// An upstream that sends its client more requests (sampling here) than
/// the client answers is refused past a bound: they have no timeout of
/// their own (a person may take minutes), so each one held a task and an
/// entry on both sides for as long as the session lived. The client here
/// declares sampling and never answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_for_a_client_are_bounded() {
    let sampler = SilentSampler::start().await;
    let answer = sampler.call("flood", json!({"n": 40})).await;
    let asked = answer
        .messages
        .iter()
        .filter(|message| message["method"] == "sampling/createMessage")
        .count();
    assert_eq!(
        answer.body["result"]["content"][0]["text"], "errors=8 results=0",
        "{answer:?}"
    );
    assert_eq!(asked, 32, "sampling requests that reached the client");
}

/// The bound on requests waiting for clients is each client session's
/// own: on a shared HTTP mount, a client that leaves 32 sampling requests
/// unanswered used up every place, and every other client's sampling was
/// refused until that session ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_answers_leaves_the_others_their_places() {
    // The gateway's bound (`CLIENT_REQUESTS_MAX`, upstream/handler.rs).
    const WAITING_PER_CLIENT: usize = 32;
    let upstream = DemoHttp::start().await;
    let gateway = Gateway::start(&format!(
        "{SERVER_TOML}{}",
        http_mount("shared", &upstream.mcp_url(), "")
    ))
    .await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"silent","version":"0"}}}"#;
    let silent = raw::open_session_with(&http, &url, initialize).await;
    // Each call's stream, held open once its sampling request came.
    let waiting = futures::future::join_all((0..WAITING_PER_CLIENT).map(|n| {
        let (http, url, silent) = (http.clone(), url.clone(), silent.clone());
        async move {
            let call = json!({"jsonrpc": "2.0", "id": 10 + n, "method": "tools/call",
                "params": {"name": "shared__ask_model", "arguments": {"prompt": "never"}}});
            let mut response = within(
                "a silent client's call",
                http.post(&url)
                    .header("content-type", "application/json")
                    .header("accept", raw::ACCEPT_BOTH)
                    .header("mcp-session-id", &silent)
                    .header("mcp-protocol-version", raw::VERSION)
                    .body(call.to_string())
                    .send(),
            )
            .await
            .unwrap();
            let mut seen = String::new();
            while !seen.contains("sampling/createMessage") {
                let chunk = within("its sampling request", response.chunk())
                    .await
                    .unwrap()
                    .unwrap_or_else(|| panic!("the call ended without asking: {seen}"));
                seen.push_str(&String::from_utf8_lossy(&chunk));
            }
            response
        }
    }))
    .await;
    assert_eq!(waiting.len(), WAITING_PER_CLIENT);

    let sampler = connect_with(&url, sampling()).await;
    let answer = call(&sampler, "shared__ask_model", json!({"prompt": "mine"})).await;
    assert_eq!(ok_text(&answer), "test-model said: echo: mine");
    close(sampler).await;
    drop(waiting);
}

/// An upstream's cancel of its own request to a client reaches the client
/// on the stream that request came on, under the id the client saw it by.
/// It went to the `GET` stream (rmcp routes a cancel by the client's own
/// request ids), which a client without one never reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_cancel_goes_on_its_requests_stream() {
    let sampler = SilentSampler::start().await;
    let answer = sampler.call("give_up", json!({})).await;
    assert_eq!(
        answer.body["result"]["content"][0]["text"], "gave up",
        "{answer:?}"
    );
    let asked = answer
        .messages
        .iter()
        .find(|message| message["method"] == "sampling/createMessage")
        .unwrap_or_else(|| panic!("the sampling request: {answer:?}"));
    let cancelled = answer
        .messages
        .iter()
        .find(|message| message["method"] == "notifications/cancelled");
    assert_eq!(
        cancelled.map(|cancel| &cancel["params"]["requestId"]),
        Some(&asked["id"]),
        "{answer:?}"
    );
}

/// An upstream that cancels its request to the client and answers its
/// call at once (in one write) still has the cancel reach the client
/// before the answer ends the call's stream. The answer won the race with
/// the task relaying the cancel now and then, and the cancel was lost
/// with the stream.
///
/// Over stdio (through rmcp's client) and over HTTP (the direct path,
/// which hands the cancel to rmcp's loop and takes the answer itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_cancel_written_with_the_answer_comes_before_it() {
    let over_http = SilentSampler::over_script(give_up_at_once).await;
    let over_stdio = SilentSampler::start().await;
    for (transport, sampler) in [("http", &over_http), ("stdio", &over_stdio)] {
        for attempt in 0..20 {
            let answer = sampler.call("give_up", json!({"answer_after_s": 0})).await;
            assert_eq!(
                answer.body["result"]["content"][0]["text"], "gave up",
                "{transport} attempt {attempt}: {answer:?}"
            );
            let methods: Vec<&str> = answer
                .messages
                .iter()
                .map(|message| message["method"].as_str().unwrap_or("answer"))
                .collect();
            assert_eq!(
                methods,
                [
                    "sampling/createMessage",
                    "notifications/cancelled",
                    "answer"
                ],
                "{transport} attempt {attempt}: {answer:?}"
            );
        }
    }
}

/// A relayed sampling request's `temperature` reaches the client as the
/// upstream wrote it: rmcp read 0.7 into an `f32` and wrote it through an
/// `f64`, and the client was asked for 0.699999988079071. So do its other
/// `f32`s: the model preferences' priorities and a content annotation's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relayed_sampling_request_keeps_its_temperature() {
    let sampler = SilentSampler::over_script(sample_then_answer).await;
    let answer = sampler.call("sample", json!({})).await;
    assert_eq!(
        answer.body["result"]["content"][0]["text"], "asked",
        "{answer:?}"
    );
    let asked = answer
        .messages
        .iter()
        .find(|message| message["method"] == "sampling/createMessage")
        .unwrap_or_else(|| panic!("the sampling request: {answer:?}"));
    let params = &asked["params"];
    assert_eq!(params["temperature"].to_string(), "0.7", "{asked}");
    assert_eq!(params["maxTokens"], 10, "{asked}");
    assert_eq!(params["stopSequences"], json!(["\n\n"]), "{asked}");
    assert_eq!(params["messages"][0]["content"]["text"], "hi", "{asked}");
    assert_eq!(
        params["messages"][0]["content"]["annotations"]["priority"].to_string(),
        "0.3",
        "{asked}"
    );
    for (priority, written) in [
        ("costPriority", "0.3"),
        ("speedPriority", "0.1"),
        ("intelligencePriority", "0.9"),
    ] {
        let relayed = params["modelPreferences"][priority].to_string();
        assert_eq!(relayed, written, "{priority}: {asked}");
    }
}

/// A sampling request rmcp cannot read (content of a kind it does not know
/// there) reaches the client as the upstream wrote it, for the client to
/// accept or refuse: the gateway answered -32601 with the method's name,
/// having declared sampling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampling_request_rmcp_cannot_read_is_relayed_as_written() {
    let sampler = SilentSampler::over_script(|request| match request["method"].as_str() {
        Some("tools/list") => common::ScriptedReply::Result(
            json!({"tools": [{"name": "sample", "inputSchema": {"type": "object"}}]}),
        ),
        Some("tools/call") => common::ScriptedReply::Stream(vec![
            (
                Duration::ZERO,
                json!({"jsonrpc": "2.0", "id": "s-1", "method": "sampling/createMessage",
                "params": {"messages": [{"role": "user", "content": {"type": "resource",
                    "resource": {"uri": "doc://1", "text": "read this"}}}],
                    "maxTokens": 10, "x-extra": {"kept": true},
                    "_meta": {"progressToken": "up-1", "x-meta": 1}}}),
            ),
            (
                Duration::from_millis(200),
                json!({"jsonrpc": "2.0", "id": "$request", "result": {"content": []}}),
            ),
        ]),
        _ => common::ScriptedReply::Result(json!({})),
    })
    .await;
    let answer = sampler.call("sample", json!({})).await;
    let asked = answer
        .messages
        .iter()
        .find(|message| message["method"] == "sampling/createMessage")
        .unwrap_or_else(|| panic!("the sampling request: {answer:?}"));
    let params = &asked["params"];
    assert_eq!(
        params["messages"][0]["content"],
        json!({"type": "resource", "resource": {"uri": "doc://1", "text": "read this"}}),
        "{asked}"
    );
    assert_eq!(params["x-extra"], json!({"kept": true}), "{asked}");
    assert_eq!(params["maxTokens"], 10, "{asked}");
    // Its `_meta` as a typed one's: the upstream's progress token means
    // nothing to the client.
    assert_eq!(params["_meta"]["x-meta"], 1, "{asked}");
    assert_ne!(params["_meta"]["progressToken"], "up-1", "{asked}");
}

/// A request the upstream sends with an id it used before in the session
/// is refused, not relayed: it is a replay (some servers resend, on a
/// resumed stream, what every stream carried, whichever path read it
/// first), and on a shared mount it would be another client's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_sent_again_with_its_id_is_not_relayed() {
    let sampler = SilentSampler::over_script(sample_then_answer).await;
    let asked = |answer: &raw::Answer| {
        answer
            .messages
            .iter()
            .filter(|message| message["method"] == "sampling/createMessage")
            .count()
    };
    let first = sampler.call("sample", json!({})).await;
    assert_eq!(asked(&first), 1, "{first:?}");
    let again = sampler.call("sample", json!({})).await;
    assert_eq!(
        again.body["result"]["content"][0]["text"], "asked",
        "{again:?}"
    );
    assert_eq!(
        asked(&again),
        0,
        "the replayed request reached the client: {again:?}"
    );
}

/// `sample`: a sampling request with a temperature (its id `s-1` each
/// time), then, 0.2 s later (unanswered), the call's answer.
fn sample_then_answer(request: &Value) -> common::ScriptedReply {
    use common::ScriptedReply;
    match request["method"].as_str() {
        Some("tools/list") => ScriptedReply::Result(
            json!({"tools": [{"name": "sample", "inputSchema": {"type": "object"}}]}),
        ),
        Some("tools/call") => ScriptedReply::Stream(vec![
            (
                Duration::ZERO,
                json!({"jsonrpc": "2.0", "id": "s-1", "method": "sampling/createMessage",
                       "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "hi",
                                                                          "annotations": {"priority": 0.3}}}],
                                  "modelPreferences": {"costPriority": 0.3, "speedPriority": 0.1,
                                                       "intelligencePriority": 0.9},
                                  "maxTokens": 10, "temperature": 0.7, "stopSequences": ["\n\n"]}}),
            ),
            (
                Duration::from_millis(200),
                json!({"jsonrpc": "2.0", "id": "$request", "result": {"content": [{"type": "text", "text": "asked"}]}}),
            ),
        ]),
        _ => ScriptedReply::Result(json!({})),
    }
}

/// A call's answer stream resumed after a break brings only what belongs
/// to it: the reference server replays, after the `Last-Event-ID`, the
/// events of every stream of the session, and on a shared mount another
/// client's log line (or sampling request) reached this one. An event
/// delivered before is a replay, and is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_answer_stream_does_not_replay_another_clients_events() {
    let (port, _serving) = common::scripted_sse_upstream(json!({"tools": {}}), replaying).await;
    let gateway = Gateway::start(&format!(
        "{SERVER_TOML}{}",
        http_mount("up", &format!("http://127.0.0.1:{port}/mcp"), "")
    ))
    .await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let call = |session: String, tool: &'static str| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                              "params": {"name": format!("up__{tool}"), "arguments": {}}});
            raw::post(
                &http,
                &url,
                Some(&session),
                raw::JSON_POST,
                body.to_string(),
            )
            .await
        }
    };
    let b = raw::open_session(&http, &url).await;
    let a = raw::open_session(&http, &url).await;
    let answer = call(b, "b").await;
    assert_eq!(
        answer.body["result"]["content"][0]["text"], "b done",
        "{answer:?}"
    );
    assert!(
        answer
            .messages
            .iter()
            .any(|message| message["params"]["data"] == "B-SECRET"),
        "B's own log line: {answer:?}"
    );
    let answer = call(a, "a").await;
    assert_eq!(
        answer.body["result"]["content"][0]["text"], "a done",
        "{answer:?}"
    );
    assert!(
        !format!("{answer:?}").contains("B-SECRET"),
        "B's log line reached A: {answer:?}"
    );
}

/// `b`: a log line and the answer. `a`: an event, then the stream ends;
/// its resume replays `b`'s log line (as the reference server does), then
/// answers `a` (the second direct call on the session: `junction-2`).
fn replaying(request: &Value) -> common::ScriptedReply {
    use common::ScriptedReply;
    let secret = json!({"jsonrpc": "2.0", "method": "notifications/message",
                        "params": {"level": "error", "data": "B-SECRET"}});
    let answer = |id: Value, text: &str| json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": text}]}});
    match (
        request["method"].as_str(),
        request["params"]["name"].as_str(),
    ) {
        (Some("tools/list"), _) => ScriptedReply::Result(json!({"tools": [
            {"name": "a", "inputSchema": {"type": "object"}},
            {"name": "b", "inputSchema": {"type": "object"}},
        ]})),
        (Some("tools/call"), Some("b")) => ScriptedReply::Stream(vec![
            (Duration::ZERO, json!({"eventId": "b-1", "data": secret})),
            (
                Duration::ZERO,
                json!({"eventId": "b-2", "data": answer(json!("$request"), "b done")}),
            ),
        ]),
        (Some("tools/call"), Some("a")) => ScriptedReply::Stream(vec![(
            Duration::ZERO,
            json!({"eventId": "a-1", "data": null}),
        )]),
        (Some("GET"), _) if request["lastEventId"] == "a-1" => ScriptedReply::Stream(vec![
            (Duration::ZERO, json!({"eventId": "b-1", "data": secret})),
            (
                Duration::ZERO,
                json!({"eventId": "a-2", "data": answer(json!("junction-2"), "a done")}),
            ),
        ]),
        _ => ScriptedReply::Result(json!({})),
    }
}

/// `give_up` as `flood_sampling.py` does it with `answer_after_s = 0`, in
/// an SSE answer: a sampling request, then 0.3 s later its cancel and the
/// call's answer in one write.
fn give_up_at_once(request: &Value) -> common::ScriptedReply {
    use common::ScriptedReply;
    match request["method"].as_str() {
        Some("tools/list") => ScriptedReply::Result(
            json!({"tools": [{"name": "give_up", "inputSchema": {"type": "object"}}]}),
        ),
        // A request id of its own each time: ids are unique within a
        // session (a repeated one is refused as a replay).
        Some("tools/call") => ScriptedReply::Stream(vec![
            (
                Duration::ZERO,
                json!({"jsonrpc": "2.0", "id": format!("s-give-up-{}", request["id"]), "method": "sampling/createMessage",
                       "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 10}}),
            ),
            (
                Duration::from_millis(300),
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": format!("s-give-up-{}", request["id"]), "reason": "took too long"}}),
            ),
            (
                Duration::ZERO,
                json!({"jsonrpc": "2.0", "id": "$request", "result": {"content": [{"type": "text", "text": "gave up"}]}}),
            ),
        ]),
        _ => ScriptedReply::Result(json!({})),
    }
}

/// Notifications an upstream writes before its answer to `initialize`
/// (rmcp drops all but log messages then) hold no later answer: counted
/// as waiting to be relayed and never handled, each made every call on
/// the session wait the whole drain limit (2 s) for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_before_initialize_hold_no_answer() {
    let config = format!(
        "{SERVER_TOML}{}",
        python_fixture_mount("early", "announce_before_initialize.py", "")
    );
    let gateway = Gateway::launch(
        &config,
        "toml",
        &[("RUST_LOG", "info,rmcp=warn,junction::upstream::relay=debug")],
    )
    .await;
    let client = gateway.connect().await;
    for _ in 0..3 {
        let answer = call(&client, "early__ping", json!({})).await;
        assert_eq!(text(&answer), "pong");
    }
    close(client).await;
    let held = "answering before every earlier notification was relayed";
    let stderr = gateway.proc.stderr.text();
    assert!(
        !stderr.contains(held),
        "an answer waited out the drain limit:\n{stderr}"
    );
}

/// Progress and log messages an upstream sends in one order reach the
/// client's request stream in that order: the log lines went through the
/// gateway's own queue, which the stream read before rmcp's channel, and
/// so overtook the progress sent before them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_and_logs_keep_their_order() {
    let gateway = Gateway::start(&format!(
        "{SERVER_TOML}{}",
        python_fixture_mount("chat", "interleaved.py", "")
    ))
    .await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let session = common::raw::open_session(&http, &url).await;
    const STEPS: u64 = 100;
    for attempt in 0..10 {
        let call = json!({
            "jsonrpc": "2.0", "id": 10 + attempt, "method": "tools/call",
            "params": {"name": "chat__chatty", "arguments": {"count": STEPS}, "_meta": {"progressToken": "p"}},
        });
        let answer = common::raw::post(
            &http,
            &url,
            Some(&session),
            common::raw::JSON_POST,
            call.to_string(),
        )
        .await;
        let seen: Vec<String> = answer
            .messages
            .iter()
            .map(|message| match message["method"].as_str() {
                Some("notifications/progress") => format!(
                    "p{}",
                    message["params"]["progress"].as_f64().unwrap_or_default()
                ),
                Some("notifications/message") => {
                    format!("l{}", message["params"]["data"].as_str().unwrap_or("?"))
                }
                _ => "answer".to_owned(),
            })
            .collect();
        let expected: Vec<String> = (1..=STEPS)
            .flat_map(|step| [format!("p{step}"), format!("l{step}")])
            .chain(["answer".to_owned()])
            .collect();
        assert_eq!(seen, expected, "attempt {attempt}");
    }
}

/// A call whose upstream waits for its client (a sampling request a person
/// must approve, an elicitation form) is not silent: its idle timeout does
/// not run out meanwhile. The call failed at `[timeouts] request` with the
/// client's answer still to come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_its_client_does_not_time_out() {
    let gateway = Gateway::start(&format!(
        "{SERVER_TOML}{}",
        stdio_demo_mount("shared", "timeouts = { request = \"1s\" }")
    ))
    .await;
    let sampler = connect_with(&gateway.mcp_url(), sampling()).await;
    let answer = call(
        &sampler,
        "shared__ask_model",
        json!({"prompt": "sleep 2500"}),
    )
    .await;
    assert!(
        text(&answer).contains("echo: sleep 2500"),
        "{}",
        text(&answer)
    );
    assert_eq!(sampler.service().sampling_requests(), 1);
    close(sampler).await;
}

/// A client's `roots/list_changed` reaches its per-session upstream while
/// that upstream's open is still finishing (here: telling it the log level
/// the client chose before, which it takes a second to answer). It was
/// dropped: only an upstream whose open had ended was told, and this one
/// kept the roots it had asked for at its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roots_changed_while_an_upstream_opens_reach_it() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let marker = dir.path().join("set-level");
    let config = format!(
        "{SERVER_TOML}{}",
        python_fixture_mount(
            "slow",
            "slow_set_level.py",
            &format!(
                "isolation = \"per_session\"\nenv = {{ SET_LEVEL_MARKER = {:?} }}",
                marker.display().to_string()
            )
        )
    );
    let gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{"listChanged":true}},"clientInfo":{"name":"rooted","version":"0"}}}"#;
    let session = raw::open_session_with(&http, &url, initialize).await;
    let post = |body: Value| {
        raw::post(
            &http,
            &url,
            Some(&session),
            raw::JSON_POST,
            body.to_string(),
        )
    };
    let set_level = json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel",
        "params": {"level": "info"}});
    assert!(post(set_level).await.body.get("result").is_some());
    let changes = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "slow__changes", "arguments": {}}})
    };
    // The first call opens the upstream; the change comes while the open
    // waits for the upstream to take the level.
    let first = post(changes(3));
    let change = async {
        eventually(
            "the upstream to be taking the level",
            OP_TIMEOUT,
            || async { marker.exists().then_some(()) },
        )
        .await;
        let notification = json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"});
        post(notification).await
    };
    let (_, told) = tokio::join!(first, change);
    assert_eq!(told.status, reqwest::StatusCode::ACCEPTED, "{told:?}");
    let mut id = 3;
    eventually("the upstream to be told", Duration::from_secs(5), || {
        id += 1;
        let answer = post(changes(id));
        async move { (answer.await.tool_text() == Some("1")).then_some(()) }
    })
    .await;
}

/// POSTs `body` on `session` and keeps what its SSE answer says in
/// `seen`, as it arrives; returns once the stream has ended.
async fn read_post_into(
    http: reqwest::Client,
    mcp: String,
    session: String,
    body: Value,
    seen: std::sync::Arc<std::sync::Mutex<String>>,
) {
    let mut request = http.post(&mcp).body(body.to_string());
    for (name, value) in common::raw::JSON_POST {
        request = request.header(*name, *value);
    }
    let mut response = request
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", common::raw::VERSION)
        .send()
        .await
        .expect("the POST");
    while let Ok(Some(chunk)) = response.chunk().await {
        seen.lock()
            .unwrap()
            .push_str(&String::from_utf8_lossy(&chunk));
    }
}

/// A server request that cannot be told apart between two calls of one
/// session (a stdio upstream: no request association on the wire) goes
/// on one of their streams. It went to the session's GET stream, which a
/// client need not open: it was never delivered, and both calls waited,
/// their timers paused as if the client were answering, for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_request_of_one_sessions_two_calls_reaches_a_client_without_a_get_stream() {
    let gateway = Gateway::start(&config()).await;
    let http = reqwest::Client::new();
    let mcp = gateway.mcp_url();
    let initialize =
        common::raw::INITIALIZE.replace(r#""capabilities":{}"#, r#""capabilities":{"roots":{}}"#);
    let session = common::raw::open_session_with(&http, &mcp, &initialize).await;
    let (slow_seen, roots_seen) = (Default::default(), Default::default());
    let slow = json!({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
        "params": {"name": "private__slow", "arguments": slow_args(30, 100),
            "_meta": {"progressToken": "slow"}}});
    let roots = json!({"jsonrpc": "2.0", "id": "roots", "method": "tools/call",
        "params": {"name": "private__roots", "arguments": {}}});
    let slow_call = tokio::spawn(read_post_into(
        http.clone(),
        mcp.clone(),
        session.clone(),
        slow,
        std::sync::Arc::clone(&slow_seen),
    ));
    // The slow call runs upstream (its progress came) before the second
    // one starts.
    eventually("the slow call's progress", OP_TIMEOUT, || {
        let running = slow_seen.lock().unwrap().contains("notifications/progress");
        async move { running.then_some(()) }
    })
    .await;
    let roots_call = tokio::spawn(read_post_into(
        http.clone(),
        mcp.clone(),
        session.clone(),
        roots,
        std::sync::Arc::clone(&roots_seen),
    ));
    let asked = eventually(
        "roots/list on one of the calls' streams",
        OP_TIMEOUT,
        || {
            let seen = format!(
                "{}{}",
                slow_seen.lock().unwrap(),
                roots_seen.lock().unwrap()
            );
            async move {
                common::raw::sse_messages(&seen)
                    .into_iter()
                    .find(|message| message["method"] == "roots/list")
            }
        },
    )
    .await;
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"],
        "result": {"roots": [{"uri": "file:///two-calls"}]}});
    let posted = common::raw::post(
        &http,
        &mcp,
        Some(&session),
        common::raw::JSON_POST,
        answer.to_string(),
    )
    .await;
    assert_eq!(posted.status, reqwest::StatusCode::ACCEPTED, "{posted:?}");
    within("the roots call", roots_call).await.unwrap();
    let said = common::raw::sse_response(&roots_seen.lock().unwrap());
    assert_eq!(said["id"], "roots", "{said}");
    assert!(said.to_string().contains("file:///two-calls"), "{said}");
    slow_call.abort();
}
