//! Applies a mount's namespace to the URIs inside upstream results.
//!
//! Lists are rewritten by the catalog; this covers what flows through calls:
//! `resource_link` and embedded `resource` content in tool results and
//! prompt messages, and `contents[].uri` of `resources/read`. Everything
//! else in a result (text, `structuredContent`, `_meta`, `isError`) is left
//! exactly as the upstream sent it.

use rmcp::model::{
    CallToolResult, ContentBlock, GetPromptResult, ReadResourceResult, ResourceContents,
};

use crate::naming::Namespace;

pub fn qualify_tool_result(namespace: &Namespace, result: &mut CallToolResult) {
    if namespace.is_pass_through() {
        return;
    }
    for content in &mut result.content {
        qualify_content(namespace, content);
    }
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
