//! End-to-end tests of the gateway: the real `junction` binary serving real
//! upstreams (its own demo server, over stdio and Streamable HTTP), driven
//! by rmcp clients and raw HTTP requests.

mod common;

use std::time::Duration;

use common::*;
use rmcp::model::{
    GetPromptRequestParams, JsonObject, ReadResourceRequestParams, ResourceContents,
};
use serde_json::{json, Value};

/// How long a per-session child may take to go away after its session ends.
const CHILD_EXIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Tools every demo server lists (it may list more).
const DEMO_TOOLS: [&str; 8] = [
    "add", "counter", "echo", "fail", "links", "pid", "recall", "remember",
];

fn content_uri(contents: &ResourceContents) -> &str {
    match contents {
        ResourceContents::TextResourceContents { uri, .. } => uri,
        ResourceContents::BlobResourceContents { uri, .. } => uri,
        other => panic!("unexpected resource contents {other:?}"),
    }
}

fn content_text(contents: &ResourceContents) -> &str {
    match contents {
        ResourceContents::TextResourceContents { text, .. } => text,
        other => panic!("expected text contents, got {other:?}"),
    }
}

async fn read(client: &Client, uri: &str) -> Result<rmcp::model::ReadResourceResult, String> {
    within(
        &format!("resources/read {uri}"),
        client.read_resource(ReadResourceRequestParams::new(uri)),
    )
    .await
    .map_err(|error| error.to_string())
}

/// Tests 1 and 2: shared vs per_session isolation over stdio, and the end of
/// a session taking its per-session child with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_isolation_and_per_session_cleanup() {
    let config = format!(
        "{SERVER_TOML}{}{}",
        stdio_demo_mount("shared", "isolation = \"shared\""),
        stdio_demo_mount("private", "isolation = \"per_session\""),
    );
    let gateway = Gateway::start(&config).await;
    let (a, b) = tokio::join!(gateway.connect(), gateway.connect());

    // Per-session state stays in its session.
    let stored = call(
        &a,
        "private__remember",
        json!({"key": "k", "value": "a-secret"}),
    )
    .await;
    assert_eq!(ok_text(&stored), "stored k");
    let recalled = call(&a, "private__recall", json!({"key": "k"})).await;
    assert_eq!(ok_text(&recalled), "a-secret");
    let missing = call(&b, "private__recall", json!({"key": "k"})).await;
    assert_eq!(missing.is_error, Some(true), "B saw A's value: {missing:?}");
    assert!(text(&missing).contains("no value"), "{missing:?}");

    // Shared state is visible to every session.
    call(
        &a,
        "shared__remember",
        json!({"key": "s", "value": "for-all"}),
    )
    .await;
    let seen = call(&b, "shared__recall", json!({"key": "s"})).await;
    assert_eq!(ok_text(&seen), "for-all");

    // ...because it is literally one process, and per_session is one each.
    let (private_a, private_b) =
        tokio::join!(call_pid(&a, "private__pid"), call_pid(&b, "private__pid"));
    let (shared_a, shared_b) =
        tokio::join!(call_pid(&a, "shared__pid"), call_pid(&b, "shared__pid"));
    assert_ne!(private_a, private_b, "per_session mount shared a process");
    assert_eq!(shared_a, shared_b, "shared mount used two processes");
    assert_ne!(private_a, shared_a);
    assert_ne!(private_b, shared_a);
    for pid in [private_a, private_b, shared_a] {
        assert!(process_alive(pid), "demo process {pid} is not running");
    }
    // A per-session upstream lives for the whole session, not one call.
    assert_eq!(call_pid(&a, "private__pid").await, private_a);

    // Test 2: closing A (rmcp sends DELETE for the session) ends A's child.
    close(a).await;
    eventually(
        "A's per-session child to exit",
        CHILD_EXIT_TIMEOUT,
        || async { (!process_alive(private_a)).then_some(()) },
    )
    .await;
    // Exited and reaped, not left as a zombie of the gateway.
    eventually(
        "A's per-session child to be reaped",
        CHILD_EXIT_TIMEOUT,
        || async { (!process_exists(private_a)).then_some(()) },
    )
    .await;

    // B and the shared process are untouched, and B still works.
    assert!(process_alive(private_b), "B's child died with A's session");
    assert!(
        process_alive(shared_a),
        "the shared child died with A's session"
    );
    assert_eq!(call_pid(&b, "private__pid").await, private_b);
    assert_eq!(call_pid(&b, "shared__pid").await, shared_a);
    call(
        &b,
        "private__remember",
        json!({"key": "k", "value": "b-own"}),
    )
    .await;
    let recalled = call(&b, "private__recall", json!({"key": "k"})).await;
    assert_eq!(ok_text(&recalled), "b-own");
    let shared = call(&b, "shared__recall", json!({"key": "s"})).await;
    assert_eq!(ok_text(&shared), "for-all");

    // A new session gets a new per-session process with fresh state.
    let c = gateway.connect().await;
    let private_c = call_pid(&c, "private__pid").await;
    assert!(![private_a, private_b, shared_a].contains(&private_c));
    let fresh = call(&c, "private__recall", json!({"key": "k"})).await;
    assert_eq!(fresh.is_error, Some(true), "{fresh:?}");

    close(b).await;
    close(c).await;
    eventually(
        "B's and C's per-session children to exit",
        CHILD_EXIT_TIMEOUT,
        || async { (!process_alive(private_b) && !process_alive(private_c)).then_some(()) },
    )
    .await;
    assert!(
        process_alive(shared_a),
        "shared child must outlive sessions"
    );
}

/// Test 3: the same mounts over a Streamable HTTP upstream. The demo server
/// keeps its state per process, and over HTTP every upstream session (one
/// per downstream session for `per_session`, one for `shared`) talks to the
/// same process, so state is visible everywhere; what differs from stdio is
/// asserted as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_upstream() {
    let demo = DemoHttp::start().await;
    let url = demo.mcp_url();
    let config = format!(
        "{SERVER_TOML}{}{}",
        http_mount("hshared", &url, "isolation = \"shared\""),
        http_mount("hprivate", &url, "isolation = \"per_session\""),
    );
    let gateway = Gateway::start(&config).await;
    let readyz = gateway.wait_ready().await;
    for (name, isolation) in [("hshared", "shared"), ("hprivate", "per_session")] {
        let mount = readyz_mount(&readyz, name);
        assert_eq!(mount["transport"], "streamable_http", "{readyz}");
        assert_eq!(mount["isolation"], isolation, "{readyz}");
        assert_eq!(mount["state"], "ready", "{readyz}");
    }

    // What the upstream itself lists, each name once per mount, namespaced.
    let direct = connect(&url).await;
    let upstream_tools = tool_names(&direct).await;
    close(direct).await;
    for tool in DEMO_TOOLS {
        assert!(
            upstream_tools.iter().any(|t| t == tool),
            "{upstream_tools:?}"
        );
    }
    // A shared mount lists what the gateway's own session sees (it declares
    // every client capability); a per-session mount lists what a client like
    // this one (no capabilities) gets from the upstream.
    let direct_full = connect_with(&url, full_capabilities()).await;
    let full_tools = tool_names(&direct_full).await;
    close(direct_full).await;
    let (a, b) = tokio::join!(gateway.connect(), gateway.connect());
    let mut expected: Vec<String> = full_tools
        .iter()
        .map(|tool| format!("hshared__{tool}"))
        .chain(
            upstream_tools
                .iter()
                .map(|tool| format!("hprivate__{tool}")),
        )
        .collect();
    expected.sort();
    assert_eq!(tool_names(&a).await, expected);

    // Every path leads to the one demo process.
    for (client, tool) in [
        (&a, "hshared__pid"),
        (&a, "hprivate__pid"),
        (&b, "hprivate__pid"),
        (&b, "hshared__pid"),
    ] {
        assert_eq!(call_pid(client, tool).await, demo.proc.pid(), "{tool}");
    }

    // State is per demo process, so it crosses mounts and sessions here.
    call(
        &a,
        "hprivate__remember",
        json!({"key": "h", "value": "via-a"}),
    )
    .await;
    assert_eq!(
        ok_text(&call(&a, "hprivate__recall", json!({"key": "h"})).await),
        "via-a"
    );
    assert_eq!(
        ok_text(&call(&b, "hprivate__recall", json!({"key": "h"})).await),
        "via-a"
    );
    assert_eq!(
        ok_text(&call(&b, "hshared__recall", json!({"key": "h"})).await),
        "via-a"
    );
    let counted: Vec<u64> = {
        let mut values = Vec::new();
        for (client, tool) in [
            (&a, "hprivate__counter"),
            (&b, "hprivate__counter"),
            (&a, "hshared__counter"),
        ] {
            values.push(
                ok_text(&call(client, tool, Value::Null).await)
                    .parse()
                    .unwrap(),
            );
        }
        values
    };
    assert_eq!(counted, [1, 2, 3], "one process counts every call");

    // Rewriting works the same through an HTTP upstream.
    let links = call(&b, "hprivate__links", Value::Null).await;
    let link = links.content[0].as_resource_link().expect("resource_link");
    assert_eq!(link.uri, "hprivate+demo://readme");
    let note = read(&a, "hprivate+demo://notes/h").await.unwrap();
    assert_eq!(content_uri(&note.contents[0]), "hprivate+demo://notes/h");
    assert_eq!(content_text(&note.contents[0]), "via-a");

    // Ending A's session (and its per-session upstream session) leaves B's
    // per-session upstream session working.
    close(a).await;
    assert_eq!(
        ok_text(&call(&b, "hprivate__echo", json!({"message": "still here"})).await),
        "still here"
    );
    assert_eq!(call_pid(&b, "hprivate__pid").await, demo.proc.pid());
    close(b).await;
    assert!(
        process_alive(demo.proc.pid()),
        "the demo server must outlive the sessions"
    );
}

/// With `fit_tool_names`, an upstream's tool names that LLM clients refuse
/// (a `.`, over 64 characters once namespaced) are listed as names that
/// fit their rule, and a call under the listed name reaches the tool under
/// its own name; so does one under the name as qualified, for a script
/// written before. Without it, the names are listed as qualified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_names_clients_refuse_are_fitted_when_asked_and_still_reach_their_tools() {
    let long = format!("export_{}report", "quarterly_".repeat(6));
    let mount = python_fixture_mount("odd", "rule_breaking_tool_names.py", "");
    let config = format!("[server]\nlisten = \"127.0.0.1:0\"\nfit_tool_names = true\n\n{mount}");
    let gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    let info = client.peer_info().expect("server info");
    let instructions = info.instructions.as_deref().unwrap_or_default();
    assert!(
        instructions.contains(
            "odd (tools and prompts odd__<name> (a tool name clients would refuse shortened, with a hash at its end)"
        ),
        "{instructions}"
    );
    let names = tool_names(&client).await;
    assert_eq!(names.len(), 3, "{names:?}");
    for name in &names {
        let fits = name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        assert!(fits, "{name} breaks the rule in {names:?}");
    }
    assert!(names.contains(&"odd__fine".to_owned()), "{names:?}");
    // Each refused character is `_`, a long name cut to 55, and either way
    // `_` and 8 hex characters of a hash added.
    let cut = format!("odd__{long}")[..55].to_owned();
    for (original, prefix) in [("get.weather", "odd__get_weather"), (long.as_str(), &cut)] {
        let listed = names
            .iter()
            .find(|name| {
                name.strip_prefix(prefix)
                    .and_then(|rest| rest.strip_prefix('_'))
                    .is_some_and(|hash| {
                        hash.len() == 8 && hash.chars().all(|c| c.is_ascii_hexdigit())
                    })
            })
            .unwrap_or_else(|| panic!("no name fitted from {original} in {names:?}"));
        let called = call(&client, listed, json!({})).await;
        assert_eq!(text(&called), format!("called {original}"));
        let qualified = format!("odd__{original}");
        let called = call(&client, &qualified, json!({})).await;
        assert_eq!(text(&called), format!("called {original}"));
    }

    let config = format!("{SERVER_TOML}{mount}");
    let gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    let mut names = tool_names(&client).await;
    names.sort();
    let mut expected = vec![
        format!("odd__{long}"),
        "odd__fine".to_owned(),
        "odd__get.weather".to_owned(),
    ];
    expected.sort();
    assert_eq!(names, expected);
}

