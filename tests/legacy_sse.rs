//! Upstreams on the legacy HTTP+SSE transport (`transport = "sse"`), served
//! by a hand-written server (`common::legacy_sse`): sessions shared or per
//! client, the mount's headers on every request, a stream that ends or a
//! session the server forgets replaced by a new one, and an endpoint on
//! another origin refused before anything is posted there. The reference
//! server's SSE mode is exercised by `tests/interop/test_sse_upstream.py`.

mod common;

use common::{
    legacy_sse::{same_origin_endpoint, LegacySseServer},
    *,
};
use serde_json::json;

const QUICK_SUPERVISION: &str =
    "[supervision]\nrestart_backoff = \"20ms\"\nrestart_backoff_max = \"200ms\"\n\n";

fn sse_mount(name: &str, server: &LegacySseServer, extra: &str) -> String {
    http_mount(
        name,
        &server.url(),
        &format!(
            "transport = \"sse\"\nheaders = {{ Authorization = \"Bearer sse-secret\" }}\n{extra}"
        ),
    )
}

/// `whoami`'s answer once a call of it succeeds (the mount reopening
/// its session meanwhile).
async fn whoami_once_it_answers(client: &Client) -> String {
    eventually("a call on a new session", OP_TIMEOUT, || async {
        let result = client
            .call_tool(rmcp::model::CallToolRequestParams::new("legacy__whoami"))
            .await
            .ok()?;
        (result.is_error != Some(true)).then(|| text(&result).to_owned())
    })
    .await
}

/// A server, a gateway mounting it (`legacy`, restarted quickly) and a
/// client of the gateway.
async fn quickly_restarted_mount() -> (LegacySseServer, Gateway, Client) {
    let server = LegacySseServer::start(same_origin_endpoint).await;
    let gateway = Gateway::start(&format!(
        "{QUICK_SUPERVISION}{}",
        sse_mount("legacy", &server, "")
    ))
    .await;
    let client = gateway.connect().await;
    (server, gateway, client)
}

async fn whoami(client: &Client) -> String {
    ok_text(&call(client, "legacy__whoami", json!({})).await).to_owned()
}

#[tokio::test]
async fn a_shared_mount_serves_every_client_from_one_session_with_its_headers() {
    let server = LegacySseServer::start(same_origin_endpoint).await;
    let gateway = Gateway::start(&sse_mount("legacy", &server, "")).await;
    let (a, b) = (gateway.connect().await, gateway.connect().await);
    assert_eq!(
        tool_names(&a).await,
        [
            "legacy__end_stream",
            "legacy__forget",
            "legacy__hold",
            "legacy__huge",
            "legacy__whoami"
        ]
    );
    let first = whoami(&a).await;
    assert_eq!(whoami(&b).await, first, "one upstream session for both");
    assert_eq!(server.sessions_opened(), 1);

    let seen = server.seen();
    for method in [
        "GET",
        "initialize",
        "notifications/initialized",
        "tools/list",
        "tools/call",
    ] {
        assert!(
            seen.iter().any(|(what, _)| what == method),
            "no {method} in {seen:?}"
        );
    }
    for (what, authorization) in &seen {
        assert_eq!(
            authorization.as_deref(),
            Some("Bearer sse-secret"),
            "{what} without the mount's header"
        );
    }
    let status = status_json(&gateway).await;
    assert_eq!(status["mounts"][0]["transport"], "sse", "{status}");
    close(a).await;
    close(b).await;
}

#[tokio::test]
async fn a_per_session_mount_gives_each_client_its_own_stream_and_closes_it() {
    let server = LegacySseServer::start(same_origin_endpoint).await;
    let gateway =
        Gateway::start(&sse_mount("legacy", &server, "isolation = \"per_session\"")).await;
    let (a, b) = (gateway.connect().await, gateway.connect().await);
    let of_a = whoami(&a).await;
    let of_b = whoami(&b).await;
    assert_ne!(of_a, of_b, "each client its own upstream session");
    assert_eq!(whoami(&a).await, of_a, "and the same one on every call");
    let open = server.open_streams();
    close(a).await;
    eventually("a's event stream to be closed", OP_TIMEOUT, || async {
        (server.open_streams() == open - 1).then_some(())
    })
    .await;
    assert_eq!(whoami(&b).await, of_b);
    close(b).await;
}

/// An answer in an event over the 16 MiB an event may be fails its call
/// at once, saying so (a tool error), and the session goes on: it broke the session's
/// one event stream, which ended the session (every call in flight on it
/// failed, and it counted as a crash).
#[tokio::test]
async fn an_answer_too_large_fails_its_call_and_keeps_the_session() {
    let server = LegacySseServer::start(same_origin_endpoint).await;
    let gateway = Gateway::start(&sse_mount("legacy", &server, "")).await;
    let client = gateway.connect().await;
    let before = whoami(&client).await;
    let failed = call(&client, "legacy__huge", serde_json::Value::Null).await;
    assert_eq!(failed.is_error, Some(true), "{failed:?}");
    assert!(
        text(&failed).contains("larger than 16777216 bytes"),
        "{failed:?}"
    );
    assert_eq!(whoami(&client).await, before, "the same session");
    assert_eq!(server.sessions_opened(), 1);
    close(client).await;
}

#[tokio::test]
async fn a_stream_that_ends_is_replaced_by_a_new_session() {
    let (server, _gateway, client) = quickly_restarted_mount().await;
    let before = whoami(&client).await;
    // The server ends the stream instead of answering: the call fails
    // (as a tool error naming the mount, or an error), it does not hang.
    let ended = within(
        "the call whose stream ended",
        client.call_tool(rmcp::model::CallToolRequestParams::new(
            "legacy__end_stream",
        )),
    )
    .await;
    match ended {
        Ok(result) => assert_eq!(result.is_error, Some(true), "{result:?}"),
        Err(error) => assert!(error.to_string().contains("legacy"), "{error}"),
    }
    let after = whoami_once_it_answers(&client).await;
    assert_ne!(after, before);
    assert_eq!(
        server.open_streams(),
        1,
        "the ended session's stream is gone"
    );
    close(client).await;
}

