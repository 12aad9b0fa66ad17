//! Applies a mount's namespace to the URIs inside upstream results.
//!
//! Lists are rewritten by the catalog; this covers what flows through calls:
//! `resource_link` and embedded `resource` content in tool results and
//! prompt messages, `contents[].uri` of `resources/read`, and the UI an MCP
//! App names in `_meta` ([`qualify_ui_meta`]; the catalog applies it to
//! listed tools too). Everything else in a result (text,
//! `structuredContent`, the rest of `_meta`, `isError`) is left exactly as
//! the upstream sent it.

use rmcp::model::{
    CallToolResult, ContentBlock, GetPromptResult, JsonObject, ReadResourceResult, ResourceContents,
};
use serde_json::Value;

use crate::naming::{Namespace, UI_SCHEME};

pub fn qualify_tool_result(namespace: &Namespace, result: &mut CallToolResult) {
    if namespace.is_pass_through() {
        return;
    }
    for content in &mut result.content {
        qualify_content(namespace, content);
    }
    if let Some(meta) = result.meta.as_mut() {
        qualify_ui_meta(namespace, meta);
    }
}

/// An MCP App's UI: `_meta.ui.resourceUri` (or the older
/// `_meta["ui/resourceUri"]`, or the OpenAI Apps SDK's
/// `_meta["openai/outputTemplate"]`) on a tool, and on some servers' call
/// results, is the `ui://` URI the host reads next. It is qualified like the URI
/// the host finds in `resources/list`, so the read comes back to this
/// mount; other `_meta` is the upstream's.
pub fn qualify_ui_meta(namespace: &Namespace, meta: &mut JsonObject) {
    let qualify = |uri: Option<&mut Value>| {
        if let Some(Value::String(uri)) = uri {
            if uri.starts_with(UI_SCHEME) {
                *uri = namespace.qualify_uri(uri);
            }
        }
    };
    qualify(
        meta.get_mut("ui")
            .and_then(Value::as_object_mut)
            .and_then(|ui| ui.get_mut("resourceUri")),
    );
    qualify(meta.get_mut("ui/resourceUri"));
    qualify(meta.get_mut("openai/outputTemplate"));
}

pub fn qualify_prompt_result(namespace: &Namespace, result: &mut GetPromptResult) {
    if namespace.is_pass_through() {
        return;
    }
    for message in &mut result.messages {
        qualify_content(namespace, &mut message.content);
    }
}

pub fn qualify_read_result(namespace: &Namespace, result: &mut ReadResourceResult) {
    if namespace.is_pass_through() {
        return;
    }
    for contents in &mut result.contents {
        qualify_resource_contents(namespace, contents);
    }
}

pub fn qualify_content(namespace: &Namespace, content: &mut ContentBlock) {
    match content {
        ContentBlock::ResourceLink(link) => link.uri = namespace.qualify_uri(&link.uri),
        ContentBlock::Resource(embedded) => {
            qualify_resource_contents(namespace, &mut embedded.resource)
        }
        // Text, image, audio, and kinds newer than this build carry no URI
        // we know how to rewrite.
        _ => {}
    }
}

/// [`qualify_tool_result`] on a tool result as the upstream wrote it
/// (a task's, relayed as JSON): nothing else in it is read or changed,
/// content blocks of kinds this build does not know and numbers included.
pub fn qualify_tool_result_json(namespace: &Namespace, result: &mut Value) {
    if namespace.is_pass_through() {
        return;
    }
    let Some(result) = result.as_object_mut() else {
        return;
    };
    for block in result
        .get_mut("content")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        qualify_content_json(namespace, block);
    }
    if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
        qualify_ui_meta(namespace, meta);
    }
}

/// [`qualify_content`] on a content block as written.
fn qualify_content_json(namespace: &Namespace, block: &mut Value) {
    let uri = match block.get("type").and_then(Value::as_str) {
        Some("resource_link") => block.get_mut("uri"),
        Some("resource") => block.get_mut("resource").and_then(|r| r.get_mut("uri")),
        _ => None,
    };
    if let Some(Value::String(uri)) = uri {
        *uri = namespace.qualify_uri(uri);
    }
}

