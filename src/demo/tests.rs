//! Demo server tests: each runs the server in-process against an rmcp
//! client over an in-memory duplex pipe.
use std::time::Duration;

use rmcp::{
    model::{CallToolRequestParams, JsonObject},
    service::RunningService,
    RoleClient,
};

use super::*;

const LIMIT: Duration = Duration::from_secs(10);

type Client = RunningService<RoleClient, ()>;

/// Run a fresh DemoServer in-process and connect an rmcp client to it.
async fn connect() -> Client {
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(server) = DemoServer::new().serve(server_io).await {
            let _ = server.waiting().await;
        }
    });
    tokio::time::timeout(LIMIT, ().serve(client_io))
        .await
        .expect("client handshake timed out")
        .expect("client handshake failed")
}

async fn call(client: &Client, name: &'static str, args: serde_json::Value) -> CallToolResult {
    let mut params = CallToolRequestParams::new(name);
    if let serde_json::Value::Object(map) = args {
        params = params.with_arguments(JsonObject::from_iter(map));
    }
    tokio::time::timeout(LIMIT, client.call_tool(params))
        .await
        .expect("tool call timed out")
        .expect("tool call failed")
}

fn text(result: &CallToolResult) -> &str {
    &result.content[0]
        .as_text()
        .expect("first content is text")
        .text
}

#[tokio::test]
async fn lists_all_tools() {
    let client = connect().await;
    let tools = tokio::time::timeout(LIMIT, client.list_all_tools())
        .await
        .unwrap()
        .unwrap();
    let mut names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "add",
            "cancellations",
            "client_capabilities",
            "counter",
            "echo",
            "fail",
            "links",
            "log",
            "log_level",
            "meta",
            "pid",
            "recall",
            "remember",
            "roots",
            "sessions",
            "slow",
            "subscriptions",
            "toggle_bonus"
        ]
    );
    let add = tools.iter().find(|t| t.name == "add").unwrap();
    assert!(add.output_schema.is_some());
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn toggle_bonus_lists_the_bonus_tool() {
    let client = connect().await;
    let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        tools.iter().map(|t| t.name.to_string()).collect()
    };
    let before = names(client.list_all_tools().await.unwrap());
    assert!(!before.contains(&"bonus".to_owned()));
    client
        .call_tool(CallToolRequestParams::new("toggle_bonus"))
        .await
        .unwrap();
    let after = names(client.list_all_tools().await.unwrap());
    assert!(after.contains(&"bonus".to_owned()), "{after:?}");
    let prompts = client.list_all_prompts().await.unwrap();
    assert!(prompts.iter().any(|p| p.name == "bonus"), "{prompts:?}");
    let resources = client.list_all_resources().await.unwrap();
    assert!(
        resources.iter().any(|r| r.uri == "demo://bonus"),
        "{resources:?}"
    );
}

#[tokio::test]
async fn the_bonus_prompt_and_resource_are_there_only_when_enabled() {
    let client = connect().await;
    let prompts = client.list_all_prompts().await.unwrap();
    assert!(!prompts.iter().any(|p| p.name == "bonus"), "{prompts:?}");
    let prompt = || client.get_prompt(rmcp::model::GetPromptRequestParams::new("bonus"));
    let read = || client.read_resource(rmcp::model::ReadResourceRequestParams::new("demo://bonus"));
    assert!(prompt().await.is_err());
    assert!(read().await.is_err());
    client
        .call_tool(CallToolRequestParams::new("toggle_bonus"))
        .await
        .unwrap();
    assert!(prompt().await.is_ok());
    assert!(read().await.is_ok());
}

