//! Resource subscriptions end to end, through the real gateway: what a
//! shared upstream is subscribed to follows what the sessions want, through
//! sessions ending, upstream restarts and reloads, and a per-session
//! upstream reopened after its process died keeps its session's
//! subscriptions.
//!
//! The demo server says what it holds (its `subscriptions` tool: one line
//! per upstream session and URI) and tells its subscribers when a note
//! changes (`remember` → `notifications/resources/updated`).

// Subscriptions are the 2025-11-25 mechanism the gateway speaks; rmcp marks
// them legacy (2026-07-28 replaces them with `subscriptions/listen`).
#![allow(deprecated)]

mod common;

use std::time::Duration;

use common::*;
use rmcp::model::{SubscribeRequestParams, UnsubscribeRequestParams};
use serde_json::json;

/// How long a restart, a reload or a notification may take to show.
const SETTLE: Duration = Duration::from_secs(15);

const NOTE: &str = "demo://notes/a";

fn shared_config() -> String {
    format!("{SERVER_TOML}{}", stdio_demo_mount("shared", ""))
}

async fn subscribe(client: &Client, uri: &str) {
    within(
        &format!("subscribing to {uri}"),
        client.subscribe(SubscribeRequestParams::new(uri)),
    )
    .await
    .unwrap_or_else(|error| panic!("resources/subscribe {uri}: {error}"));
}

async fn unsubscribe(client: &Client, uri: &str) {
    within(
        &format!("unsubscribing from {uri}"),
        client.unsubscribe(UnsubscribeRequestParams::new(uri)),
    )
    .await
    .unwrap_or_else(|error| panic!("resources/unsubscribe {uri}: {error}"));
}

/// What the mount's demo process is subscribed to, as its
/// `subscriptions` tool says (`None` while the call fails, as it does
/// while the upstream restarts).
async fn held(client: &Client, mount: &str) -> Option<Vec<String>> {
    let name = format!("{mount}__subscriptions");
    let params = rmcp::model::CallToolRequestParams::new(name);
    let result = within("tools/call subscriptions", client.call_tool(params))
        .await
        .ok()?;
    if result.is_error == Some(true) {
        return None;
    }
    Some(text(&result).lines().map(str::to_owned).collect())
}

async fn wait_until_held(client: &Client, mount: &str, expected: &[&str]) {
    eventually(
        &format!("{mount}'s upstream to hold {expected:?}"),
        SETTLE,
        || async { held(client, mount).await.filter(|uris| uris == expected) },
    )
    .await;
}

/// A gateway with the shared demo mount, a session subscribed to note
/// `a` (its URI), and one that is not, once the upstream holds the note.
async fn one_subscriber() -> (Gateway, String, Client, Client) {
    let gateway = Gateway::start(&shared_config()).await;
    let uri = format!("shared+{NOTE}");
    let subscriber = gateway.connect().await;
    let observer = gateway.connect().await;
    subscribe(&subscriber, &uri).await;
    wait_until_held(&observer, "shared", &[NOTE]).await;
    (gateway, uri, subscriber, observer)
}

/// Reloads `one_subscriber`'s gateway with its mount's namespace `other`,
/// and waits until the new upstream holds the note again.
async fn rename_to_other(gateway: &Gateway, observer: &Client) {
    let renamed = format!(
        "{SERVER_TOML}{}",
        stdio_demo_mount("shared", "namespace = \"other\"")
    );
    rewrite_config(&gateway.config_path, &renamed);
    wait_until_held(observer, "other", &[NOTE]).await;
}

/// Changes note `a` through `mount` and waits until `client` is told
/// about `uri` one more time than before.
async fn remember_and_expect_update(writer: &Client, mount: &str, watcher: &Client, uri: &str) {
    let updates_of = |client: &Client| {
        client
            .service()
            .resource_updates()
            .iter()
            .filter(|seen| *seen == uri)
            .count()
    };
    let before = updates_of(watcher);
    ok_text(
        &call(
            writer,
            &format!("{mount}__remember"),
            json!({"key": "a", "value": "changed"}),
        )
        .await,
    );
    eventually(&format!("resources/updated for {uri}"), SETTLE, || async {
        (updates_of(watcher) > before).then_some(())
    })
    .await;
}