/// With `fit_tool_names`, a name that looks fitted for a mount whose
/// tools are not listed (down: a client kept the name from an earlier
/// run) says that mount is unavailable, as a name as qualified does; it
/// was an unknown tool. On a mount that listed its tools, such a name it
/// does not list is unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fitted_name_of_a_mount_that_is_down_says_the_mount_is_unavailable() {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nfit_tool_names = true\n\n\
         [supervision]\ncrash_loop_restarts = 1\ndown_retry = \"1h\"\n\n\
         [mounts.dead]\ncommand = \"sh\"\nargs = [\"-c\", \"exit 3\"]\n\n{}",
        stdio_demo_mount("demo", "")
    );
    let gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    for name in ["dead__get_weather_9bd2ad39", "dead__get.weather"] {
        let result = call(&client, name, json!({})).await;
        assert_eq!(result.is_error, Some(true), "{name}: {result:?}");
        assert!(
            text(&result).contains("mount dead is unavailable"),
            "{name}: {result:?}"
        );
    }
    let error = call_err(&client, "demo__nothing_0123abcd", json!({})).await;
    assert_eq!(
        error.code,
        rmcp::model::ErrorCode::INVALID_PARAMS,
        "{error:?}"
    );
    assert!(error.message.contains("unknown tool"), "{error:?}");
}

/// Test 4: names, URIs and results as clients see them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naming_and_rewrites() {
    let config = format!("{SERVER_TOML}{}", stdio_demo_mount("shared", ""));
    let gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    let info = client.peer_info().expect("server info");
    let server = info.server_info.as_ref().expect("server_info");
    assert_eq!(server.name, "junction");

    // Lists carry only namespaced names, each upstream tool once.
    let tools = within("tools/list", client.list_all_tools()).await.unwrap();
    let names = tool_names(&client).await;
    assert!(
        names.iter().all(|name| name.starts_with("shared__")),
        "un-namespaced tool listed: {names:?}"
    );
    let mut unique = names.clone();
    unique.dedup();
    assert_eq!(unique, names, "a tool is listed twice");
    for tool in DEMO_TOOLS {
        let name = format!("shared__{tool}");
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let add = tools
        .iter()
        .find(|tool| tool.name == "shared__add")
        .unwrap();
    assert!(add.output_schema.is_some(), "output schema lost: {add:?}");

    let resources = within("resources/list", client.list_all_resources())
        .await
        .unwrap();
    let uris: Vec<_> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(uris, ["shared+demo://readme"]);
    let templates = within("templates/list", client.list_all_resource_templates())
        .await
        .unwrap();
    let templates: Vec<_> = templates.iter().map(|t| t.uri_template.as_str()).collect();
    assert_eq!(templates, ["shared+demo://notes/{key}"]);
    let prompts = within("prompts/list", client.list_all_prompts())
        .await
        .unwrap();
    let prompts: Vec<_> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(prompts, ["shared__greet"]);

    // URIs inside tool results are rewritten.
    call(
        &client,
        "shared__remember",
        json!({"key": "hello", "value": "hi there"}),
    )
    .await;
    let links = call(&client, "shared__links", Value::Null).await;
    assert_ne!(links.is_error, Some(true), "{links:?}");
    let link = links.content[0].as_resource_link().expect("resource_link");
    assert_eq!(link.uri, "shared+demo://readme");
    assert_eq!(link.name, "readme");
    let embedded = links.content[1].as_resource().expect("embedded resource");
    assert_eq!(content_uri(&embedded.resource), "shared+demo://notes/hello");
    assert_eq!(content_text(&embedded.resource), "hi there");

    // Reading by the rewritten URI, from the list and from the template.
    let readme = read(&client, "shared+demo://readme").await.unwrap();
    assert_eq!(readme.contents.len(), 1);
    assert_eq!(content_uri(&readme.contents[0]), "shared+demo://readme");
    assert!(content_text(&readme.contents[0]).contains("junction-demo"));
    let note = read(&client, "shared+demo://notes/hello").await.unwrap();
    assert_eq!(content_uri(&note.contents[0]), "shared+demo://notes/hello");
    assert_eq!(content_text(&note.contents[0]), "hi there");

    // Prompts: name routed, embedded resource rewritten.
    let mut args = JsonObject::new();
    args.insert("name".into(), "Ada".into());
    let prompt = within(
        "prompts/get",
        client.get_prompt(GetPromptRequestParams::new("shared__greet").with_arguments(args)),
    )
    .await
    .unwrap();
    assert_eq!(prompt.messages.len(), 2);
    assert_eq!(
        prompt.messages[0].content.as_text().expect("text").text,
        "Say hello to Ada."
    );
    let embedded = prompt.messages[1].content.as_resource().expect("resource");
    assert_eq!(content_uri(&embedded.resource), "shared+demo://readme");

    // Structured content and tool errors pass through unchanged.
    let sum = call(&client, "shared__add", json!({"a": 2, "b": 3})).await;
    assert_eq!(ok_text(&sum), "5");
    assert_eq!(sum.structured_content, Some(json!({"sum": 5})));
    let failed = call(&client, "shared__fail", Value::Null).await;
    assert_eq!(failed.is_error, Some(true));
    assert_eq!(text(&failed), "failed on purpose");
    let echo = call(&client, "shared__echo", json!({"message": "héllo ✓"})).await;
    assert_eq!(ok_text(&echo), "héllo ✓");

    // Upstream names are not callable directly.
    for tool in ["no_such_tool", "echo"] {
        let error = call_err(&client, tool, json!({"message": "x"})).await;
        assert_eq!(error.code.0, -32602, "{error:?}");
        assert!(error.message.contains(tool), "{error:?}");
    }
    // A namespaced name the upstream does not have: its error is relayed.
    let error = call_err(&client, "shared__nope", Value::Null).await;
    assert_eq!(error.code.0, -32602, "{error:?}");

    // Unknown resources are errors, whether or not a mount claims the prefix.
    for uri in ["nowhere://x", "demo://readme", "shared+demo://nope"] {
        let result = read(&client, uri).await;
        assert!(result.is_err(), "reading {uri} gave {result:?}");
    }
    let error = read(&client, "nowhere://x").await.unwrap_err();
    assert!(error.contains("nowhere://x"), "{error}");

    close(client).await;
}

/// Test 5: a mount whose command does not exist does not stop the gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_mount_is_reported_and_isolated() {
    let config = format!(
        "{SERVER_TOML}{}[mounts.broken]\ncommand = \"/nonexistent/junction-test-no-such-command\"\n",
        stdio_demo_mount("ok", ""),
    );
    let gateway = Gateway::start(&config).await;
    let readyz = gateway.wait_ready().await;
    assert_eq!(readyz["ready"], true, "{readyz}");
    let broken = readyz_mount(&readyz, "broken");
    // Its supervisor keeps retrying with backoff: degraded, later down.
    assert!(
        broken["state"] == "degraded" || broken["state"] == "down",
        "{readyz}"
    );
    assert_eq!(broken["transport"], "stdio", "{readyz}");
    let last_error = broken["last_error"].as_str().expect("last_error string");
    assert!(
        last_error.contains("junction-test-no-such-command"),
        "{last_error}"
    );
    let ok = readyz_mount(&readyz, "ok");
    assert_eq!(ok["state"], "ready", "{readyz}");
    assert!(ok["last_error"].is_null(), "{readyz}");

    let client = gateway.connect().await;
    let tools = within("tools/list", client.list_all_tools()).await.unwrap();
    assert!(!tools.is_empty());
    assert!(
        tools.iter().all(|tool| tool.name.starts_with("ok__")),
        "{tools:?}"
    );
    let echo = call(&client, "ok__echo", json!({"message": "fine"})).await;
    assert_eq!(ok_text(&echo), "fine");

    let result = call(&client, "broken__x", Value::Null).await;
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert!(text(&result).contains("broken"), "{result:?}");
    // The healthy mount is unaffected by the failed call.
    let echo = call(&client, "ok__echo", json!({"message": "after"})).await;
    assert_eq!(ok_text(&echo), "after");
    close(client).await;
}

/// Test 6: pass-through mounts (`namespace = ""`). Two demo servers offer
/// the same names; each appears once, and the mount listed first in the
/// file serves it. The first mount's names are chosen to sort last, so
/// "first" can only mean document order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_through_mounts_first_wins() {
    let demo = DemoHttp::start().await;
    let http_first = format!(
        "{SERVER_TOML}{}{}",
        http_mount("zeta", &demo.mcp_url(), "namespace = \"\""),
        stdio_demo_mount("alpha", "namespace = \"\""),
    );
    let stdio_first = format!(
        "{SERVER_TOML}{}{}",
        stdio_demo_mount("zeta", "namespace = \"\""),
        http_mount("alpha", &demo.mcp_url(), "namespace = \"\""),
    );
    let (first, second) = tokio::join!(Gateway::start(&http_first), Gateway::start(&stdio_first));
    // Both mounts run the same demo server, so both offer exactly these
    // (shared mounts list what a client with every capability sees).
    let direct = connect_with(&demo.mcp_url(), full_capabilities()).await;
    let upstream_tools = tool_names(&direct).await;
    close(direct).await;
    assert!(
        upstream_tools.iter().any(|t| t == "echo"),
        "{upstream_tools:?}"
    );

    for (gateway, http_wins) in [(&first, true), (&second, false)] {
        let client = gateway.connect().await;
        assert_eq!(tool_names(&client).await, upstream_tools);
        let resources = within("resources/list", client.list_all_resources())
            .await
            .unwrap();
        let uris: Vec<_> = resources.iter().map(|r| r.uri.as_str()).collect();
        assert_eq!(uris, ["demo://readme"]);

        let echo = call(&client, "echo", json!({"message": "plain"})).await;
        assert_eq!(ok_text(&echo), "plain");
        let pid = call_pid(&client, "pid").await;
        assert_eq!(
            pid == demo.proc.pid(),
            http_wins,
            "pid {pid}, http demo {}: wrong mount served `pid`",
            demo.proc.pid()
        );
        let links = call(&client, "links", Value::Null).await;
        let link = links.content[0].as_resource_link().expect("resource_link");
        assert_eq!(link.uri, "demo://readme", "pass-through must not rewrite");
        let readme = read(&client, "demo://readme").await.unwrap();
        assert_eq!(content_uri(&readme.contents[0]), "demo://readme");
        close(client).await;

        // The status counts what clients are listed of each mount: the
        // second one's names all went to the first.
        let status = status_json(gateway).await;
        let (zeta, alpha) = (&status["mounts"][0], &status["mounts"][1]);
        assert_eq!(zeta["tools"], upstream_tools.len(), "{status}");
        assert_eq!(zeta["tools_shadowed"], 0, "{status}");
        assert_eq!(zeta["resources"], 1, "{status}");
        assert_eq!(alpha["tools"], 0, "{status}");
        assert_eq!(alpha["tools_shadowed"], upstream_tools.len(), "{status}");
        assert_eq!(alpha["resources"], 0, "{status}");
        assert_eq!(alpha["prompts"], 0, "{status}");
    }
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
const TOOLS_LIST: &str = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// Test 7: the HTTP surface, with raw requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_http_surface() {
    let config = format!("{SERVER_TOML}{}", stdio_demo_mount("shared", ""));
    let gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let mcp = gateway.mcp_url();
    let post = |body: &'static str| {
        http.post(&mcp)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body)
    };

    let health = within("GET /healthz", http.get(gateway.url("/healthz")).send())
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    // Not JSON: 400 with a JSON-RPC parse error.
    let response = within("malformed POST", post("{not json").send())
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = within("body", response.json()).await.unwrap();
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert_eq!(body["error"]["code"], -32700, "{body}");

    // A real session, to compare the failures against.
    let response = within("initialize", post(INITIALIZE).send()).await.unwrap();
    assert_eq!(response.status(), 200);
    let session = response
        .headers()
        .get("mcp-session-id")
        .expect("initialize returns a session id")
        .to_str()
        .unwrap()
        .to_owned();
    drop(response);
    let with_session = |body: &'static str, id: &str| {
        post(body)
            .header("mcp-session-id", id)
            .header("mcp-protocol-version", "2025-06-18")
    };
    let response = within("initialized", with_session(INITIALIZED, &session).send())
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let response = within("tools/list", with_session(TOOLS_LIST, &session).send())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let listed = within("tools/list body", response.text()).await.unwrap();
    assert!(listed.contains("shared__echo"), "{listed}");

    // Unknown session id: 404.
    let response = within(
        "unknown session",
        with_session(TOOLS_LIST, "no-such-session").send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 404);

    // DELETE ends the session; its id is then unknown.
    let response = within(
        "DELETE",
        http.delete(&mcp).header("mcp-session-id", &session).send(),
    )
    .await
    .unwrap();
    assert_eq!(
        response.status(),
        204,
        "DELETE should answer 204 No Content"
    );
    let response = within("after DELETE", with_session(TOOLS_LIST, &session).send())
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    // So is deleting it again, or deleting a session that never was.
    for (what, id) in [
        ("DELETE again", session.as_str()),
        ("DELETE unknown", "no-such-session"),
    ] {
        let response = within(what, http.delete(&mcp).header("mcp-session-id", id).send())
            .await
            .unwrap();
        assert_eq!(response.status(), 404, "{what}");
    }

    // DNS-rebinding protection: a foreign Host is refused, localhost is not.
    let response = within(
        "foreign Host",
        post(INITIALIZE).header("host", "evil.example").send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 403);
    let local = format!("localhost:{}", gateway.addr.port());
    let response = within(
        "localhost Host",
        post(INITIALIZE).header("host", local).send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200);

    // A browser page from a foreign origin is refused; a local one is not,
    // and clients that send no Origin (SDKs, IDEs) are unaffected.
    for (origin, status) in [
        ("http://evil.example", 403),
        ("https://localhost:6274", 200),
        ("http://127.0.0.1:3000", 200),
    ] {
        let response = within(origin, post(INITIALIZE).header("origin", origin).send())
            .await
            .unwrap();
        assert_eq!(response.status(), status, "Origin {origin}");
        // A page may read what it is let in for (CORS), its session id
        // included.
        if status == 200 {
            let headers = response.headers();
            assert_eq!(headers["access-control-allow-origin"], origin);
            let exposed = headers["access-control-expose-headers"].to_str().unwrap();
            assert!(exposed.contains("mcp-session-id"), "{exposed}");
        }
    }
    // A browser asks first (a preflight): answered for an allowed origin,
    // refused for another. rmcp has no OPTIONS and answered 405.
    for (origin, status) in [("http://localhost:6274", 204), ("http://evil.example", 403)] {
        let preflight = http
            .request(reqwest::Method::OPTIONS, &mcp)
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "content-type, mcp-session-id",
            );
        let response = within("a preflight", preflight.send()).await.unwrap();
        assert_eq!(response.status(), status, "preflight from {origin}");
        if status == 204 {
            let headers = response.headers();
            assert_eq!(headers["access-control-allow-origin"], origin);
            let methods = headers["access-control-allow-methods"].to_str().unwrap();
            assert!(
                methods.contains("POST") && methods.contains("DELETE"),
                "{methods}"
            );
            assert_eq!(
                headers["access-control-allow-headers"],
                "content-type, mcp-session-id"
            );
        }
    }

    // Before anything else answers: a foreign Host or Origin gets 403 with
    // a malformed body (not 400), with an unknown session (not 404), and
    // on a DELETE.
    let foreign: [(&str, &str); 2] = [("host", "evil.example"), ("origin", "http://evil.example")];
    for (name, value) in foreign {
        let requests = [
            ("a malformed body", post("{not json").header(name, value)),
            (
                "an unknown session",
                post(TOOLS_LIST)
                    .header("mcp-session-id", "no-such-session")
                    .header(name, value),
            ),
            (
                "a DELETE",
                http.delete(&mcp)
                    .header("mcp-session-id", "no-such-session")
                    .header(name, value),
            ),
        ];
        for (what, request) in requests {
            let response = within(what, request.send()).await.unwrap();
            assert_eq!(response.status(), 403, "{what} from {name} {value}");
        }
    }
}