#[tokio::test]
async fn a_session_the_server_forgot_is_replaced_and_its_stream_closed() {
    let (server, _gateway, client) = quickly_restarted_mount().await;
    let before = whoami(&client).await;
    assert_eq!(
        ok_text(&call(&client, "legacy__forget", json!({})).await),
        "forgotten"
    );
    // The server still holds the old stream open; only its 404s say the
    // session is gone.
    let after = whoami_once_it_answers(&client).await;
    assert_ne!(after, before);
    eventually(
        "the forgotten session's stream to be closed",
        OP_TIMEOUT,
        || async { (server.open_streams() == 1).then_some(()) },
    )
    .await;
    close(client).await;
}

/// `localhost` is another origin than `127.0.0.1`, though the same server:
/// had the gateway followed the endpoint, the server would have seen its
/// POSTs, with the mount's credentials.
#[tokio::test]
async fn an_endpoint_on_another_origin_is_refused_before_anything_is_posted() {
    fn elsewhere(port: u16, session: u64) -> String {
        format!("http://localhost:{port}/messages?session={session}")
    }
    let server = LegacySseServer::start(elsewhere).await;
    let gateway = Gateway::start(&sse_mount("legacy", &server, "")).await;
    let readyz = gateway.wait_ready().await;
    let mount = readyz_mount(&readyz, "legacy");
    let error = mount["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("another origin (http://localhost:"),
        "{readyz}"
    );
    assert!(
        !error.contains("session="),
        "the endpoint's query is not repeated: {error}"
    );
    let seen = server.seen();
    assert!(
        seen.iter().all(|(what, _)| what == "GET"),
        "something was posted: {seen:?}"
    );
    assert!(!seen.is_empty());
}

/// An `endpoint` event without a URL would resolve to the stream's own:
/// the session is refused instead of posting there.
#[tokio::test]
async fn an_empty_endpoint_is_no_endpoint() {
    fn nowhere(_port: u16, _session: u64) -> String {
        String::new()
    }
    let server = LegacySseServer::start(nowhere).await;
    let gateway = Gateway::start(&sse_mount("legacy", &server, "")).await;
    let readyz = gateway.wait_ready().await;
    let error = readyz_mount(&readyz, "legacy")["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(error.contains("before it named the endpoint"), "{readyz}");
    let seen = server.seen();
    assert!(
        seen.iter().all(|(what, _)| what == "GET"),
        "something was posted: {seen:?}"
    );
}

/// A server that answers a POST only once it has run the message holds
/// that message's POST, not every other one: another client's call on the
/// shared session is answered meanwhile.
#[tokio::test]
async fn a_post_held_while_its_message_runs_holds_up_no_other() {
    let server = LegacySseServer::start(same_origin_endpoint).await;
    let gateway = Gateway::start(&sse_mount("legacy", &server, "")).await;
    let (a, b) = (gateway.connect().await, gateway.connect().await);
    let held = tokio::spawn(async move {
        let result = call(&a, "legacy__hold", json!({})).await;
        (a, result)
    });
    eventually("the held call to reach the server", OP_TIMEOUT, || async {
        server
            .seen()
            .iter()
            .any(|(what, _)| what == "tools/call")
            .then_some(())
    })
    .await;
    whoami(&b).await;
    let (a, held) = held.await.expect("the held call");
    assert_eq!(
        ok_text(&held),
        "company",
        "the other call reached the server while the held one ran"
    );
    close(a).await;
    close(b).await;
}

/// A per-session legacy mount with `forward_headers` opens a client's
/// event stream, and posts every message of it, with that client's own
/// `Authorization`; the mount's own session keeps the mount's.
#[tokio::test]
async fn a_per_session_mount_forwards_the_clients_credentials_on_stream_and_posts() {
    let server = LegacySseServer::start(same_origin_endpoint).await;
    let gateway = Gateway::start(&sse_mount(
        "legacy",
        &server,
        "isolation = \"per_session\"\nforward_headers = [\"authorization\"]",
    ))
    .await;
    let url = gateway.mcp_url();
    let alice = raw::client_with_token("Bearer alice");
    let session = raw::open_session(&alice, &url).await;
    raw::tool_text(&alice, &url, &session, "legacy__whoami").await;
    // Her client renewed its token: the next post carries the new one.
    let renewed = raw::client_with_token("Bearer alice-renewed");
    raw::tool_text(&renewed, &url, &session, "legacy__whoami").await;

    let seen = server.seen();
    let of = |token: &str| -> Vec<String> {
        seen.iter()
            .filter(|(_, authorization)| authorization.as_deref() == Some(token))
            .map(|(what, _)| what.clone())
            .collect()
    };
    let alices = of("Bearer alice");
    for what in [
        "GET",
        "initialize",
        "notifications/initialized",
        "tools/call",
    ] {
        assert!(alices.iter().any(|seen| seen == what), "{what}: {seen:?}");
    }
    let renewed = of("Bearer alice-renewed");
    assert_eq!(renewed, ["tools/call"], "{seen:?}");
    let mounts = of("Bearer sse-secret");
    assert!(mounts.iter().any(|seen| seen == "tools/list"), "{seen:?}");
    assert!(!mounts.iter().any(|seen| seen == "tools/call"), "{seen:?}");
    assert_eq!(
        seen.len(),
        alices.len() + renewed.len() + mounts.len(),
        "no request without one: {seen:?}"
    );
}