/// Two sessions subscribed to one URI: the shared upstream is subscribed
/// once, stays subscribed while either wants it, and is told to stop when
/// the last one ends (DELETE) or unsubscribes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_upstream_holds_a_subscription_while_some_session_wants_it() {
    let gateway = Gateway::start(&shared_config()).await;
    let uri = format!("shared+{NOTE}");
    let a = gateway.connect().await;
    let b = gateway.connect().await;
    let observer = gateway.connect().await;
    subscribe(&a, &uri).await;
    subscribe(&b, &uri).await;
    wait_until_held(&observer, "shared", &[NOTE]).await;
    remember_and_expect_update(&observer, "shared", &a, &uri).await;
    remember_and_expect_update(&observer, "shared", &b, &uri).await;
    assert!(
        observer.service().resource_updates().is_empty(),
        "a session that never subscribed was told: {:?}",
        observer.service().resource_updates()
    );

    // A ends; B still wants the note, so the upstream still tells.
    close(a).await;
    remember_and_expect_update(&observer, "shared", &b, &uri).await;
    assert_eq!(held(&observer, "shared").await.unwrap(), [NOTE]);

    // B, the last subscriber, ends: the upstream is told to stop.
    close(b).await;
    wait_until_held(&observer, "shared", &[]).await;

    // Unsubscribing, too, lets go once no session wants it.
    let c = gateway.connect().await;
    subscribe(&c, &uri).await;
    wait_until_held(&observer, "shared", &[NOTE]).await;
    unsubscribe(&c, &uri).await;
    assert_eq!(
        held(&observer, "shared").await.unwrap(),
        Vec::<String>::new()
    );
    close(c).await;
    close(observer).await;
}

/// rmcp serves requests before `notifications/initialized` (as the spec
/// allows; some clients send it alongside their first requests): a
/// subscription made then is the session's like any other, let go when
/// the session ends. It was answered as done and recorded nowhere, so the
/// upstream stayed subscribed for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_made_before_initialized_is_the_sessions() {
    let gateway = Gateway::start(&shared_config()).await;
    let observer = gateway.connect().await;
    let url = gateway.mcp_url();
    let http = reqwest::Client::new();
    let answer = raw::post(&http, &url, None, raw::JSON_POST, raw::INITIALIZE).await;
    let session = answer.session_id().expect("a session id");
    let subscribe = json!({
        "jsonrpc": "2.0", "id": 2, "method": "resources/subscribe",
        "params": { "uri": format!("shared+{NOTE}") },
    });
    let answer = raw::post(
        &http,
        &url,
        Some(&session),
        raw::JSON_POST,
        subscribe.to_string(),
    )
    .await;
    assert!(answer.body.get("result").is_some(), "{answer:?}");
    let answer = raw::post(
        &http,
        &url,
        Some(&session),
        raw::JSON_POST,
        raw::INITIALIZED,
    )
    .await;
    assert_eq!(answer.status, reqwest::StatusCode::ACCEPTED);
    wait_until_held(&observer, "shared", &[NOTE]).await;

    let ended = raw::delete_session(&http, &url, &session).await;
    assert!(ended.is_success(), "{ended}");
    wait_until_held(&observer, "shared", &[]).await;
    close(observer).await;
}