/// The operator pages on the gateway's listener get the MCP endpoint's
/// DNS-rebinding protection: they tell mount names, upstream hosts and
/// their errors to whoever can read them. The probes answer any Host
/// (Kubernetes calls them by the pod's address), `/readyz` without its
/// mounts to a foreign one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_pages_refuse_a_foreign_host() {
    let gateway = Gateway::start(&format!("{SERVER_TOML}{}", stdio_demo_mount("demo", ""))).await;
    let http = reqwest::Client::new();
    let local = format!("localhost:{}", gateway.addr.port());
    for path in ["/status", "/status.json", "/metrics"] {
        for (host, status) in [("evil.example", 403), (local.as_str(), 200)] {
            let response = within(
                path,
                http.get(gateway.url(path)).header("host", host).send(),
            )
            .await
            .unwrap();
            assert_eq!(response.status(), status, "{path} with Host {host}");
        }
    }
    for path in ["/healthz", "/readyz"] {
        let response = within(
            path,
            http.get(gateway.url(path))
                .header("host", "evil.example")
                .send(),
        )
        .await
        .unwrap();
        assert_eq!(response.status(), 200, "{path}");
    }
    // `/readyz` names the mounts (and their errors) to an allowed Host only.
    let readyz = |host: &str| {
        let request = http.get(gateway.url("/readyz")).header("host", host);
        async move {
            let body: Value = within("/readyz", request.send())
                .await
                .unwrap()
                .json()
                .await
                .expect("JSON");
            body
        }
    };
    let foreign = readyz("evil.example").await;
    assert_eq!(foreign, json!({"ready": true}));
    let local = readyz(&local).await;
    assert_eq!(local["mounts"][0]["name"], "demo", "{local}");
}

/// A list change announced by an upstream reaches the sessions it concerns:
/// a per-session upstream's change only its own session, a shared
/// upstream's change every session. (The demo's `toggle_bonus` lists or
/// hides its `bonus` tool and sends `tools/list_changed`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_reaches_the_right_sessions() {
    let config = format!(
        "{SERVER_TOML}{}{}",
        stdio_demo_mount("shared", "isolation = \"shared\""),
        stdio_demo_mount("private", "isolation = \"per_session\""),
    );
    let gateway = Gateway::start(&config).await;
    let (a, b) = tokio::join!(gateway.connect(), gateway.connect());
    let has = |names: &[String], name: &str| names.iter().any(|n| n == name);
    let before = tool_names(&a).await;
    assert!(!has(&before, "private__bonus") && !has(&before, "shared__bonus"));

    // A's own per-session upstream changes its lists: A is told and sees it.
    let toggled = call(&a, "private__toggle_bonus", Value::Null).await;
    assert_eq!(ok_text(&toggled), "bonus on");
    eventually("A to be told its lists changed", OP_TIMEOUT, || async {
        told_of_every_list_change(&a).then_some(())
    })
    .await;
    eventually(
        "A to see the bonus prompt and resource",
        OP_TIMEOUT,
        || async {
            has_bonus_prompt_and_resource(&a, "private")
                .await
                .then_some(())
        },
    )
    .await;
    eventually("A to list private__bonus", OP_TIMEOUT, || async {
        has(&tool_names(&a).await, "private__bonus").then_some(())
    })
    .await;
    assert_eq!(
        ok_text(&call(&a, "private__bonus", Value::Null).await),
        "bonus is here"
    );
    // B's per-session upstream did not change.
    assert!(!has(&tool_names(&b).await, "private__bonus"));
    assert!(!has_bonus_prompt_and_resource(&b, "private").await);
    let b_told = b.service();
    assert_eq!(
        (
            b_told.tool_list_changes(),
            b_told.prompt_list_changes(),
            b_told.resource_list_changes()
        ),
        (0, 0, 0),
        "B was told of A's change"
    );
    let not_enabled = call(&b, "private__bonus", Value::Null).await;
    assert_eq!(not_enabled.is_error, Some(true), "{not_enabled:?}");

    // The shared upstream changes its list: every session sees it.
    let toggled = call(&a, "shared__toggle_bonus", Value::Null).await;
    assert_eq!(ok_text(&toggled), "bonus on");
    eventually("B to be told the lists changed", OP_TIMEOUT, || async {
        told_of_every_list_change(&b).then_some(())
    })
    .await;
    eventually(
        "B to see the bonus prompt and resource",
        OP_TIMEOUT,
        || async {
            has_bonus_prompt_and_resource(&b, "shared")
                .await
                .then_some(())
        },
    )
    .await;
    for (client, who) in [(&a, "A"), (&b, "B")] {
        eventually(
            &format!("{who} to list shared__bonus"),
            OP_TIMEOUT,
            || async { has(&tool_names(client).await, "shared__bonus").then_some(()) },
        )
        .await;
    }
    assert_eq!(
        ok_text(&call(&b, "shared__bonus", Value::Null).await),
        "bonus is here"
    );
    // A still has its own private overlay; B still does not.
    assert!(has(&tool_names(&a).await, "private__bonus"));
    assert!(!has(&tool_names(&b).await, "private__bonus"));
    close(a).await;
    close(b).await;
}

fn told_of_every_list_change(client: &Client) -> bool {
    let told = client.service();
    told.tool_list_changes() > 0
        && told.prompt_list_changes() > 0
        && told.resource_list_changes() > 0
}

/// Whether `client` lists the demo's bonus prompt and resource under
/// `mount`, and can get and read them.
async fn has_bonus_prompt_and_resource(client: &Client, mount: &str) -> bool {
    let prompt = format!("{mount}__bonus");
    let uri = format!("{mount}+demo://bonus");
    let prompts = within("prompts/list", client.list_all_prompts())
        .await
        .expect("prompts/list");
    let resources = within("resources/list", client.list_all_resources())
        .await
        .expect("resources/list");
    if !prompts.iter().any(|p| p.name == prompt) || !resources.iter().any(|r| r.uri == uri) {
        return false;
    }
    let got = within(
        &format!("prompts/get {prompt}"),
        client.get_prompt(GetPromptRequestParams::new(prompt.clone())),
    )
    .await
    .expect("the bonus prompt");
    assert!(format!("{got:?}").contains("bonus is here"), "{got:?}");
    let contents = read(client, &uri).await.expect("the bonus resource");
    assert_eq!(content_text(&contents.contents[0]), "bonus is here");
    true
}

/// A per-session upstream is initialized with the capabilities its client
/// declared; a shared upstream with the gateway's own. (The demo's
/// `client_capabilities` returns what its client declared, as JSON.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_session_upstream_sees_client_capabilities() {
    let config = format!(
        "{SERVER_TOML}{}{}",
        stdio_demo_mount("shared", "isolation = \"shared\""),
        stdio_demo_mount("private", "isolation = \"per_session\""),
    );
    let gateway = Gateway::start(&config).await;
    let with_sampling: rmcp::model::ClientCapabilities =
        serde_json::from_value(json!({"sampling": {}})).unwrap();
    let url = gateway.mcp_url();
    let (plain, sampler) = tokio::join!(gateway.connect(), connect_with(&url, with_sampling));
    let declared = |client: &'static str, result: rmcp::model::CallToolResult| -> Value {
        let text = ok_text(&result);
        serde_json::from_str(text).unwrap_or_else(|e| panic!("{client}: {text:?}: {e}"))
    };
    let plain_private = declared(
        "plain",
        call(&plain, "private__client_capabilities", Value::Null).await,
    );
    let sampler_private = declared(
        "sampler",
        call(&sampler, "private__client_capabilities", Value::Null).await,
    );
    assert!(plain_private.get("sampling").is_none(), "{plain_private}");
    assert!(
        sampler_private.get("sampling").is_some(),
        "{sampler_private}"
    );

    // The shared upstream sees one declaration, the gateway's, for everyone.
    let plain_shared = declared(
        "plain",
        call(&plain, "shared__client_capabilities", Value::Null).await,
    );
    let sampler_shared = declared(
        "sampler",
        call(&sampler, "shared__client_capabilities", Value::Null).await,
    );
    assert_eq!(plain_shared, sampler_shared);
    assert!(plain_shared.get("sampling").is_some(), "{plain_shared}");
    close(plain).await;
    close(sampler).await;
}

/// The JSON-RPC message with `id` in a POST response, which rmcp sends
/// either as plain JSON or as one SSE event.
fn rpc_response(body: &str, id: u64) -> Value {
    let candidates = std::iter::once(body.trim()).chain(
        body.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim),
    );
    candidates
        .filter_map(|text| serde_json::from_str::<Value>(text).ok())
        .find(|message| message["id"] == id)
        .unwrap_or_else(|| panic!("no response with id {id} in {body:?}"))
}

