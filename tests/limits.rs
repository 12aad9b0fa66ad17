//! The `[limits]` table end to end: beyond each limit the client gets a
//! clear error, and nothing else (other sessions, calls already running) is
//! affected; when a place is freed, the next client gets it.

mod common;

use std::{collections::HashSet, time::Duration};

use common::{raw::Answer, *};
use serde_json::{json, Value};

/// How long a freed place may take to become usable (a per-session child
/// ending, a session being dropped).
const FREED_TIMEOUT: Duration = Duration::from_secs(10);

/// JSON-RPC error code of a request refused by a limit.
const LIMIT_EXCEEDED: i32 = -32000;

/// POSTs an `initialize` without a session id (a new session).
async fn initialize(gateway: &Gateway) -> Answer {
    raw::post(
        &reqwest::Client::new(),
        &gateway.mcp_url(),
        None,
        raw::JSON_POST,
        raw::INITIALIZE,
    )
    .await
}

/// Asserts `answer` is the refusal of a new session beyond the limit.
fn assert_session_refused(answer: Answer) {
    assert_eq!(answer.status, 503, "a session beyond the limit");
    assert!(
        answer.headers.contains_key("retry-after"),
        "no Retry-After in {:?}",
        answer.headers
    );
    assert!(
        !answer.headers.contains_key("mcp-session-id"),
        "a refused client got a session: {:?}",
        answer.headers
    );
    let body = &answer.body;
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert_eq!(body["error"]["code"], LIMIT_EXCEEDED, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("session limit reached"), "{body}");
    // The limit, said as one: after a reload lowers it, the gateway may
    // serve more sessions than it (black-box helper: "already serves 2"
    // with 3 served).
    assert!(message.contains("at its limit of"), "{body}");
}

/// Asserts a client session still answers calls.
async fn assert_works(client: &Client, tag: &str) {
    let echoed = call(client, "keep__echo", json!({"message": tag})).await;
    assert_eq!(ok_text(&echoed), tag);
}

/// `max_sessions`: the session after the last allowed one gets 503 with a
/// JSON-RPC error; the others keep working; a DELETE frees a place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_sessions_refuses_the_next_session_until_one_ends() {
    let config = format!(
        "{SERVER_TOML}[limits]\nmax_sessions = 3\n\n{}",
        stdio_demo_mount("keep", ""),
    );
    let gateway = Gateway::start(&config).await;
    let (a, b) = tokio::join!(gateway.connect(), gateway.connect());
    // The third place goes to a raw session, to DELETE by hand below.
    let raw = session_id(&initialize(&gateway).await);

    assert_session_refused(initialize(&gateway).await);
    // Refusing does not use up a place, and the live sessions keep working.
    assert_session_refused(initialize(&gateway).await);
    let refused = try_connect(&gateway.mcp_url()).await.err();
    assert!(refused.is_some(), "an rmcp client got a fourth session");
    for (client, tag) in [(&a, "a"), (&b, "b")] {
        assert_works(client, tag).await;
    }

    // A DELETE frees a place for the next client, and only one place.
    let response = within(
        "DELETE",
        reqwest::Client::new()
            .delete(gateway.mcp_url())
            .header("mcp-session-id", &raw)
            .send(),
    )
    .await
    .expect("DELETE sent");
    assert!(response.status().is_success(), "{}", response.status());
    let answer = eventually("a place to be free", FREED_TIMEOUT, || async {
        let answer = initialize(&gateway).await;
        (answer.status == 200).then_some(answer)
    })
    .await;
    session_id(&answer);
    assert_session_refused(initialize(&gateway).await);

    // The same when an rmcp client ends its session (it sends the DELETE).
    close(a).await;
    let c = eventually("a place to be free again", FREED_TIMEOUT, || async {
        try_connect(&gateway.mcp_url()).await.ok()
    })
    .await;
    assert_session_refused(initialize(&gateway).await);
    for (client, tag) in [(&b, "b"), (&c, "c")] {
        assert_works(client, tag).await;
    }
    close(b).await;
    close(c).await;
}

/// The session id an accepted `initialize` returned.
fn session_id(answer: &Answer) -> String {
    assert_eq!(answer.status, 200, "initialize was refused");
    answer
        .session_id()
        .expect("initialize returns a session id")
}