/// A shared upstream that restarts (its process killed) and one that a
/// reload replaces (its config changed) are each subscribed again to what
/// the sessions want, and the sessions keep getting their updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_shared_upstream_is_subscribed_to_what_sessions_want() {
    let (gateway, uri, subscriber, observer) = one_subscriber().await;

    // Restart: the process dies, the supervisor starts another.
    let first = call_pid(&observer, "shared__pid").await;
    kill(first);
    wait_until_held(&observer, "shared", &[NOTE]).await;
    let second = call_pid(&observer, "shared__pid").await;
    assert_ne!(first, second, "the upstream was not restarted");
    remember_and_expect_update(&observer, "shared", &subscriber, &uri).await;

    // Reload: the mount's config changes, a new mount (and process)
    // replaces it.
    let changed = format!(
        "{SERVER_TOML}{}",
        stdio_demo_mount("shared", "env = { SUBSCRIPTION_TEST_MARK = \"2\" }")
    );
    rewrite_config(&gateway.config_path, &changed);
    hang_up(&gateway);
    eventually("the reload to replace the upstream", SETTLE, || async {
        let params = rmcp::model::CallToolRequestParams::new("shared__pid");
        let result = observer.call_tool(params).await.ok()?;
        let pid: u32 = text(&result).parse().ok()?;
        (pid != second).then_some(())
    })
    .await;
    wait_until_held(&observer, "shared", &[NOTE]).await;
    remember_and_expect_update(&observer, "shared", &subscriber, &uri).await;

    close(subscriber).await;
    close(observer).await;
}

/// A per-session upstream whose process died is reopened on the session's
/// next call, subscribed again to what the session was subscribed to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_per_session_upstream_keeps_its_sessions_subscriptions() {
    let config = format!(
        "{SERVER_TOML}{}",
        stdio_demo_mount("own", "isolation = \"per_session\"")
    );
    let gateway = Gateway::start(&config).await;
    let uri = format!("own+{NOTE}");
    let client = gateway.connect().await;
    subscribe(&client, &uri).await;
    assert_eq!(held(&client, "own").await.unwrap(), [NOTE]);
    remember_and_expect_update(&client, "own", &client, &uri).await;

    let first = call_pid(&client, "own__pid").await;
    kill(first);
    wait_until_held(&client, "own", &[NOTE]).await;
    assert_ne!(call_pid(&client, "own__pid").await, first);
    remember_and_expect_update(&client, "own", &client, &uri).await;
    close(client).await;
}

/// The mount's `upstream_sessions` in `/status.json`.
async fn upstream_sessions(gateway: &Gateway, mount: &str) -> i64 {
    let status = status_json(gateway).await;
    status["mounts"]
        .as_array()
        .and_then(|mounts| mounts.iter().find(|m| m["name"] == mount))
        .and_then(|m| m["upstream_sessions"].as_i64())
        .unwrap_or_else(|| panic!("no {mount} in {status}"))
}

/// Unsubscribing from a per-session mount this session never used opens
/// no upstream for it (a new process only to unsubscribe).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribing_opens_no_per_session_upstream() {
    let gateway = Gateway::start(&format!(
        "{SERVER_TOML}{}",
        stdio_demo_mount("own", "isolation = \"per_session\"")
    ))
    .await;
    let client = gateway.connect().await;
    let before = upstream_sessions(&gateway, "own").await;
    unsubscribe(&client, &format!("own+{NOTE}")).await;
    assert_eq!(upstream_sessions(&gateway, "own").await, before);
    // A subscribe opens it (and this profile's discovery, if needed);
    // an unsubscribe then reaches it.
    subscribe(&client, &format!("own+{NOTE}")).await;
    assert!(upstream_sessions(&gateway, "own").await > before);
    unsubscribe(&client, &format!("own+{NOTE}")).await;
    close(client).await;
}

/// A reload that gives a mount another namespace leaves a session's
/// subscription under the URI it subscribed with: unsubscribing from that
/// URI still lets the upstream go. It was refused (-32002: the old URI no
/// longer resolves), and the upstream stayed subscribed for as long as the
/// session lived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribing_after_a_namespace_change_lets_the_upstream_go() {
    let (gateway, uri, subscriber, observer) = one_subscriber().await;
    rename_to_other(&gateway, &observer).await;
    unsubscribe(&subscriber, &uri).await;
    wait_until_held(&observer, "other", &[]).await;
    close(subscriber).await;
    close(observer).await;
}