/// A client that disappears without DELETE: after `session_idle_timeout`
/// the gateway ends its session, and with it the per-session child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_session_is_ended_with_its_child() {
    assert_idle_session_ends_with_its_child("").await;
}

/// The same when sessions sleep sooner than they time out: the session
/// cannot sleep (its per-session child is open), and each refused attempt
/// must not count as use (it did, so such a session lived for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_session_that_cannot_sleep_is_ended_with_its_child() {
    assert_idle_session_ends_with_its_child("session_hibernate_after = \"200ms\"\n").await;
}

async fn assert_idle_session_ends_with_its_child(server_extra: &str) {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nsession_idle_timeout = \"1s\"\n{server_extra}\n{}",
        stdio_demo_mount("private", "isolation = \"per_session\""),
    );
    let gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let mcp = gateway.mcp_url();
    let post = |body: &'static str, session: Option<&str>| {
        let mut request = http
            .post(&mcp)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-06-18");
        }
        request
    };
    let response = within("initialize", post(INITIALIZE, None).send())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    drop(response);
    let response = within("initialized", post(INITIALIZED, Some(&session)).send())
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let call_pid = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"private__pid","arguments":{}}}"#;
    let response = within("tools/call", post(call_pid, Some(&session)).send())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = within("tools/call body", response.text()).await.unwrap();
    let message = rpc_response(&body, 3);
    let pid: u32 = message["result"]["content"][0]["text"]
        .as_str()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {message}"));
    assert!(process_alive(pid));

    // No DELETE, no more traffic: the idle timeout must clean up.
    eventually(
        "the idle session's child to exit",
        CHILD_EXIT_TIMEOUT,
        || async { (!process_alive(pid)).then_some(()) },
    )
    .await;
    let response = within("after idle", post(TOOLS_LIST, Some(&session)).send())
        .await
        .unwrap();
    assert_eq!(response.status(), 404, "the idle session still answers");
}

/// A stdio upstream's own children (as `npx` starts the real server) end
/// with it: the whole process group is killed when its session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_children_end_with_its_session() {
    let dir = tempfile::tempdir().expect("temp dir");
    let marker = dir.path().join("grandchild.pid");
    let config = format!(
        "{SERVER_TOML}{}",
        wrapped_demo_mount("wrapped", &marker, "isolation = \"per_session\"")
    );
    let gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    let echoed = call(&client, "wrapped__echo", json!({"message": "up"})).await;
    assert_eq!(ok_text(&echoed), "up");
    // The discovery session and this session's upstream each wrote the
    // marker; the last write is this session's grandchild.
    let grandchild = straggler_pid(&marker).await;
    let _reaper = KillOnDrop(grandchild);
    assert!(
        process_alive(grandchild),
        "sleep {grandchild} should be running"
    );
    close(client).await;
    eventually(
        "the grandchild to be killed",
        Duration::from_secs(10),
        || async { (!process_alive(grandchild)).then_some(()) },
    )
    .await;
}

/// The instructions a client gets say how each mount's names are formed and
/// carry each upstream's own instructions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instructions_describe_every_mount() {
    let config = format!(
        "{SERVER_TOML}{}{}",
        stdio_demo_mount("shared", ""),
        stdio_demo_mount("raw", "namespace = \"\""),
    );
    let gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    let info = client.peer().peer_info().expect("server info");
    let instructions = info.instructions.clone().unwrap_or_default();
    for needle in [
        "- shared (tools and prompts shared__<name>, resources shared+<uri>): Demo server:",
        "- raw (names unchanged): Demo server:",
    ] {
        assert!(
            instructions.contains(needle),
            "{needle:?} in {instructions}"
        );
    }
    close(client).await;
}

/// A per-session Streamable HTTP upstream session ends with its client
/// session: the upstream server sees its DELETE (it has one session fewer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_session_http_upstream_gets_its_delete() {
    let demo = DemoHttp::start().await;
    let config = format!(
        "{SERVER_TOML}{}",
        http_mount("hprivate", &demo.mcp_url(), "isolation = \"per_session\""),
    );
    let gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    let echoed = call(&client, "hprivate__echo", json!({"message": "up"})).await;
    assert_eq!(ok_text(&echoed), "up");
    let direct = connect(&demo.mcp_url()).await;
    let open = |text: &str| -> usize { text.parse().expect("a session count") };
    let before = open(ok_text(&call(&direct, "sessions", Value::Null).await));
    close(client).await;
    eventually(
        "the upstream session to be deleted",
        Duration::from_secs(10),
        || async {
            let now = open(ok_text(&call(&direct, "sessions", Value::Null).await));
            (now == before - 1).then_some(())
        },
    )
    .await;
    close(direct).await;
}

/// A gateway over the stdio demo server (mount `demo`), an HTTP client,
/// the MCP endpoint's URL and a raw session initialized on it.
async fn demo_with_raw_session() -> (Gateway, reqwest::Client, String, String) {
    let config = format!("{SERVER_TOML}{}", stdio_demo_mount("demo", ""));
    let gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let mcp = gateway.mcp_url();
    let session = raw::open_session(&http, &mcp).await;
    (gateway, http, mcp, session)
}

/// A quick answer goes out whole, with a `Content-Length` (one write, one
/// read), and the SSE events in it are the usual ones; a slow request's
/// stream still starts before its answer, with the priming event the
/// client can resume from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quick_answers_come_whole_and_slow_ones_stream() {
    let (_gateway, http, mcp, session) = demo_with_raw_session().await;

    let answer = raw::post(
        &http,
        &mcp,
        Some(&session),
        raw::JSON_POST,
        raw::echo_request("1", "whole"),
    )
    .await;
    assert_eq!(answer.body["result"]["content"][0]["text"], "whole");
    assert!(
        answer.headers.get("content-length").is_some(),
        "a quick answer has its length: {answer:?}"
    );

    let slow = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "demo__slow", "arguments": {"steps": 1, "delay_ms": 2000}},
    });
    let mut request = http.post(&mcp).body(slow.to_string());
    for (name, value) in raw::JSON_POST {
        request = request.header(*name, *value);
    }
    let mut response = within(
        "a slow call's head",
        request
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", raw::VERSION)
            .send(),
    )
    .await
    .unwrap();
    assert!(response.headers().get("content-length").is_none());
    let first = within("the priming event", response.chunk())
        .await
        .unwrap()
        .expect("a first event");
    let first = String::from_utf8_lossy(&first).into_owned();
    assert!(first.contains("\nid: "), "a priming event: {first:?}");
    assert!(
        !first.contains("result"),
        "the answer is not due yet: {first:?}"
    );
    let mut rest = String::new();
    while let Some(chunk) = within("the answer", response.chunk()).await.unwrap() {
        rest.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert_eq!(raw::sse_response(&rest)["id"], 2, "{rest:?}");
}

/// Priming events (an id and no data, SEP-1699) only for 2025-11-25
/// clients: the Python and TypeScript SDKs of earlier versions parse every
/// event's data as a message and report an error for each. Asserted on the
/// bytes of a slow call's stream and of the session's GET stream, for a
/// session opened at each version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_2025_11_25_clients_get_priming_events() {
    let config = format!("{SERVER_TOML}{}", stdio_demo_mount("demo", ""));
    let gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let mcp = gateway.mcp_url();
    for (version, header, primed) in [
        ("2025-11-25", Some("2025-11-25"), true),
        ("2025-06-18", Some("2025-06-18"), false),
        ("2025-03-26", None, false),
    ] {
        let initialize = raw::INITIALIZE.replace("2025-11-25", version);
        let session = raw::open_session_with(&http, &mcp, &initialize).await;
        let slow = json!({
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "demo__slow", "arguments": {"steps": 1, "delay_ms": 100}},
        });
        let mut post = http
            .post(&mcp)
            .body(slow.to_string())
            .header("mcp-session-id", &session);
        let mut get = http
            .get(&mcp)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session);
        for (name, value) in raw::JSON_POST {
            post = post.header(*name, *value);
        }
        if let Some(header) = header {
            post = post.header("mcp-protocol-version", header);
            get = get.header("mcp-protocol-version", header);
        }
        let answer = within("the slow call", post.send()).await.unwrap();
        let text = within("its stream", answer.text()).await.unwrap();
        assert_eq!(raw::sse_response(&text)["id"], 2, "{version}: {text:?}");
        let has_priming = |text: &str| {
            text.replace("\r\n", "\n").split("\n\n").any(|event| {
                !event.trim().is_empty()
                    && !event.lines().any(|line| {
                        line.strip_prefix("data:")
                            .is_some_and(|data| !data.trim().is_empty())
                    })
            })
        };
        assert_eq!(has_priming(&text), primed, "{version}: {text:?}");
        let mut stream = within("the GET stream", get.send()).await.unwrap();
        // A priming event is waited for as long as any answer; its absence
        // is taken after 500 ms (a loaded machine can only hide one that
        // should not be there, not fake it).
        let first = match primed {
            true => Ok(within("the GET stream's first event", stream.chunk()).await),
            false => tokio::time::timeout(Duration::from_millis(500), stream.chunk()).await,
        };
        let first = match first {
            Ok(chunk) => String::from_utf8_lossy(&chunk.unwrap().unwrap_or_default()).into_owned(),
            Err(_) => String::new(),
        };
        assert_eq!(has_priming(&first), primed, "{version} GET: {first:?}");
        drop(stream);
        raw::delete_session(&http, &mcp, &session).await;
    }
}

/// A 2024-11-05 upstream is asked for completions though it declares no
/// `completions` capability (that version had none); a later one that
/// declares none is not asked, and its mount offers no suggestions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_is_asked_of_servers_older_than_its_capability() {
    let mounts: String = [
        ("old", "2024-11-05"),
        ("new", "2025-06-18"),
        ("none", "2024-11-05\", \"missing-once"),
    ]
    .iter()
    .map(|(name, arguments)| {
        python_fixture_mount(name, "completion_without_capability.py", "")
            .replace("\"]\n", &format!("\", \"{arguments}\"]\n"))
    })
    .collect();
    let gateway = Gateway::start(&format!("{SERVER_TOML}{mounts}")).await;
    let client = gateway.connect().await;
    let complete = |prompt: &str| {
        let params = rmcp::model::CompleteRequestParams::new(
            rmcp::model::Reference::for_prompt(prompt),
            rmcp::model::ArgumentInfo::new("name", "al"),
        );
        client.complete(params)
    };
    let old = within("completion of old__greet", complete("old__greet"))
        .await
        .expect("an answer");
    assert_eq!(old.completion.values, ["alice", "albert"]);
    let new = within("completion of new__greet", complete("new__greet"))
        .await
        .expect("an answer");
    assert!(new.completion.values.is_empty(), "{new:?}");
    // One that says it has no completion is not asked again (clients ask
    // on every keystroke).
    for attempt in 0..2 {
        let none = within("completion of none__greet", complete("none__greet"))
            .await
            .expect("an answer");
        assert!(none.completion.values.is_empty(), "{attempt}: {none:?}");
    }
    close(client).await;
}

/// `prompts/get`, `resources/read` and `completion/complete` are answered
/// before rmcp's handler too, like `tools/call` (`downstream/quick_call.rs`):
/// plain JSON, the request's own id, names and URIs qualified as usual. An
/// unknown name is still a JSON-RPC error, on the same path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routed_requests_are_answered_on_the_quick_path() {
    let (_gateway, http, mcp, session) = demo_with_raw_session().await;
    raw::wait_until_calls_are_quick(&http, &mcp, &session, "demo__echo").await;
    let post = |method: &'static str, params: Value| {
        let request = json!({"jsonrpc": "2.0", "id": method, "method": method, "params": params});
        raw::post(
            &http,
            &mcp,
            Some(&session),
            raw::JSON_POST,
            request.to_string(),
        )
    };
    let quick = |method: &str, answer: &raw::Answer| {
        assert_eq!(
            answer.headers["content-type"], "application/json",
            "{method}: {answer:?}"
        );
        assert_eq!(answer.body["id"], method, "{answer:?}");
    };

    let prompt = post(
        "prompts/get",
        json!({"name": "demo__greet", "arguments": {"name": "Ada"}}),
    )
    .await;
    quick("prompts/get", &prompt);
    let messages = &prompt.body["result"]["messages"];
    assert_eq!(
        messages[0]["content"]["text"], "Say hello to Ada.",
        "{prompt:?}"
    );
    assert_eq!(
        messages[1]["content"]["resource"]["uri"], "demo+demo://readme",
        "an embedded resource's URI is qualified: {prompt:?}"
    );

    let read = post("resources/read", json!({"uri": "demo+demo://readme"})).await;
    quick("resources/read", &read);
    assert_eq!(
        read.body["result"]["contents"][0]["uri"], "demo+demo://readme",
        "{read:?}"
    );

    let completion = post(
        "completion/complete",
        json!({"ref": {"type": "ref/prompt", "name": "demo__greet"},
               "argument": {"name": "name", "value": "A"}}),
    )
    .await;
    quick("completion/complete", &completion);
    assert!(
        completion.body["result"]["completion"]["values"].is_array(),
        "{completion:?}"
    );

    let unknown = post("prompts/get", json!({"name": "demo__nope"})).await;
    quick("prompts/get", &unknown);
    assert_eq!(unknown.body["error"]["code"], -32602, "{unknown:?}");
}

