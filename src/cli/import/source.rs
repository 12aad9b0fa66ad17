//! Reading another client's MCP config file: which shape it is, its server
//! entries in file order, and VS Code's `inputs`.
//!
//! Shapes: `{"mcpServers": {…}}` (Claude Desktop, Claude Code's
//! `.mcp.json`, Cursor's `mcp.json`), `{"servers": {…}, "inputs": […]}`
//! (VS Code's `.vscode/mcp.json`) and `{"mcp": {"servers": {…}}}` (VS Code's
//! `settings.json`). Other top-level keys belong to the client (a whole
//! Claude Desktop config has app preferences too) and are ignored. Anything
//! that makes the file unusable as a whole is an [`InvalidInput`]; problems
//! of one entry are left to [`super::server`].

use serde_json::{Map, Value};

use super::{
    jsonc,
    vars::{Input, Inputs},
    InvalidInput,
};

/// One server entry as written.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The key under the servers object, e.g. `"GitHub Tools"`.
    pub key: String,
    /// Where it is in the file, e.g. `mcpServers.GitHub Tools`.
    pub path: String,
    pub value: Value,
}

/// The servers of one file.
#[derive(Debug, Clone)]
pub struct Document {
    /// Which clients write this shape, for the header of the output.
    pub shape: &'static str,
    pub entries: Vec<Entry>,
    pub inputs: Inputs,
}

/// Parses `text` (JSON, comments and trailing commas allowed).
pub fn read(text: &str) -> Result<Document, InvalidInput> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let root: Value = serde_json::from_str(&jsonc::strip(text))
        .map_err(|error| InvalidInput(format!("not valid JSON: {error}")))?;
    let Value::Object(root) = root else {
        return Err(InvalidInput(
            "expected a JSON object at the top level".to_owned(),
        ));
    };
    let (shape, path, servers) = if let Some(servers) = root.get("mcpServers") {
        (
            "the \"mcpServers\" shape of Claude Desktop, Claude Code and Cursor",
            "mcpServers",
            servers,
        )
    } else if let Some(servers) = root.get("servers") {
        (
            "the \"servers\" shape of VS Code's mcp.json",
            "servers",
            servers,
        )
    } else if let Some(servers) = root.get("mcp").and_then(|mcp| mcp.get("servers")) {
        (
            "the \"mcp.servers\" shape of VS Code's settings.json",
            "mcp.servers",
            servers,
        )
    } else {
        return Err(InvalidInput(
            "no servers found: expected a top-level \"mcpServers\" object (Claude Desktop, Claude Code, Cursor) or \"servers\" object (VS Code)".to_owned(),
        ));
    };
    let Value::Object(servers) = servers else {
        return Err(InvalidInput(format!(
            "{path}: expected an object of servers by name, found {}",
            kind_of(servers)
        )));
    };
    let entries = servers
        .iter()
        .map(|(key, value)| Entry {
            key: key.clone(),
            path: format!("{path}.{key}"),
            value: value.clone(),
        })
        .collect();
    // settings.json keeps its `inputs` beside its servers, under `mcp`.
    let inputs_home = match path {
        "mcp.servers" => root.get("mcp").and_then(Value::as_object).unwrap_or(&root),
        _ => &root,
    };
    Ok(Document {
        shape,
        entries,
        inputs: inputs(inputs_home),
    })
}

/// VS Code's `inputs`: `[{"id", "type", "description", "password"}]`.
/// Malformed entries are skipped: they only improve the report's wording.
fn inputs(root: &Map<String, Value>) -> Inputs {
    let Some(Value::Array(items)) = root.get("inputs") else {
        return Inputs::new();
    };
    items
        .iter()
        .filter_map(|item| {
            let id = item.get("id")?.as_str()?.to_owned();
            let input = Input {
                description: item
                    .get("description")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                password: item
                    .get("password")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            };
            Some((id, input))
        })
        .collect()
}

/// "a string", "an array", … for messages about the wrong kind of value.
pub fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