/// After a reload gave a mount another namespace, a session subscribed
/// under the old one is still told of its resource's updates, under the
/// URI it subscribed with. They were matched by the URI under the new
/// namespace, which the session never subscribed to: none reached it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_reach_a_subscription_made_under_an_old_namespace() {
    let (gateway, uri, subscriber, observer) = one_subscriber().await;
    rename_to_other(&gateway, &observer).await;
    remember_and_expect_update(&observer, "other", &subscriber, &uri).await;
    close(subscriber).await;
    close(observer).await;
}

/// A reload that renames a mount but keeps its namespace leaves its URIs
/// as they were: a subscription follows its URI to the renamed mount, so
/// updates still come and an unsubscribe still lets the upstream go. The
/// subscription stayed with the removed mount: updates stopped without a
/// word, the unsubscribe failed ("the mount is no longer configured") and
/// the dead entry counted against the session's bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_follows_its_uri_to_a_renamed_mount() {
    let (gateway, uri, subscriber, observer) = one_subscriber().await;
    let renamed = format!(
        "{SERVER_TOML}{}",
        stdio_demo_mount("moved", "namespace = \"shared\"")
    );
    rewrite_config(&gateway.config_path, &renamed);
    eventually("the renamed mount to hold the note", SETTLE, || async {
        let log = gateway.proc.stderr.text();
        log.contains("removed=shared").then_some(())
    })
    .await;
    wait_until_held(&observer, "shared", &[NOTE]).await;
    remember_and_expect_update(&observer, "shared", &subscriber, &uri).await;
    unsubscribe(&subscriber, &uri).await;
    wait_until_held(&observer, "shared", &[]).await;
    close(subscriber).await;
    close(observer).await;
}

/// A reload that swaps two mounts' namespaces makes a subscribed URI name
/// the other mount's resource: the subscription moves with its URI, so
/// its session is told of the resource a read of that URI returns. It
/// stayed with its mount: the session was told of the other server's
/// note under that URI, and never of the one it reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_follows_its_uri_when_namespaces_are_swapped() {
    let config = |one: &str, two: &str| {
        format!(
            "{SERVER_TOML}{}{}",
            stdio_demo_mount("one", &format!("namespace = \"{one}\"")),
            stdio_demo_mount("two", &format!("namespace = \"{two}\""))
        )
    };
    let gateway = Gateway::start(&config("x", "y")).await;
    let uri = format!("x+{NOTE}");
    let subscriber = gateway.connect().await;
    let observer = gateway.connect().await;
    subscribe(&subscriber, &uri).await;
    wait_until_held(&observer, "x", &[NOTE]).await;

    rewrite_config(&gateway.config_path, &config("y", "x"));
    eventually("the swap to be applied", SETTLE, || async {
        let log = gateway.proc.stderr.text();
        log.contains("changed=one,two").then_some(())
    })
    .await;
    // `x` is mount `two` now; `one`, restarted as `y`, holds nothing.
    wait_until_held(&observer, "x", &[NOTE]).await;
    wait_until_held(&observer, "y", &[]).await;
    remember_and_expect_update(&observer, "x", &subscriber, &uri).await;
    close(subscriber).await;
    close(observer).await;
}

/// A URI to subscribe to is bounded (16 KiB): a subscription is kept for
/// the session's life, several times over, and held upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_to_an_overlong_uri_is_refused() {
    let gateway = Gateway::start(&shared_config()).await;
    let client = gateway.connect().await;
    let long = format!("shared+demo://notes/{}", "n".repeat(16 * 1024));
    let refused = within(
        "subscribing",
        client.subscribe(SubscribeRequestParams::new(&long)),
    )
    .await
    .expect_err("an overlong URI was subscribed to");
    let rmcp::service::ServiceError::McpError(error) = refused else {
        panic!("not a JSON-RPC error: {refused}");
    };
    assert_eq!(error.code.0, -32000, "{error:?}");
    assert!(error.message.contains("at most 16384 bytes"), "{error:?}");
    subscribe(&client, &format!("shared+{NOTE}")).await;
    close(client).await;
}