/// A cursor-less `tools/list` is answered from the catalog's page
/// serialized once (`downstream/prebuilt.rs`): plain JSON, the request's
/// own id, and a new page as soon as the catalog changes. A cursor still
/// goes the usual way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_is_answered_from_the_prebuilt_page() {
    let (_gateway, http, mcp, session) = demo_with_raw_session().await;
    let list = |id: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params}).to_string()
    };
    let names = |answer: &raw::Answer| -> Vec<String> {
        answer.body["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no tools: {answer:?}"))
            .iter()
            .map(|tool| tool["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    };

    // The session is known to the prebuilt path once rmcp has handled its
    // `notifications/initialized`, which it does on its own task after
    // answering 202: a list sent at once may still go through rmcp.
    let answer = eventually("a prebuilt answer", Duration::from_secs(10), || {
        let (http, mcp, session, request) = (
            http.clone(),
            mcp.clone(),
            session.clone(),
            list("l-1", json!({})),
        );
        async move {
            let answer = raw::post(&http, &mcp, Some(&session), raw::JSON_POST, request).await;
            (answer.headers["content-type"] == "application/json").then_some(answer)
        }
    })
    .await;
    assert_eq!(answer.body["jsonrpc"], "2.0");
    assert_eq!(answer.body["id"], "l-1");
    assert!(
        names(&answer).contains(&"demo__echo".to_owned()),
        "{answer:?}"
    );
    // As rmcp sends every other page to a 2025-11-25 client: `resultType`
    // is 2026-07-28's.
    assert!(
        answer.body["result"].get("resultType").is_none(),
        "{answer:?}"
    );
    assert!(
        !names(&answer).contains(&"demo__bonus".to_owned()),
        "{answer:?}"
    );

    let cursor = json!({"cursor": "bogus"});
    let answer = raw::post(
        &http,
        &mcp,
        Some(&session),
        raw::JSON_POST,
        list("l-2", cursor),
    )
    .await;
    assert_eq!(answer.body["id"], "l-2");
    assert_eq!(answer.body["error"]["code"], -32602, "{answer:?}");

    let toggle = json!({
        "jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "demo__toggle_bonus", "arguments": {}},
    });
    raw::post(
        &http,
        &mcp,
        Some(&session),
        raw::JSON_POST,
        toggle.to_string(),
    )
    .await;
    eventually("the new tool in the list", Duration::from_secs(10), || {
        let (http, mcp, session) = (http.clone(), mcp.clone(), session.clone());
        async move {
            let answer = raw::post(
                &http,
                &mcp,
                Some(&session),
                raw::JSON_POST,
                list("l-3", json!(null)),
            )
            .await;
            names(&answer)
                .contains(&"demo__bonus".to_owned())
                .then_some(())
        }
    })
    .await;
}

/// POSTs `body` on `session` and gives the response back as it comes.
async fn post_streaming(
    http: &reqwest::Client,
    mcp: &str,
    session: &str,
    body: String,
) -> reqwest::Response {
    let mut request = http.post(mcp).body(body);
    for (name, value) in raw::JSON_POST {
        request = request.header(*name, *value);
    }
    within(
        "a POST's head",
        request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", raw::VERSION)
            .send(),
    )
    .await
    .unwrap_or_else(|error| panic!("POST failed: {error}"))
}

/// A POST's answer that must be an SSE stream, read a message at a time.
struct EventStream {
    response: reqwest::Response,
    buffer: String,
}

impl EventStream {
    /// POSTs `body` on `session`; the answer must be `text/event-stream`.
    async fn open(http: &reqwest::Client, mcp: &str, session: &str, body: String) -> Self {
        let response = post_streaming(http, mcp, session, body).await;
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream",
            "{response:?}"
        );
        EventStream {
            response,
            buffer: String::new(),
        }
    }

    /// The next JSON-RPC message; priming events are skipped.
    async fn next(&mut self) -> Value {
        loop {
            while let Some(at) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..at + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                let data = data.join("\n");
                if !data.trim().is_empty() {
                    return serde_json::from_str(&data)
                        .unwrap_or_else(|error| panic!("SSE data is not JSON {data:?}: {error}"));
                }
            }
            let chunk = within("the next event", self.response.chunk())
                .await
                .unwrap_or_else(|error| panic!("reading the stream: {error}"))
                .unwrap_or_else(|| panic!("the stream ended with {:?} unread", self.buffer));
            self.buffer
                .push_str(&String::from_utf8_lossy(&chunk).replace('\r', ""));
        }
    }
}

/// A call whose upstream asks the client's model while it is a quick call
/// is handed to rmcp first: the sampling request rides the call's own
/// stream, the client's answer reaches the upstream, and the call's
/// result follows on the same stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_call_is_handed_over_when_its_upstream_asks_the_client() {
    let config = format!("{SERVER_TOML}{}", stdio_demo_mount("demo", ""));
    let gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let mcp = gateway.mcp_url();
    let initialize =
        raw::INITIALIZE.replace(r#""capabilities":{}"#, r#""capabilities":{"sampling":{}}"#);
    let answer = raw::post(&http, &mcp, None, raw::JSON_POST, initialize).await;
    let session = answer.session_id().expect("a session id");
    let initialized = raw::post(
        &http,
        &mcp,
        Some(&session),
        raw::JSON_POST,
        raw::INITIALIZED,
    );
    assert_eq!(initialized.await.status, reqwest::StatusCode::ACCEPTED);
    raw::wait_until_calls_are_quick(&http, &mcp, &session, "demo__echo").await;

    let call = json!({
        "jsonrpc": "2.0", "id": "ask", "method": "tools/call",
        "params": {"name": "demo__ask_model", "arguments": {"prompt": "hello"}},
    });
    let mut stream = EventStream::open(&http, &mcp, &session, call.to_string()).await;
    let request = stream.next().await;
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    let reply = json!({
        "jsonrpc": "2.0", "id": request["id"],
        "result": {
            "role": "assistant", "model": "test-model",
            "content": {"type": "text", "text": "hi there"},
        },
    });
    let posted = raw::post(
        &http,
        &mcp,
        Some(&session),
        raw::JSON_POST,
        reply.to_string(),
    )
    .await;
    assert_eq!(posted.status, reqwest::StatusCode::ACCEPTED, "{posted:?}");
    let result = stream.next().await;
    assert_eq!(result["id"], "ask", "{result}");
    assert_eq!(
        result["result"]["content"][0]["text"], "test-model said: hi there",
        "{result}"
    );
}

/// A client's cancel that arrives while its call is still a quick call
/// reaches the upstream: the call is handed to rmcp first, so the cancel
/// names a request rmcp knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_the_upstream_while_the_call_is_quick() {
    let (_gateway, http, mcp, session) = demo_with_raw_session().await;
    raw::wait_until_calls_are_quick(&http, &mcp, &session, "demo__echo").await;
    let cancellations = || async {
        let request = raw::echo_request("\"n\"", "").replace("demo__echo", "demo__cancellations");
        let answer = raw::post(&http, &mcp, Some(&session), raw::JSON_POST, request).await;
        answer.body["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(cancellations().await, "0");
    // The cancel must come after the gateway took the call (well within
    // the quick path's 20 ms), which a client cannot see: a cancel that
    // came first named no request and is tried again with a new call.
    for attempt in 1..=3u64 {
        let id = format!("slow-{attempt}");
        let call = json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "demo__slow", "arguments": {"steps": 100, "delay_ms": 50}},
        });
        let calling = tokio::spawn({
            let (http, mcp, session) = (http.clone(), mcp.clone(), session.clone());
            async move { post_streaming(&http, &mcp, &session, call.to_string()).await }
        });
        tokio::time::sleep(Duration::from_millis(5 * attempt)).await;
        post_cancel(&http, &mcp, &session, &id).await;
        for _ in 0..30 {
            if cancellations().await == "1" {
                calling.abort();
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        calling.abort();
        eprintln!("attempt {attempt}: the cancel came before the call");
    }
    panic!("no cancel reached the upstream in 3 attempts");
}

/// Progress an upstream sends before a quick answer hands the call to rmcp
/// first: every notification rides the call's own stream, with the
/// client's token, ahead of the answer (this client opens no `GET`
/// stream, so nothing sent anywhere else would reach it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_before_a_quick_answer_rides_the_calls_stream() {
    let (_gateway, http, mcp, session) = demo_with_raw_session().await;
    raw::wait_until_calls_are_quick(&http, &mcp, &session, "demo__echo").await;
    let call = json!({
        "jsonrpc": "2.0", "id": "fast", "method": "tools/call",
        "params": {
            "name": "demo__slow",
            "arguments": {"steps": 3, "delay_ms": 1},
            "_meta": {"progressToken": "mine"},
        },
    });
    let mut stream = EventStream::open(&http, &mcp, &session, call.to_string()).await;
    for step in 1..=3 {
        let progress = stream.next().await;
        assert_eq!(progress["method"], "notifications/progress", "{progress}");
        assert_eq!(progress["params"]["progressToken"], "mine", "{progress}");
        assert_eq!(
            progress["params"]["progress"].as_f64(),
            Some(f64::from(step)),
            "{progress}"
        );
    }
    let answer = stream.next().await;
    assert_eq!(answer["id"], "fast", "{answer}");
    assert_eq!(
        answer["result"]["content"][0]["text"], "done after 3 steps",
        "{answer}"
    );
}

/// `prompts/list`, `resources/list` and `resources/templates/list` are
/// answered from their prebuilt pages too: plain JSON, the request's own
/// id, the mount's namespaced names; a cursor still goes the usual way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_list_is_answered_from_its_prebuilt_page() {
    let (_gateway, http, mcp, session) = demo_with_raw_session().await;
    // Known to the prebuilt path once rmcp has handled `initialized`.
    raw::wait_until_calls_are_quick(&http, &mcp, &session, "demo__echo").await;
    let lists = [
        ("prompts/list", "prompts", "name", "demo__"),
        ("resources/list", "resources", "uri", "demo+"),
        (
            "resources/templates/list",
            "resourceTemplates",
            "uriTemplate",
            "demo+",
        ),
    ];
    for (method, field, key, prefix) in lists {
        let request = json!({"jsonrpc": "2.0", "id": method, "method": method});
        let answer = raw::post(
            &http,
            &mcp,
            Some(&session),
            raw::JSON_POST,
            request.to_string(),
        )
        .await;
        assert_eq!(
            answer.headers["content-type"], "application/json",
            "{method}: {answer:?}"
        );
        assert_eq!(answer.body["id"], method, "{answer:?}");
        let items = answer.body["result"][field]
            .as_array()
            .unwrap_or_else(|| panic!("{method}: no {field}: {answer:?}"));
        assert!(!items.is_empty(), "{method}: {answer:?}");
        for item in items {
            let name = item[key].as_str().unwrap_or_default();
            assert!(name.starts_with(prefix), "{method}: {name:?} in {answer:?}");
        }

        let request = json!({
            "jsonrpc": "2.0", "id": 2, "method": method, "params": {"cursor": "bogus"},
        });
        let answer = raw::post(
            &http,
            &mcp,
            Some(&session),
            raw::JSON_POST,
            request.to_string(),
        )
        .await;
        assert_eq!(answer.body["error"]["code"], -32602, "{method}: {answer:?}");
    }
}

/// Names of the gateway's threads that serve the MCP endpoint.
fn lane_threads(pid: u32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the gateway's threads");
    let mut lanes: Vec<String> = tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| name.starts_with("junction-lane-"))
        .collect();
    lanes.sort();
    lanes
}