fn qualify_resource_contents(namespace: &Namespace, contents: &mut ResourceContents) {
    match contents {
        ResourceContents::TextResourceContents { uri, .. }
        | ResourceContents::BlobResourceContents { uri, .. } => {
            *uri = namespace.qualify_uri(uri);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{EmbeddedResource, PromptMessage, Resource, Role};
    use serde_json::json;

    use super::*;

    fn namespace() -> Namespace {
        Namespace::new("ev").unwrap()
    }

    #[test]
    fn an_apps_ui_is_qualified_where_hosts_look_for_it() {
        let mut meta: JsonObject = serde_json::from_value(json!({
            "ui": {"resourceUri": "ui://weather/forecast", "prefersBorder": true},
            "ui/resourceUri": "ui://weather/forecast",
            "openai/outputTemplate": "ui://widget/board.html",
            "other": "ui://left/alone",
        }))
        .unwrap();
        qualify_ui_meta(&namespace(), &mut meta);
        assert_eq!(
            Value::Object(meta),
            json!({
                "ui": {"resourceUri": "ui://ev/weather/forecast", "prefersBorder": true},
                "ui/resourceUri": "ui://ev/weather/forecast",
                "openai/outputTemplate": "ui://ev/widget/board.html",
                "other": "ui://left/alone",
            })
        );
    }

    #[test]
    fn tool_results_get_namespaced_links_and_keep_everything_else() {
        let mut result: CallToolResult = serde_json::from_value(json!({
            "content": [
                {"type": "text", "text": "see demo://a"},
                {"type": "resource_link", "uri": "demo://a", "name": "a"},
                {"type": "resource", "resource": {"uri": "demo://b", "text": "b"}},
                {"type": "resource", "resource": {"uri": "demo://c", "blob": "AA=="}}
            ],
            "structuredContent": {"uri": "demo://untouched"},
            "isError": true,
            "_meta": {"x": 1}
        }))
        .unwrap();
        qualify_tool_result(&namespace(), &mut result);
        assert_eq!(
            serde_json::to_value(&result).unwrap(),
            json!({
                "content": [
                    {"type": "text", "text": "see demo://a"},
                    {"type": "resource_link", "uri": "ev+demo://a", "name": "a"},
                    {"type": "resource", "resource": {"uri": "ev+demo://b", "text": "b"}},
                    {"type": "resource", "resource": {"uri": "ev+demo://c", "blob": "AA=="}}
                ],
                "structuredContent": {"uri": "demo://untouched"},
                "isError": true,
                "_meta": {"x": 1}
            })
        );
    }

    /// As written: the same rewrite, and nothing else touched, a block
    /// rmcp cannot read (a newer kind) and a number it would read as an
    /// `f32` (0.3 became 0.30000001192092896) included.
    #[test]
    fn tool_results_as_written_get_namespaced_links_and_keep_everything_else() {
        let written = json!({
            "content": [
                {"type": "text", "text": "see demo://a", "annotations": {"priority": 0.3}},
                {"type": "resource_link", "uri": "demo://a", "name": "a"},
                {"type": "video", "uri": "demo://v"},
                {"type": "resource", "resource": {"uri": "demo://b", "text": "b"}}
            ],
            "structuredContent": {"uri": "demo://untouched"},
            "_meta": {"ui": {"resourceUri": "ui://board"}, "x": 1}
        });
        let mut result = written.clone();
        qualify_tool_result_json(&namespace(), &mut result);
        assert_eq!(
            result,
            json!({
                "content": [
                    {"type": "text", "text": "see demo://a", "annotations": {"priority": 0.3}},
                    {"type": "resource_link", "uri": "ev+demo://a", "name": "a"},
                    {"type": "video", "uri": "demo://v"},
                    {"type": "resource", "resource": {"uri": "ev+demo://b", "text": "b"}}
                ],
                "structuredContent": {"uri": "demo://untouched"},
                "_meta": {"ui": {"resourceUri": "ui://ev/board"}, "x": 1}
            })
        );
        let mut untouched = written.clone();
        qualify_tool_result_json(&Namespace::new("").unwrap(), &mut untouched);
        assert_eq!(untouched, written);
    }

    #[test]
    fn prompt_messages_and_read_contents_are_namespaced() {
        let mut prompt = GetPromptResult::new(vec![
            PromptMessage::new(
                Role::User,
                ContentBlock::ResourceLink(Resource::new("demo://a", "a")),
            ),
            PromptMessage::new(
                Role::User,
                ContentBlock::Resource(EmbeddedResource::new(ResourceContents::text(
                    "x", "demo://b",
                ))),
            ),
        ]);
        qualify_prompt_result(&namespace(), &mut prompt);
        let json = serde_json::to_value(&prompt).unwrap();
        assert_eq!(json["messages"][0]["content"]["uri"], "ev+demo://a");
        assert_eq!(
            json["messages"][1]["content"]["resource"]["uri"],
            "ev+demo://b"
        );

        let mut read = ReadResourceResult::new(vec![ResourceContents::text("x", "demo://b")]);
        qualify_read_result(&namespace(), &mut read);
        let json = serde_json::to_value(&read).unwrap();
        assert_eq!(json["contents"][0]["uri"], "ev+demo://b");
    }

    #[test]
    fn pass_through_changes_nothing() {
        let mut read = ReadResourceResult::new(vec![ResourceContents::text("x", "demo://b")]);
        qualify_read_result(&Namespace::new("").unwrap(), &mut read);
        assert_eq!(
            serde_json::to_value(&read).unwrap()["contents"][0]["uri"],
            "demo://b"
        );
    }
}