/// Subscribing again to what a session's own upstream already holds for
/// it is answered without asking the upstream again: a server refusing
/// the duplicate had the gateway drop the working subscription from its
/// registry, and its updates were never delivered after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribing_twice_keeps_a_per_session_subscription() {
    let gateway = Gateway::start(&format!(
        "{SERVER_TOML}{}",
        python_fixture_mount(
            "strict",
            "strict_subscriptions.py",
            "isolation = \"per_session\""
        )
    ))
    .await;
    let client = gateway.connect().await;
    let uri = "strict+note://a";
    subscribe(&client, uri).await;
    subscribe(&client, uri).await;
    let updates = || {
        client
            .service()
            .resource_updates()
            .iter()
            .filter(|seen| *seen == uri)
            .count()
    };
    ok_text(&call(&client, "strict__touch", json!({})).await);
    eventually("resources/updated", SETTLE, || async {
        (updates() > 0).then_some(())
    })
    .await;
    close(client).await;
}

/// Unsubscribing while a shared mount restarts (no upstream session live)
/// succeeds, and the next upstream session is not subscribed to the URI
/// again: the session's wish is gone with its answer. (It was refused
/// -32603, and the session stayed subscribed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsubscribing_while_the_mount_restarts_lets_go() {
    // A slow restart keeps the mount without a live session long enough
    // to unsubscribe meanwhile.
    let supervision = "[supervision]\nrestart_backoff = \"3s\"\nrestart_backoff_max = \"3s\"\n\n";
    let gateway = Gateway::start(&format!(
        "{SERVER_TOML}{supervision}{}",
        stdio_demo_mount("shared", "")
    ))
    .await;
    let uri = format!("shared+{NOTE}");
    let subscriber = gateway.connect().await;
    let observer = gateway.connect().await;
    subscribe(&subscriber, &uri).await;
    wait_until_held(&observer, "shared", &[NOTE]).await;

    kill(call_pid(&observer, "shared__pid").await);
    wait_state(&gateway, "shared", "degraded").await;
    unsubscribe(&subscriber, &uri).await;

    wait_state(&gateway, "shared", "ready").await;
    wait_until_held(&observer, "shared", &[]).await;
    close(subscriber).await;
    close(observer).await;
}

/// A server may name the sub-resource that changed (the spec: "might be a
/// sub-resource of the one that the client actually subscribed to"): a
/// session subscribed to `demo://notes` is told that `demo://notes/a`
/// changed, under the namespaced URI of the note, on shared and
/// per-session mounts alike, with the upstream's `_meta` (both were
/// dropped).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_resources_update_reaches_the_parents_subscribers_with_its_meta() {
    let gateway = Gateway::start(&format!(
        "{SERVER_TOML}{}{}",
        stdio_demo_mount("shared", ""),
        stdio_demo_mount("own", "isolation = \"per_session\"")
    ))
    .await;
    let client = gateway.connect().await;
    for mount in ["shared", "own"] {
        subscribe(&client, &format!("{mount}+demo://notes")).await;
        if mount == "shared" {
            wait_until_held(&client, mount, &["demo://notes"]).await;
        }
        let note = format!("{mount}+{NOTE}");
        let before = client.service().resource_updates().len();
        remember_and_expect_update(&client, mount, &client, &note).await;
        let updates = client.service().resource_updates().split_off(before);
        let metas = client.service().resource_updated_meta().split_off(before);
        // Told once, under the note's URI only, with the server's `_meta`.
        assert_eq!(updates, [note.as_str()], "{mount}");
        assert_eq!(metas, [Some(json!({"x-demo-key": "a"}))], "{mount}");
        unsubscribe(&client, &format!("{mount}+demo://notes")).await;
    }
    close(client).await;
}