/// The endpoint is served by `TOKIO_WORKER_THREADS` lanes; sessions spread
/// over them keep per-session upstreams of their own, and a shared one is
/// reached from every lane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_is_served_by_as_many_lanes_as_asked() {
    let config = format!(
        "{SERVER_TOML}{}{}",
        stdio_demo_mount("shared", "isolation = \"shared\""),
        stdio_demo_mount("private", "isolation = \"per_session\""),
    );
    let gateway = Gateway::launch(&config, "toml", &[("TOKIO_WORKER_THREADS", "3")]).await;
    gateway.wait_ready().await;
    assert_eq!(
        lane_threads(gateway.proc.pid()),
        ["junction-lane-0", "junction-lane-1", "junction-lane-2"]
    );
    // Each client session has a connection of its own, handed to the lane
    // with the fewest open (`lane_dispatch`'s unit tests check the spread).
    let (a, b, c) = tokio::join!(gateway.connect(), gateway.connect(), gateway.connect());
    let private = tokio::join!(
        call_pid(&a, "private__pid"),
        call_pid(&b, "private__pid"),
        call_pid(&c, "private__pid"),
    );
    let shared = tokio::join!(
        call_pid(&a, "shared__pid"),
        call_pid(&b, "shared__pid"),
        call_pid(&c, "shared__pid"),
    );
    let mut children = vec![private.0, private.1, private.2];
    children.sort_unstable();
    children.dedup();
    assert_eq!(children.len(), 3, "per-session children {private:?}");
    assert!(shared.0 == shared.1 && shared.1 == shared.2, "{shared:?}");
    for client in [a, b, c] {
        close(client).await;
    }
}

/// A session's own lists (announced by its per-session upstream) last as
/// long as that upstream: once its process died and a new one serves the
/// session, or a reload replaced the mount, the session sees the lists
/// every session sees again (the new process starts with its bonus off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_own_lists_end_with_the_upstream_that_announced_them() {
    let config = format!(
        "{SERVER_TOML}{}",
        stdio_demo_mount("private", "isolation = \"per_session\"")
    );
    let gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    // Its process dies; the next call opens a new one.
    private_bonus_on(&client).await;
    let told_before = client.service().tool_list_changes();
    let first = call_pid(&client, "private__pid").await;
    kill(first);
    eventually("a new per-session upstream", OP_TIMEOUT, || async {
        let params = rmcp::model::CallToolRequestParams::new("private__pid");
        let result = client.call_tool(params).await.ok()?;
        (text(&result).parse::<u32>().ok()? != first).then_some(())
    })
    .await;
    assert!(
        !lists_private_bonus(&client).await,
        "the dead upstream's lists"
    );
    eventually("the session to be told", OP_TIMEOUT, || async {
        (client.service().tool_list_changes() > told_before).then_some(())
    })
    .await;

    // A reload replaces the mount; no call needed to see it.
    private_bonus_on(&client).await;
    let changed = format!(
        "{SERVER_TOML}{}",
        stdio_demo_mount(
            "private",
            "isolation = \"per_session\"\nenv = { MARK = \"2\" }"
        )
    );
    rewrite_config(&gateway.config_path, &changed);
    hang_up(&gateway);
    eventually("the replaced mount's lists", OP_TIMEOUT, || async {
        (!lists_private_bonus(&client).await).then_some(())
    })
    .await;
    close(client).await;
}

async fn lists_private_bonus(client: &Client) -> bool {
    tool_names(client)
        .await
        .iter()
        .any(|name| name == "private__bonus")
}

/// Turns the per-session demo's bonus on and waits until it is listed.
async fn private_bonus_on(client: &Client) {
    let toggled = call(client, "private__toggle_bonus", Value::Null).await;
    assert_eq!(ok_text(&toggled), "bonus on");
    eventually("the session to list private__bonus", OP_TIMEOUT, || async {
        lists_private_bonus(client).await.then_some(())
    })
    .await;
}

/// A per-session demo mount `name` whose processes after the first (the
/// full-profile discovery at start, which runs at once) are held: each
/// marks `waiting`, then waits until the gate is opened (at most 30 s).
struct GatedMount {
    _dir: tempfile::TempDir,
    config: String,
    waiting: std::path::PathBuf,
    gate: std::path::PathBuf,
}

impl GatedMount {
    fn new(name: &str) -> GatedMount {
        let dir = tempfile::tempdir().expect("temp dir");
        let (started, waiting, gate) = (
            dir.path().join("started"),
            dir.path().join("waiting"),
            dir.path().join("gate"),
        );
        let script = format!(
            "if [ -e {started:?} ]; then touch {waiting:?}; i=0; while [ ! -e {gate:?} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; fi; touch {started:?}; exec {BIN} demo-server"
        );
        let config = format!(
            "[mounts.{name}]\ncommand = \"sh\"\nargs = [\"-c\", {script:?}]\nisolation = \"per_session\"\n\n"
        );
        GatedMount {
            _dir: dir,
            config,
            waiting,
            gate,
        }
    }

    /// Waits until one of its processes is held at the gate.
    async fn wait_until_held(&self) {
        eventually(
            "a process of the gated mount to be held",
            OP_TIMEOUT,
            || async { self.waiting.exists().then_some(()) },
        )
        .await;
    }

    fn open(&self) {
        std::fs::write(&self.gate, "").expect("open the gate");
    }
}

/// POSTs `notifications/cancelled` for request `id` on `session`.
async fn post_cancel(http: &reqwest::Client, mcp: &str, session: &str, id: &str) {
    let cancel = json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": "changed my mind"},
    });
    let posted = raw::post(http, mcp, Some(session), raw::JSON_POST, cancel.to_string()).await;
    assert_eq!(posted.status, reqwest::StatusCode::ACCEPTED, "{posted:?}");
}

/// A call cancelled while its per-session upstream is still starting is
/// never sent: its effects (here, the demo's counter) do not happen once
/// the upstream is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_before_its_upstream_opened_is_not_sent() {
    let gated = GatedMount::new("late");
    let gateway = Gateway::start(&format!("{SERVER_TOML}{}", gated.config)).await;
    let http = reqwest::Client::new();
    let mcp = gateway.mcp_url();
    let session = raw::open_session(&http, &mcp).await;
    let counter = |id: &str| {
        json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "late__counter", "arguments": {}},
        })
        .to_string()
    };
    // The first call opens this session's upstream, which is held; it is
    // cancelled meanwhile, and then the upstream is let start.
    let calling = tokio::spawn({
        let (http, mcp, session, call) =
            (http.clone(), mcp.clone(), session.clone(), counter("first"));
        async move { post_streaming(&http, &mcp, &session, call).await }
    });
    gated.wait_until_held().await;
    post_cancel(&http, &mcp, &session, "first").await;
    gated.open();
    // Once the upstream is up, two calls are its process's first two (the
    // first of them may race the cancelled one, had it been sent; the
    // second comes after both).
    let second = raw::post(
        &http,
        &mcp,
        Some(&session),
        raw::JSON_POST,
        counter("second"),
    )
    .await;
    assert!(second.body["result"].is_object(), "{second:?}");
    let third = raw::post(
        &http,
        &mcp,
        Some(&session),
        raw::JSON_POST,
        counter("third"),
    )
    .await;
    calling.abort();
    assert_eq!(
        third.body["result"]["content"][0]["text"], "2",
        "the cancelled call ran upstream: {third:?}"
    );
}

/// A call to a name already listed does not wait for a per-session
/// mount's discovery for the client's profile (up to 10 s): here a list
/// call has started that discovery, which is held, while a client without
/// capabilities calls another mount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_does_not_wait_for_another_mounts_profile_discovery() {
    let gated = GatedMount::new("gated");
    let config = format!(
        "{SERVER_TOML}{}{}",
        stdio_demo_mount("demo", ""),
        gated.config
    );
    let gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let mcp = gateway.mcp_url();
    // A client with no capabilities: a profile the gated mount has not
    // been discovered for. Its list call starts that discovery (and waits
    // for it, as a list must).
    let session = raw::open_session(&http, &mcp).await;
    let listing = tokio::spawn({
        let (http, mcp, session) = (http.clone(), mcp.clone(), session.clone());
        let list = json!({"jsonrpc": "2.0", "id": "list", "method": "tools/list"}).to_string();
        async move { raw::post(&http, &mcp, Some(&session), raw::JSON_POST, list).await }
    });
    gated.wait_until_held().await;
    // The bug made this wait out the discovery's 10 s.
    let echo = raw::echo_request("1", "not held");
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        raw::post(&http, &mcp, Some(&session), raw::JSON_POST, echo),
    )
    .await
    .expect("the call waited for the gated mount's discovery");
    assert_eq!(
        answer.body["result"]["content"][0]["text"], "not held",
        "{answer:?}"
    );
    gated.open();
    listing.abort();
}

/// A call whose client went away within the quick-answer window runs on
/// with nobody waiting; a DELETE of its session cancels it, as rmcp cancels
/// the calls it holds, and the session's per-session child ends at once.
/// It ran to its end (here 30 s), holding the session, its child and its
/// place under `max_sessions`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_ends_a_call_its_client_walked_away_from() {
    let config = format!(
        "{SERVER_TOML}{}",
        stdio_demo_mount("own", "isolation = \"per_session\"")
    );
    let gateway = Gateway::launch(&config, "toml", &[("RUST_LOG", "info,junction=debug")]).await;
    gateway.wait_ready().await;
    let http = reqwest::Client::new();
    let url = gateway.mcp_url();
    // The client must go within the call's first 20 ms: tried a bounded
    // number of times, each in a session of its own and with a request id
    // of its own (the gateway's line names it).
    for attempt in 0..10u32 {
        let session = raw::open_session(&http, &url).await;
        let pid_call = raw::echo_request("1", "x").replace("demo__echo", "own__pid");
        let answer = raw::post(&http, &url, Some(&session), raw::JSON_POST, pid_call).await;
        let pid: u32 = answer.body["result"]["content"][0]["text"]
            .as_str()
            .and_then(|text| text.parse().ok())
            .unwrap_or_else(|| panic!("no pid in {answer:?}"));
        let id = 100 + attempt;
        let walked_away = format!("id=Number({id})");
        let slow = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "own__slow", "arguments": {"steps": 300, "delay_ms": 100}}});
        let request = http
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", raw::ACCEPT_BOTH)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", raw::VERSION)
            .body(slow.to_string())
            .send();
        let _ = tokio::time::timeout(Duration::from_millis(5), request).await;
        // The gateway says so within moments if the call had started;
        // waited for (bounded), then this attempt is given up.
        let said = || {
            gateway.proc.stderr.snapshot().iter().any(|line| {
                line.contains("the client went away before a quick answer")
                    && line.contains(&walked_away)
            })
        };
        let went_away = poll_until(Duration::from_secs(1), || async { said().then_some(()) })
            .await
            .is_some();
        assert_eq!(raw::delete_session(&http, &url, &session).await, 204);
        if !went_away {
            // The call never started, or was handed over: not the case here.
            continue;
        }
        eventually(
            "the session's child to exit",
            CHILD_EXIT_TIMEOUT,
            || async { (!process_alive(pid)).then_some(()) },
        )
        .await;
        return;
    }
    panic!("the client never walked away within the quick window in 10 tries");
}

/// A session deleted while one of its quick calls runs: the call is
/// cancelled with it, and its client hears that the session ended, not
/// that the mount failed (a tool error "mount demo failed: task
/// cancelled", counted against the mount).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quick_call_cut_short_by_its_sessions_end_does_not_blame_the_mount() {
    let config = format!("{SERVER_TOML}{}", stdio_demo_mount("demo", ""));
    let gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let mcp = gateway.mcp_url();
    let mut blamed = Vec::new();
    // The window (the call's first 15 ms) is narrow: a few sessions.
    for attempt in 0..8 {
        let session = raw::open_session(&http, &mcp).await;
        raw::wait_until_calls_are_quick(&http, &mcp, &session, "demo__echo").await;
        let call = json!({
            "jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "demo__slow", "arguments": {"steps": 1, "delay_ms": 15}},
        });
        // Not `raw::post`, which wants an answer: a DELETE that comes past
        // the quick window (a loaded machine) finds the call handed over
        // to rmcp, whose stream the session's end closes with no answer.
        let posted = {
            let (http, mcp, session) = (http.clone(), mcp.clone(), session.clone());
            tokio::spawn(async move {
                raw::post_reading_what_arrives(&http, &mcp, &session, call.to_string()).await
            })
        };
        tokio::time::sleep(Duration::from_millis(3)).await;
        let deleted = raw::delete_session(&http, &mcp, &session).await;
        assert!(deleted.is_success(), "{deleted}");
        let answer = posted.await.expect("the call");
        if answer.contains("mount demo failed") {
            blamed.push(format!("attempt {attempt}: {answer}"));
        }
    }
    assert!(blamed.is_empty(), "{blamed:#?}");
}