#[tokio::test]
async fn add_and_echo() {
    let client = connect().await;
    let result = call(&client, "add", serde_json::json!({"a": 2, "b": 3})).await;
    assert_eq!(text(&result), "5");
    assert_eq!(
        result.structured_content,
        Some(serde_json::json!({"sum": 5}))
    );
    let result = call(&client, "add", serde_json::json!({"a": 0.5, "b": 1})).await;
    assert_eq!(text(&result), "1.5");
    let result = call(&client, "echo", serde_json::json!({"message": "hi"})).await;
    assert_eq!(text(&result), "hi");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn counter_counts_and_fail_fails() {
    let client = connect().await;
    let null = serde_json::Value::Null;
    assert_eq!(text(&call(&client, "counter", null.clone()).await), "1");
    assert_eq!(text(&call(&client, "counter", null.clone()).await), "2");
    let failed = call(&client, "fail", null).await;
    assert_eq!(failed.is_error, Some(true));
    assert_eq!(text(&failed), "failed on purpose");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn recall_after_remember() {
    let client = connect().await;
    let missing = call(&client, "recall", serde_json::json!({"key": "k"})).await;
    assert_eq!(missing.is_error, Some(true));
    assert_eq!(text(&missing), "no value for k");
    let stored = call(
        &client,
        "remember",
        serde_json::json!({"key": "k", "value": "v"}),
    )
    .await;
    assert_eq!(text(&stored), "stored k");
    let found = call(&client, "recall", serde_json::json!({"key": "k"})).await;
    assert_ne!(found.is_error, Some(true));
    assert_eq!(text(&found), "v");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn links_carry_both_uris() {
    let client = connect().await;
    let result = call(&client, "links", serde_json::Value::Null).await;
    let link = result.content[0].as_resource_link().expect("resource_link");
    assert_eq!(link.uri, "demo://readme");
    assert_eq!(link.name, "readme");
    assert_eq!(link.mime_type.as_deref(), Some("text/plain"));
    let embedded = result.content[1].as_resource().expect("embedded resource");
    let ResourceContents::TextResourceContents { uri, .. } = &embedded.resource else {
        panic!("expected text contents");
    };
    assert_eq!(uri, "demo://notes/hello");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn resources_and_prompt() {
    let client = connect().await;
    let read = |uri: &str| {
        tokio::time::timeout(
            LIMIT,
            client.read_resource(ReadResourceRequestParams::new(uri)),
        )
    };
    let contents_text = |r: ReadResourceResult| match &r.contents[0] {
        ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("expected text, got {other:?}"),
    };

    let before = read("demo://notes/x").await.unwrap().unwrap();
    assert_eq!(contents_text(before), "(empty)");
    call(
        &client,
        "remember",
        serde_json::json!({"key": "x", "value": "ten"}),
    )
    .await;
    let after = read("demo://notes/x").await.unwrap().unwrap();
    assert_eq!(contents_text(after), "ten");
    assert!(read("demo://nope").await.unwrap().is_err());

    let resources = client.list_all_resources().await.unwrap();
    assert_eq!(resources[0].uri, "demo://readme");
    let templates = client.list_all_resource_templates().await.unwrap();
    assert_eq!(templates[0].uri_template, "demo://notes/{key}");

    let mut args = JsonObject::new();
    args.insert("name".into(), "Ada".into());
    let prompt = client
        .get_prompt(rmcp::model::GetPromptRequestParams::new("greet").with_arguments(args))
        .await
        .unwrap();
    assert_eq!(
        prompt.messages[0].content.as_text().unwrap().text,
        "Say hello to Ada."
    );
    let embedded = prompt.messages[1].content.as_resource().unwrap();
    assert!(matches!(
        &embedded.resource,
        ResourceContents::TextResourceContents { uri, .. } if uri == "demo://readme"
    ));
    client.cancel().await.unwrap();
}

/// A `slow` call with a progress token still answers when its client
/// closes the server's input mid-call (as a gateway retiring the server
/// does: EOF, then a wait before SIGTERM): rmcp no longer confirmed the
/// progress notification, and the call hung there, unanswered, until
/// rmcp gave up on it.
#[tokio::test]
async fn a_slow_call_with_progress_answers_after_its_input_closes() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let (server_io, client_io) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(async move {
        if let Ok(server) = DemoServer::new().serve(server_io).await {
            let _ = server.waiting().await;
        }
    });
    let (read, mut write) = tokio::io::split(client_io);
    let mut lines = BufReader::new(read).lines();
    for message in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"_meta":{"progressToken":8},"name":"slow","arguments":{"steps":1,"delay_ms":500}}}"#,
    ] {
        write
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
    }
    let initialized = tokio::time::timeout(LIMIT, lines.next_line()).await;
    assert!(matches!(initialized, Ok(Ok(Some(_)))), "{initialized:?}");
    write.shutdown().await.unwrap();
    drop(write);
    let answer = tokio::time::timeout(LIMIT, async {
        while let Some(line) = lines.next_line().await.ok().flatten() {
            let message: serde_json::Value = serde_json::from_str(&line).unwrap();
            if message["id"] == 2 {
                return Some(message);
            }
        }
        None
    })
    .await;
    let answer = answer.ok().flatten().expect("the call's answer");
    assert_eq!(
        answer["result"]["content"][0]["text"], "done after 1 steps",
        "{answer}"
    );
    server.abort();
}