/// A namespace change leaves a subscription under its old URI (as in
/// `updates_reach_a_subscription_made_under_an_old_namespace`) with a
/// pass-through mount configured too. That mount's fallback, which takes
/// any URI nothing claims, made the old URI look claimed elsewhere, and
/// the subscription ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_change_keeps_a_subscription_beside_a_pass_through_mount() {
    let config = |namespace: &str| {
        format!(
            "{SERVER_TOML}{}{}",
            stdio_demo_mount("shared", namespace),
            stdio_demo_mount("pt", "namespace = \"\"")
        )
    };
    let gateway = Gateway::start(&config("")).await;
    let uri = format!("shared+{NOTE}");
    let subscriber = gateway.connect().await;
    let observer = gateway.connect().await;
    subscribe(&subscriber, &uri).await;
    wait_until_held(&observer, "shared", &[NOTE]).await;
    rewrite_config(&gateway.config_path, &config("namespace = \"other\""));
    eventually("the namespace change to be applied", SETTLE, || async {
        gateway
            .proc
            .stderr
            .text()
            .contains("changed=shared")
            .then_some(())
    })
    .await;
    wait_until_held(&observer, "other", &[NOTE]).await;
    remember_and_expect_update(&observer, "other", &subscriber, &uri).await;
    close(subscriber).await;
    close(observer).await;
}

/// A subscription moved off a mount that keeps running (two pass-through
/// mounts offering the same URI, reordered, the second changed so that
/// it restarts) is let go of on the running mount's upstream, where no
/// session wants it any more. It stayed subscribed there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_moved_off_a_running_mount_is_let_go_there() {
    let (gateway, subscriber, observer) = subscribed_then_reordered(NOTE).await;
    eventually("the subscription to move", SETTLE, || async {
        let log = gateway.proc.stderr.text();
        log.contains("moved=1").then_some(())
    })
    .await;
    eventually("a to let the note go", SETTLE, || {
        held_by_pass_through(&observer, &[])
    })
    .await;
    close(subscriber).await;
    close(observer).await;
}

/// Two pass-through mounts `a` and `b` (`b` never offers `subscriptions`,
/// so that name always reaches `a`), a session subscribed to `uri` on
/// `a`; then a reload that puts `b` first and changes it (so that it
/// restarts), applied. Returns the gateway, the subscriber and an observer.
async fn subscribed_then_reordered(uri: &'static str) -> (Gateway, Client, Client) {
    let a = stdio_demo_mount("a", "namespace = \"\"");
    let b = |extra: &str| {
        stdio_demo_mount(
            "b",
            &format!("namespace = \"\"\nexclude_tools = [\"subscriptions\"]\n{extra}"),
        )
    };
    let gateway = Gateway::start(&format!("{SERVER_TOML}{a}{}", b(""))).await;
    let subscriber = gateway.connect().await;
    let observer = gateway.connect().await;
    subscribe(&subscriber, uri).await;
    let held = [uri];
    eventually("a to hold the subscription", SETTLE, || {
        held_by_pass_through(&observer, &held)
    })
    .await;
    rewrite_config(
        &gateway.config_path,
        &format!("{SERVER_TOML}{}{a}", b("env = { X = \"1\" }")),
    );
    eventually("the reorder to be applied", SETTLE, || async {
        let log = gateway.proc.stderr.text();
        log.contains("changed=b").then_some(())
    })
    .await;
    (gateway, subscriber, observer)
}

/// Whether what the pass-through mount that offers the `subscriptions`
/// tool holds, asked through `observer`, is `expected` (for `eventually`).
async fn held_by_pass_through(observer: &Client, expected: &[&str]) -> Option<()> {
    let params = rmcp::model::CallToolRequestParams::new("subscriptions");
    let result = within("subscriptions", observer.call_tool(params))
        .await
        .ok()?;
    let uris: Vec<String> = text(&result).lines().map(str::to_owned).collect();
    (uris == expected).then_some(())
}

/// Two pass-through mounts, a subscription to a URI neither lists
/// (`demo://notes`, all notes): the fallback takes it to the first.
/// Reordered (the second changed, so that it restarts), reads of that URI
/// reach the other mount: the subscription moves there, and the first
/// lets it go. It stayed on the first, its upstream holding it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_the_fallback_took_moves_when_pass_through_mounts_are_reordered() {
    let (_gateway, subscriber, observer) = subscribed_then_reordered("demo://notes").await;
    eventually("a to let all notes go", SETTLE, || {
        held_by_pass_through(&observer, &[])
    })
    .await;
    close(subscriber).await;
    close(observer).await;
}
