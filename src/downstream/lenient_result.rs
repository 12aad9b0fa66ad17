//! A tool's result that rmcp cannot read whole, read block by block.
//!
//! rmcp reads a `tools/call` result into its typed `CallToolResult`, and
//! one content block it cannot read (a kind a later spec adds, such as
//! `video`, or a known kind missing a field) failed the whole call: the
//! client got an error in place of the tool's output, all of it lost for
//! one block. Such a block is relayed instead as a text block holding the
//! block as written (its JSON), its `_meta` naming the kind it was
//! ([`UNREADABLE_KIND`]), so that the client and its model still see it;
//! the rest of the result is read as rmcp reads it (fields it does not
//! know are left out, as everywhere on rmcp's typed path).

use rmcp::model::{CallToolResult, ContentBlock};
use serde::Deserialize;
use serde_json::{json, Value};

/// The `_meta` key of a text block that stands for a block the gateway
/// could not read: the kind (`type`) that block said it was.
pub const UNREADABLE_KIND: &str = "junction/unreadable-content-type";

/// `written` (a `tools/call` result as the upstream wrote it) with each
/// content block rmcp cannot read made a text block; `None` if it is no
/// tool result even so.
pub fn read_leniently(written: &Value) -> Option<(CallToolResult, usize)> {
    let mut result = written.as_object()?.clone();
    let blocks = result.get_mut("content")?.as_array_mut()?;
    let mut replaced = 0;
    for block in blocks.iter_mut() {
        if ContentBlock::deserialize(&*block).is_err() {
            *block = as_text(block);
            replaced += 1;
        }
    }
    let result = serde_json::from_value(Value::Object(result)).ok()?;
    Some((result, replaced))
}

/// A text block holding `block` as written.
fn as_text(block: &Value) -> Value {
    let kind = block.get("type").cloned().unwrap_or(Value::Null);
    json!({
        "type": "text",
        "text": block.to_string(),
        "_meta": { UNREADABLE_KIND: kind },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each block rmcp cannot read becomes text holding it; the others,
    /// `isError` and `structuredContent` are kept.
    #[test]
    fn a_block_rmcp_cannot_read_is_relayed_as_text() {
        let written = json!({
            "content": [
                {"type": "text", "text": "before"},
                {"type": "video", "uri": "https://h/v.mp4", "mimeType": "video/mp4"},
                {"type": "image", "mimeType": "image/png"},
                {"type": "text", "text": "after"}
            ],
            "structuredContent": {"n": 1},
            "isError": false
        });
        assert!(serde_json::from_value::<CallToolResult>(written.clone()).is_err());
        let (result, replaced) = read_leniently(&written).expect("a tool result");
        assert_eq!(replaced, 2);
        let relayed = serde_json::to_value(&result).unwrap();
        let content = relayed["content"].as_array().unwrap();
        assert_eq!(content.len(), 4);
        assert_eq!(content[0]["text"], "before");
        assert_eq!(content[3]["text"], "after");
        assert_eq!(content[1]["type"], "text");
        assert_eq!(content[1]["_meta"][UNREADABLE_KIND], "video");
        let video: Value = serde_json::from_str(content[1]["text"].as_str().unwrap()).unwrap();
        assert_eq!(video, written["content"][1]);
        assert_eq!(content[2]["_meta"][UNREADABLE_KIND], "image");
        assert_eq!(relayed["structuredContent"], json!({"n": 1}));
        assert_eq!(relayed["isError"], false);
    }

    /// What is no tool result at all stays unread.
    #[test]
    fn no_content_list_is_no_tool_result() {
        assert!(read_leniently(&json!({"contents": []})).is_none());
        assert!(read_leniently(&json!({"content": "text"})).is_none());
        assert!(read_leniently(&json!([1])).is_none());
    }
}