/// `max_concurrent_requests`: with two calls in flight in a session, a
/// third gets a JSON-RPC error at once; the two finish normally and
/// another session is unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrent_requests_refuses_one_more_in_that_session_only() {
    let config = format!(
        "{SERVER_TOML}[limits]\nmax_concurrent_requests = 2\n\n{}",
        stdio_demo_mount("keep", ""),
    );
    let gateway = Gateway::start(&config).await;
    let (a, b) = tokio::join!(gateway.connect(), gateway.connect());
    let slow = json!({"steps": 60, "delay_ms": 50});

    let (first, second, ()) = tokio::join!(
        call(&a, "keep__slow", slow.clone()),
        call(&a, "keep__slow", slow.clone()),
        async {
            // Both slow calls are running upstream (each reported progress
            // under its own token).
            eventually("both slow calls to be in flight", FREED_TIMEOUT, || async {
                let tokens: HashSet<_> = a
                    .service()
                    .progress()
                    .into_iter()
                    .map(|(token, _)| token)
                    .collect();
                (tokens.len() >= 2).then_some(())
            })
            .await;
            let refused = call_err(&a, "keep__echo", json!({"message": "third"})).await;
            assert_eq!(refused.code.0, LIMIT_EXCEEDED, "{refused:?}");
            assert!(
                refused
                    .message
                    .contains("too many concurrent requests in this session"),
                "{refused:?}"
            );
            // Another session is not limited by A's requests: it can have
            // two of its own in flight at the same time.
            let (one, two) = tokio::join!(
                call(&b, "keep__slow", json!({"steps": 2, "delay_ms": 50})),
                call(&b, "keep__echo", json!({"message": "b"})),
            );
            assert_eq!(ok_text(&one), "done after 2 steps");
            assert_eq!(ok_text(&two), "b");
            assert!(
                a.service().progress().len() < 120,
                "A's calls ended before B's were checked; nothing was proven"
            );
        },
    );
    assert_eq!(ok_text(&first), "done after 60 steps");
    assert_eq!(ok_text(&second), "done after 60 steps");
    // The places are given back: A's next call goes through.
    assert_works(&a, "a again").await;
    close(a).await;
    close(b).await;
}

/// `max_upstream_sessions`: a per_session mount opens at most that many
/// upstream sessions; the client session beyond it gets a tool error naming
/// the limit, until another session ends. `[limits]` sets it for every
/// mount, a mount's own value overrides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_upstream_sessions_bounds_per_session_upstreams() {
    let config = format!(
        "{SERVER_TOML}[limits]\nmax_upstream_sessions = 1\n\n{}{}",
        stdio_demo_mount("own", "isolation = \"per_session\""),
        stdio_demo_mount(
            "wide",
            "isolation = \"per_session\"\nmax_upstream_sessions = 2"
        ),
    );
    let gateway = Gateway::start(&config).await;
    let (a, b, c) = tokio::join!(gateway.connect(), gateway.connect(), gateway.connect());

    let own_a = call_pid(&a, "own__pid").await;
    let refused = call(&b, "own__pid", Value::Null).await;
    assert_upstream_refused(&refused, "own");
    // Refusal is not sticky and does not count: B is refused again, A works.
    let refused = call(&b, "own__pid", Value::Null).await;
    assert_upstream_refused(&refused, "own");
    assert_eq!(call_pid(&a, "own__pid").await, own_a);

    // The mount's own limit of 2 overrides [limits].
    let wide_a = call_pid(&a, "wide__pid").await;
    let wide_b = call_pid(&b, "wide__pid").await;
    assert_ne!(wide_a, wide_b);
    let refused = call(&c, "wide__pid", Value::Null).await;
    assert_upstream_refused(&refused, "wide");

    // A ends: its per-session upstreams close and free their places.
    close(a).await;
    let own_b = eventually("B to get an `own` upstream", FREED_TIMEOUT, || async {
        let result = call(&b, "own__pid", Value::Null).await;
        (result.is_error != Some(true)).then(|| ok_text(&result).parse::<u32>().expect("a pid"))
    })
    .await;
    assert_ne!(own_b, own_a);
    let wide_c = eventually("C to get a `wide` upstream", FREED_TIMEOUT, || async {
        let result = call(&c, "wide__pid", Value::Null).await;
        (result.is_error != Some(true)).then(|| ok_text(&result).parse::<u32>().expect("a pid"))
    })
    .await;
    assert!(![wide_a, wide_b].contains(&wide_c));
    eventually(
        "A's per-session children to exit",
        FREED_TIMEOUT,
        || async { (!process_alive(own_a) && !process_alive(wide_a)).then_some(()) },
    )
    .await;
    // B's place is taken now; C is refused for `own`.
    let refused = call(&c, "own__pid", Value::Null).await;
    assert_upstream_refused(&refused, "own");
    close(b).await;
    close(c).await;
}

/// Asserts a tool result is the refusal of a per-session upstream beyond
/// `max_upstream_sessions` for `mount`.
fn assert_upstream_refused(result: &rmcp::model::CallToolResult, mount: &str) {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let message = text(result);
    assert!(message.contains("max_upstream_sessions"), "{message}");
    assert!(message.contains("at its limit of"), "{message}");
    assert!(message.contains(&format!("mount {mount}")), "{message}");
}