/// On a per-session mount, a change only the full profile's discovery sees
/// (a tool offered to clients with sampling) is not announced to a client
/// without sampling, which has lists of its own: told, it listed again
/// and saw nothing new (and, when its own list had changed too, was told
/// before its own refresh had it). Its own upstream's change still is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_only_another_profile_sees_is_not_announced() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let marker = dir.path().join("changed");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sampling_only_change.py");
    let config = format!(
        "{SERVER_TOML}[mounts.own]\ncommand = \"python3\"\nargs = [{:?}, {:?}]\nisolation = \"per_session\"\n",
        fixture.to_str().expect("a UTF-8 path"),
        marker.to_str().expect("a UTF-8 path"),
    );
    let gateway = Gateway::start(&config).await;
    // The full profile (every capability the gateway relays): its lists
    // are the mount's own session's.
    let full: rmcp::model::ClientCapabilities = serde_json::from_value(json!({
        "sampling": {},
        "roots": {},
        "elicitation": {"form": {}, "url": {}},
        "extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}},
    }))
    .unwrap();
    let sampler = connect_with(&gateway.mcp_url(), full).await;
    let plain = gateway.connect().await;
    // Each profile's lists known.
    assert_eq!(tool_names(&sampler).await, ["own__announce"]);
    assert_eq!(tool_names(&plain).await, ["own__announce"]);

    std::fs::write(&marker, "").expect("the marker");
    eventually(
        "the full profile's session to be told",
        OP_TIMEOUT,
        || async { (sampler.service().tool_list_changes() >= 1).then_some(()) },
    )
    .await;
    assert_eq!(tool_names(&sampler).await, ["own__announce", "own__extra"]);
    // Positive control, sent after: the plain client's own upstream
    // announces a change of its prompts.
    ok_text(&call(&plain, "own__announce", Value::Null).await);
    eventually("the plain client to be told", OP_TIMEOUT, || async {
        (plain.service().prompt_list_changes() >= 1).then_some(())
    })
    .await;
    assert_eq!(
        plain.service().tool_list_changes(),
        0,
        "told of the full profile's change"
    );
    assert_eq!(tool_names(&plain).await, ["own__announce"]);
    close(sampler).await;
    close(plain).await;
}

/// With the `Origin` check off (`allowed_origins = ["*"]`), a page on any
/// origin may send a request (as before), but gets no CORS answer: a
/// browser neither passes its preflight nor lets it read an answer, so no
/// website a user visits can drive the gateway from the user's browser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_page_gets_cors_answers_with_the_origin_check_off() {
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nallowed_origins = [\"*\"]\n\n{}",
        stdio_demo_mount("shared", "")
    );
    let gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let mcp = gateway.mcp_url();
    let preflight = http
        .request(reqwest::Method::OPTIONS, &mcp)
        .header("origin", "http://evil.example")
        .header("access-control-request-method", "POST");
    let response = within("a preflight", preflight.send()).await.unwrap();
    assert_ne!(response.status(), 204);
    assert!(response
        .headers()
        .get("access-control-allow-origin")
        .is_none());
    let initialize = http
        .post(&mcp)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("origin", "http://evil.example")
        .body(INITIALIZE);
    let response = within("initialize", initialize.send()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(response
        .headers()
        .get("access-control-allow-origin")
        .is_none());
}

/// A list asked for right after a call whose upstream changed that list
/// (and said so before answering) shows the change, as the server itself
/// would: the list came from the cache as it was until the gateway's
/// refresh, a moment later, had read the upstream's list again. On a
/// shared and on a per-session stdio mount, for tools, prompts and
/// resources alike, each toggled several times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_after_a_call_that_changed_it_shows_the_change() {
    let config = format!(
        "{SERVER_TOML}{}{}",
        stdio_demo_mount("shared", ""),
        stdio_demo_mount("own", "isolation = \"per_session\""),
    );
    let gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let mcp = gateway.mcp_url();
    let session = raw::open_session(&http, &mcp).await;
    let mut id = 10;
    let mut post = |method: &str, params: Value| {
        id += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        raw::post(
            &http,
            &mcp,
            Some(&session),
            raw::JSON_POST,
            body.to_string(),
        )
    };
    for mount in ["shared", "own"] {
        for round in 0..6 {
            let toggled = post(
                "tools/call",
                json!({"name": format!("{mount}__toggle_bonus"), "arguments": {}}),
            )
            .await;
            let on = round % 2 == 0;
            let expected = if on { "bonus on" } else { "bonus off" };
            assert_eq!(
                toggled.body["result"]["content"][0]["text"], expected,
                "{mount} round {round}: {toggled:?}"
            );
            for (method, key, field) in [
                ("tools/list", "tools", "name"),
                ("prompts/list", "prompts", "name"),
                ("resources/list", "resources", "uri"),
            ] {
                let answer = post(method, json!({})).await;
                let names: Vec<&str> = answer.body["result"][key]
                    .as_array()
                    .unwrap_or_else(|| panic!("{mount} {method}: {answer:?}"))
                    .iter()
                    .filter_map(|item| item[field].as_str())
                    .collect();
                // `{mount}__bonus`, or the mount's `demo://bonus` under its
                // namespace.
                let shown = names.iter().any(|name| {
                    *name == format!("{mount}__bonus")
                        || (name.starts_with(mount) && name.ends_with("://bonus"))
                });
                assert_eq!(
                    shown, on,
                    "{mount} round {round}, {method} right after `{expected}`: {names:?}"
                );
            }
        }
    }
}

/// An upstream's JSON-RPC error whose id is `null` (a server that could
/// not read the request's id) answering the POST of one request is that
/// request's answer, on the direct call path and on rmcp's: the client
/// gets the upstream's error. It was matched to no request, and the call
/// waited out its whole timeout.
#[tokio::test]
async fn an_upstream_error_without_an_id_answers_its_request() {
    let server = common::forgetful_http::ForgetfulHttpServer::start().await;
    let gateway = Gateway::start(&format!(
        "[timeouts]\nrequest = \"5s\"\n\n{}",
        http_mount("remote", &server.url(), "")
    ))
    .await;
    let client = gateway.connect().await;
    let params = rmcp::model::CallToolRequestParams::new("remote__refuse");
    let called = within("tools/call", client.call_tool(params)).await;
    let error = format!("{called:?}");
    assert!(error.contains("refused without an id"), "{error}");
    let prompt = within(
        "prompts/get",
        client.get_prompt(rmcp::model::GetPromptRequestParams::new("remote__refuse")),
    )
    .await;
    let error = format!("{prompt:?}");
    assert!(error.contains("refused without an id"), "{error}");
    // On the request's own event stream too, with the stream held open;
    // and on that stream resumed by a `GET` after the server closed it.
    for prompt in ["remote__refuse_sse", "remote__refuse_resumed"] {
        let answer = within(
            prompt,
            client.get_prompt(rmcp::model::GetPromptRequestParams::new(prompt)),
        )
        .await;
        let error = format!("{answer:?}");
        assert!(error.contains("refused without an id"), "{prompt}: {error}");
    }
    close(client).await;
}

/// A request whose own answer stream ends with no answer, the session
/// going on: the client is told that stream's end, not that the upstream
/// "went away" and "the gateway is restarting it" (nothing restarts), and
/// the session serves the next request.
#[tokio::test]
async fn an_answer_stream_that_ends_unanswered_says_so() {
    let server = common::forgetful_http::ForgetfulHttpServer::start().await;
    let gateway = Gateway::start(&http_mount("remote", &server.url(), "")).await;
    let client = gateway.connect().await;
    let get =
        |name: &str| client.get_prompt(rmcp::model::GetPromptRequestParams::new(name.to_owned()));
    let before = within("prompts/get", get("remote__whoami"))
        .await
        .expect("whoami");
    let error = format!(
        "{:?}",
        within("prompts/get", get("remote__unanswered")).await
    );
    assert!(
        error.contains("answer stream ended before its answer"),
        "{error}"
    );
    assert!(!error.contains("restarting"), "{error}");
    let after = within("prompts/get", get("remote__whoami"))
        .await
        .expect("whoami");
    assert_eq!(
        format!("{:?}", after.messages),
        format!("{:?}", before.messages),
        "the same upstream session"
    );
    close(client).await;
}

/// A prompt answered with another request's id, or accepted (202) and
/// never answered, fails at once saying so: it waited out the request
/// timeout (rmcp matched the answer to nothing), where a call failed at
/// once. The session serves the next request.
#[tokio::test]
async fn a_request_answered_wrongly_fails_at_once() {
    let server = common::forgetful_http::ForgetfulHttpServer::start().await;
    let gateway = Gateway::start(&format!(
        "[timeouts]\nrequest = \"5m\"\n\n{}",
        http_mount("remote", &server.url(), "")
    ))
    .await;
    let client = gateway.connect().await;
    for (prompt, said) in [
        ("remote__wrong_id", "another id (424242)"),
        ("remote__accepted", "without answering it (HTTP 202"),
    ] {
        let answer = within(
            prompt,
            client.get_prompt(rmcp::model::GetPromptRequestParams::new(prompt)),
        )
        .await;
        let error = format!("{answer:?}");
        assert!(error.contains(said), "{prompt}: {error}");
        assert!(
            !error.contains("unreadable_answer"),
            "the gateway's own mark stays inside: {error}"
        );
    }
    within(
        "prompts/get",
        client.get_prompt(rmcp::model::GetPromptRequestParams::new("remote__whoami")),
    )
    .await
    .expect("whoami");
    // A numeric id written back as text is the request's (rmcp takes it
    // so): answered, not refused as another id.
    within(
        "prompts/get",
        client.get_prompt(rmcp::model::GetPromptRequestParams::new("remote__text_id")),
    )
    .await
    .expect("an id written as text");
    close(client).await;
}

/// A request that fails on the upstream's side is logged, naming the
/// mount and the cause (operators saw only a metric), at most once per
/// 10 s per mount: a failing upstream under load would write a line per
/// request.
#[tokio::test]
async fn upstream_failures_are_logged_at_most_every_ten_seconds() {
    let server = common::forgetful_http::ForgetfulHttpServer::start().await;
    let gateway = Gateway::start(&http_mount("remote", &server.url(), "")).await;
    let client = gateway.connect().await;
    for _ in 0..3 {
        let answer = within(
            "prompts/get",
            client.get_prompt(rmcp::model::GetPromptRequestParams::new(
                "remote__unanswered",
            )),
        )
        .await;
        assert!(answer.is_err(), "{answer:?}");
    }
    let said = eventually("the failure logged", OP_TIMEOUT, || async {
        let lines: Vec<String> = gateway
            .proc
            .stderr
            .snapshot()
            .into_iter()
            .filter(|line| line.contains("a request to the upstream failed"))
            .collect();
        (!lines.is_empty()).then_some(lines)
    })
    .await;
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("remote") && said[0].contains("answer stream ended"),
        "{said:?}"
    );
    close(client).await;
}

