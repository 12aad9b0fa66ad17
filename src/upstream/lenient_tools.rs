//! A `tools/list` page read tool by tool, when rmcp cannot read it whole.
//!
//! rmcp reads a page into its typed `ListToolsResult`, and one tool it
//! cannot read (no `inputSchema`, a schema that is not an object, a name
//! that is not text) fails the whole page: the mount's discovery failed
//! with "Unexpected response type", and none of its tools were offered.
//! From the page as the upstream wrote it (`raw.rs`), each tool is read on
//! its own instead: one without an `inputSchema` is given the empty
//! object schema (a tool that takes no arguments, which is what such
//! servers mean), and any other that cannot be read is left out, named in
//! a warning.

use rmcp::model::{ListToolsResult, Tool};
use serde_json::Value;

use crate::naming::MountName;

/// The page `raw` (a `tools/list` result as written), its readable tools
/// only; `None` if it has no list of tools at all.
pub fn read_page(raw: &Value, mount: &MountName) -> Option<ListToolsResult> {
    let tools = raw.get("tools")?.as_array()?;
    let next_cursor = raw
        .get("nextCursor")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut readable = Vec::with_capacity(tools.len());
    for (index, tool) in tools.iter().enumerate() {
        let shown_name = tool
            .get("name")
            .and_then(Value::as_str)
            .map_or_else(|| format!("#{index} of the page"), str::to_owned);
        let mut tool = tool.clone();
        if let Some(fields) = tool.as_object_mut() {
            if fields.get("inputSchema").is_none_or(Value::is_null) {
                tracing::warn!(%mount, tool = %shown_name, "the upstream lists a tool without an inputSchema; offered as taking no arguments");
                fields.insert(
                    "inputSchema".to_owned(),
                    serde_json::json!({ "type": "object" }),
                );
            }
        }
        match serde_json::from_value::<Tool>(tool) {
            Ok(tool) => readable.push(tool),
            Err(error) => {
                tracing::warn!(%mount, tool = %shown_name, %error, "the upstream lists a tool that cannot be read; it is left out")
            }
        }
    }
    let mut page = ListToolsResult::with_all_items(readable);
    page.next_cursor = next_cursor;
    Some(page)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_tool_is_read_on_its_own() {
        let mount = MountName::new("m").unwrap();
        let raw = json!({
            "tools": [
                {"name": "fine", "inputSchema": {"type": "object"}},
                {"name": "no_schema"},
                {"name": "null_schema", "inputSchema": null},
                {"name": "text_schema", "inputSchema": "object"},
                {"name": 7, "inputSchema": {"type": "object"}},
                "not a tool",
            ],
            "nextCursor": "page-2",
        });
        let page = read_page(&raw, &mount).expect("a page");
        let names: Vec<&str> = page.tools.iter().map(|tool| tool.name.as_ref()).collect();
        assert_eq!(names, ["fine", "no_schema", "null_schema"]);
        assert_eq!(
            serde_json::to_value(&*page.tools[1].input_schema).unwrap(),
            json!({"type": "object"})
        );
        assert_eq!(page.next_cursor.as_deref(), Some("page-2"));
        assert!(read_page(&json!({"tools": "none"}), &mount).is_none());
    }
}