/// Per-user credentials: a `per_session` mount with `forward_headers`
/// opens each client's upstream session with that client's own
/// `Authorization`, on its `initialize` and every request after (a renewed
/// token as soon as the client sends it); a client that sent none gets the
/// mount's own. A shared mount of the same server
/// never sees a client's token, nor does the mount's own session.
#[tokio::test]
async fn a_per_session_mount_forwards_each_clients_own_credentials() {
    let server = common::forgetful_http::ForgetfulHttpServer::start().await;
    let gateway = Gateway::start(&format!(
        "{}{}",
        http_mount(
            "mine",
            &server.url(),
            "isolation = \"per_session\"\nheaders = { Authorization = \"Bearer mount\" }\n\
             forward_headers = [\"Authorization\"]"
        ),
        http_mount(
            "team",
            &server.url(),
            "headers = { Authorization = \"Bearer team\" }"
        ),
    ))
    .await;
    let url = gateway.mcp_url();
    let (alice, bob) = (
        raw::client_with_token("Bearer alice"),
        raw::client_with_token("Bearer bob"),
    );
    let anonymous = reqwest::Client::new();
    let alice_session = raw::open_session(&alice, &url).await;
    let bob_session = raw::open_session(&bob, &url).await;
    let anonymous_session = raw::open_session(&anonymous, &url).await;

    let seen = |http, session| raw::tool_text(http, &url, session, "mine__authorization");
    assert_eq!(
        seen(&alice, &alice_session).await,
        "Bearer alice / Bearer alice"
    );
    assert_eq!(seen(&bob, &bob_session).await, "Bearer bob / Bearer bob");
    assert_eq!(
        seen(&anonymous, &anonymous_session).await,
        "Bearer mount / Bearer mount",
        "no token of its own: the mount's"
    );
    assert_eq!(
        raw::tool_text(&alice, &url, &alice_session, "team__authorization").await,
        "Bearer team / Bearer team",
        "a shared mount sends only its own"
    );
    // Alice's token expired and her client renewed it: her open upstream
    // session gets the new one on its next request.
    let renewed = raw::client_with_token("Bearer alice-renewed");
    assert_eq!(
        seen(&renewed, &alice_session).await,
        "Bearer alice / Bearer alice-renewed"
    );
    assert_eq!(
        seen(&bob, &bob_session).await,
        "Bearer bob / Bearer bob",
        "bob's stays his"
    );
    // The tools were listed by the mount's own session, with its header.
    let tools = raw::post(
        &alice,
        &url,
        Some(&alice_session),
        raw::JSON_POST,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
    )
    .await;
    assert!(
        tools.text().contains("mine__authorization"),
        "listed: {tools:?}"
    );
}

/// A server listing one tool name twice: the gateway lists the first, with
/// the first's own `execution` (a tool that declared no task support must
/// not be listed as requiring tasks because a later one of its name did),
/// and `/status.json` counts it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_listed_twice_is_the_first_with_its_own_execution() {
    let (port, upstream) = scripted_http_upstream(
        json!({"tools": {}, "tasks": {"requests": {"tools": {"call": {}}}}}),
        |request| match request["method"].as_str() {
            Some("tools/list") => Some(json!({"tools": [
                {"name": "dup", "description": "FIRST", "inputSchema": {"type": "object"},
                 "execution": {"taskSupport": "optional"}},
                {"name": "two", "description": "FIRST", "inputSchema": {"type": "object"}},
                {"name": "dup", "description": "SECOND", "inputSchema": {"type": "object"},
                 "execution": {"taskSupport": "forbidden"}},
                {"name": "two", "description": "SECOND", "inputSchema": {"type": "object"},
                 "execution": {"taskSupport": "required"}},
            ]})),
            _ => Some(json!({})),
        },
    )
    .await;
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n{}",
        http_mount("ls", &format!("http://127.0.0.1:{port}/mcp"), "")
    );
    let gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let session = raw::open_session(&http, &gateway.mcp_url()).await;
    let listed = raw::post(
        &http,
        &gateway.mcp_url(),
        Some(&session),
        raw::JSON_POST,
        TOOLS_LIST,
    )
    .await;
    let tools = listed.body["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", listed.text()))
        .clone();
    let shown: Vec<(String, String, Value)> = tools
        .iter()
        .map(|tool| {
            (
                tool["name"].as_str().unwrap_or_default().to_owned(),
                tool["description"].as_str().unwrap_or_default().to_owned(),
                tool["execution"].clone(),
            )
        })
        .collect();
    assert_eq!(
        shown,
        [
            (
                "ls__dup".into(),
                "FIRST".into(),
                json!({"taskSupport": "optional"})
            ),
            ("ls__two".into(), "FIRST".into(), Value::Null),
        ]
    );
    let status = status_json(&gateway).await;
    assert_eq!(status["mounts"][0]["tools"], 2, "{status}");
    upstream.abort();
}

/// A session DELETEd while its per-session HTTP upstream runs a call tells
/// that upstream to cancel the call: a server need not cancel a session's
/// work on its DELETE (this one does not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_sessions_per_session_calls_are_cancelled_upstream() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static CALLED: AtomicBool = AtomicBool::new(false);
    static CANCELLED: AtomicBool = AtomicBool::new(false);
    let (port, upstream) = scripted_sse_upstream(json!({"tools": {}}), |request| {
        match request["method"].as_str() {
            Some("tools/list") => ScriptedReply::Result(
                json!({"tools": [{"name": "work", "inputSchema": {"type": "object"}}]}),
            ),
            Some("tools/call") => {
                CALLED.store(true, Ordering::SeqCst);
                // Its answer would come after 30 s.
                ScriptedReply::Stream(vec![(
                    Duration::from_secs(30),
                    json!({"jsonrpc": "2.0", "id": "$request", "result": {"content": []}}),
                )])
            }
            Some("notifications/cancelled") => {
                CANCELLED.store(true, Ordering::SeqCst);
                ScriptedReply::Result(json!({}))
            }
            _ => ScriptedReply::Result(json!({})),
        }
    })
    .await;
    let config = format!(
        "{SERVER_TOML}{}",
        http_mount(
            "own",
            &format!("http://127.0.0.1:{port}/mcp"),
            "isolation = \"per_session\""
        ),
    );
    let gateway = Gateway::start(&config).await;
    let client = gateway.connect().await;
    let peer = client.peer().clone();
    let running = tokio::spawn(async move {
        peer.call_tool(rmcp::model::CallToolRequestParams::new("own__work"))
            .await
    });
    eventually("the upstream to run the call", OP_TIMEOUT, || async {
        CALLED.load(Ordering::SeqCst).then_some(())
    })
    .await;
    close(client).await;
    running.abort();
    eventually("the upstream to be told to cancel", OP_TIMEOUT, || async {
        CANCELLED.load(Ordering::SeqCst).then_some(())
    })
    .await;
    upstream.abort();
}

/// A result the gateway cannot read (a tool result whose content is no
/// list, a prompt message without its role) is a failure that says why:
/// it said "an unexpected result type", which sent users looking for a
/// protocol mix-up. A content block of a kind newer than the gateway
/// knows fails nothing: it is relayed as a text block holding it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_result_says_why() {
    let (port, upstream) =
        scripted_sse_upstream(
            json!({"tools": {}, "prompts": {}}),
            |request| match request["method"].as_str() {
                Some("tools/list") => ScriptedReply::Result(json!({"tools": [
                    {"name": "film", "inputSchema": {"type": "object"}},
                    {"name": "long", "inputSchema": {"type": "object"}},
                ]})),
                // Its whole output where the content list should be.
                Some("tools/call") if request["params"]["name"] == "long" => {
                    ScriptedReply::Result(json!({"content": "secret ".repeat(300)}))
                }
                Some("tools/call") => ScriptedReply::Result(json!({"content": [
                    {"type": "text", "text": "here"},
                    {"type": "video", "uri": "film://1"},
                ]})),
                Some("prompts/list") => {
                    ScriptedReply::Result(json!({"prompts": [{"name": "odd"}]}))
                }
                Some("prompts/get") => ScriptedReply::Result(
                    json!({"messages": [{"content": {"type": "text", "text": "no role"}}]}),
                ),
                _ => ScriptedReply::Result(json!({})),
            },
        )
        .await;
    let gateway = gateway_over_up(port).await;
    let client = gateway.connect().await;
    let called = within(
        "tools/call",
        client.call_tool(rmcp::model::CallToolRequestParams::new("up__film")),
    )
    .await
    .expect("a tool result");
    assert_ne!(called.is_error, Some(true), "{called:?}");
    let content = serde_json::to_value(&called.content).unwrap();
    assert_eq!(content[0]["text"], "here", "{content}");
    assert_eq!(
        content[1]["_meta"]["junction/unreadable-content-type"], "video",
        "{content}"
    );
    assert!(
        content[1]["text"]
            .as_str()
            .is_some_and(|text| text.contains("film://1")),
        "{content}"
    );
    let prompt = within(
        "prompts/get",
        client.get_prompt(GetPromptRequestParams::new("up__odd")),
    )
    .await;
    let error = format!("{prompt:?}");
    assert!(
        error.contains("could not be read") && error.contains("role"),
        "{error}"
    );
    // What could not be read is quoted to the client in part, and not
    // at all in the log.
    let called = within(
        "tools/call long",
        client.call_tool(rmcp::model::CallToolRequestParams::new("up__long")),
    )
    .await
    .expect("a tool error");
    let text = format!("{:?}", called.content);
    assert!(
        text.contains("could not be read") && text.len() < 1000,
        "{text}"
    );
    let warned = gateway.proc.stderr.find("not the result asked for");
    assert!(
        warned.is_some_and(|line| !line.contains("secret")),
        "{}",
        gateway.proc.stderr.text()
    );
    close(client).await;
    upstream.abort();
}

/// Numbers in arguments and results keep their digits through the
/// gateway, which reads and writes them: serde_json's default float
/// parsing is off by one in the last digit for about one number in ten
/// (0.9818453387344777 came back as 0.9818453387344775).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbers_keep_their_digits_both_ways() {
    let (port, upstream) = scripted_sse_upstream(json!({"tools": {}}), |request| {
        match request["method"].as_str() {
            Some("tools/list") => ScriptedReply::Result(
                json!({"tools": [{"name": "measure", "inputSchema": {"type": "object"}}]}),
            ),
            Some("tools/call") => ScriptedReply::Result(json!({
                "content": [],
                "structuredContent": {
                    "received": request["params"]["arguments"]["x"],
                    "measured": 0.438_515_440_131_815_65,
                },
            })),
            _ => ScriptedReply::Result(json!({})),
        }
    })
    .await;
    let gateway = gateway_over_up(port).await;
    let http = reqwest::Client::new();
    let session = raw::open_session(&http, &gateway.mcp_url()).await;
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"up__measure","arguments":{"x":0.9818453387344777}}}"#;
    let answer = raw::post(
        &http,
        &gateway.mcp_url(),
        Some(&session),
        raw::JSON_POST,
        call.to_owned(),
    )
    .await;
    let structured = &answer.body["result"]["structuredContent"];
    assert_eq!(
        structured["received"].to_string(),
        "0.9818453387344777",
        "{answer:?}"
    );
    assert_eq!(
        structured["measured"].to_string(),
        "0.43851544013181565",
        "{answer:?}"
    );
    upstream.abort();
}

/// A gateway mounting the Streamable HTTP upstream on `port` as `up`.
async fn gateway_over_up(port: u16) -> Gateway {
    let url = format!("http://127.0.0.1:{port}/mcp");
    Gateway::start(&format!("{SERVER_TOML}{}", http_mount("up", &url, ""))).await
}

/// As above, for a call already handed over to rmcp (past the quick
/// window, its answer on an SSE stream) when its session is deleted: its
/// client hears that the session ended, never that the mount failed, and
/// hears it every time: the session's close waits for its request streams
/// to carry those answers (before, rmcp's close often cut the stream
/// first, more often the busier the machine). Three sessions in a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_call_cut_short_by_its_sessions_end_does_not_blame_the_mount() {
    let config = format!("{SERVER_TOML}{}", stdio_demo_mount("demo", ""));
    let gateway = Gateway::start(&config).await;
    let http = reqwest::Client::new();
    let mcp = gateway.mcp_url();
    for attempt in 0..3 {
        let session = raw::open_session(&http, &mcp).await;
        raw::wait_until_calls_are_quick(&http, &mcp, &session, "demo__echo").await;
        let call = json!({
            "jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "demo__slow", "arguments": {"steps": 1, "delay_ms": 2000}},
        });
        let posted = {
            let (http, mcp, session) = (http.clone(), mcp.clone(), session.clone());
            tokio::spawn(async move {
                raw::post_reading_what_arrives(&http, &mcp, &session, call.to_string()).await
            })
        };
        // Well past the quick window (`HOLD`, 20 ms): the call is rmcp's.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let deleted = raw::delete_session(&http, &mcp, &session).await;
        assert!(deleted.is_success(), "{deleted}");
        let answer = posted.await.expect("the call");
        assert!(
            answer.contains("\"id\":7")
                && answer.contains("the session has ended")
                && !answer.contains("mount demo failed"),
            "attempt {attempt}: {answer}"
        );
    }
}
