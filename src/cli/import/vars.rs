//! `${…}` references in imported strings, rewritten into Junction's
//! `${ENV_VAR}` syntax.
//!
//! The clients disagree: Claude Code expands `${VAR}` and `${VAR:-default}`
//! from the environment; VS Code and Cursor have `${env:VAR}`,
//! `${userHome}`, `${workspaceFolder}` and VS Code's `${input:ID}` (a
//! prompt, often for a secret). Junction reads only the environment and
//! treats an unset variable as a config error, so what has an environment
//! equivalent is translated silently and everything else becomes an
//! environment variable the user must set, reported as [`Lost`]. A text
//! that would mean something else to Junction (an unclosed `${`) is
//! escaped as `$${`.
//!
//! [`Lost`]: super::Severity::Lost

use std::collections::HashMap;

use super::Issue;
use crate::config::is_variable_name;

/// A VS Code `inputs` entry, for naming it in the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Input {
    pub description: Option<String>,
    pub password: bool,
}

/// Inputs by id.
pub type Inputs = HashMap<String, Input>;

/// VS Code / Cursor variables that name something about the editor, with
/// no value outside it.
const EDITOR_VARIABLES: [&str; 10] = [
    "workspaceFolder",
    "workspaceFolderBasename",
    "workspaceRoot",
    "fileWorkspaceFolder",
    "file",
    "fileDirname",
    "relativeFile",
    "cwd",
    "execPath",
    "selectedText",
];

/// Rewrites every `${…}` in `text` (found at `path` in the source),
/// recording what could not be carried over in `issues`.
pub fn translate(text: &str, inputs: &Inputs, path: &str, issues: &mut Vec<Issue>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let body_and_rest = &rest[start + 2..];
        let Some(close) = body_and_rest.find('}') else {
            // Not a reference for the source client either: keep the text.
            out.push_str("$${");
            rest = body_and_rest;
            continue;
        };
        let body = &body_and_rest[..close];
        out.push_str(&reference(body, inputs, path, issues));
        rest = &body_and_rest[close + 1..];
    }
    out.push_str(rest);
    out
}

/// The Junction text for one `${body}`.
fn reference(body: &str, inputs: &Inputs, path: &str, issues: &mut Vec<Issue>) -> String {
    let original = format!("${{{body}}}");
    if let Some(id) = body.strip_prefix("input:") {
        let variable = env_name(id);
        let prompt = match inputs.get(id) {
            Some(Input {
                description: Some(description),
                password,
            }) => format!(
                " (VS Code prompts for {}{description:?})",
                if *password { "secret " } else { "" }
            ),
            Some(_) => " (a VS Code input)".to_owned(),
            None => " (an input not defined under \"inputs\")".to_owned(),
        };
        issues.push(Issue::lost(
            path,
            format!(
                "{original}{prompt} became ${{{variable}}}: Junction reads it from its environment, so set {variable} before starting junction"
            ),
        ));
        return format!("${{{variable}}}");
    }
    if let Some(name) = body.strip_prefix("env:") {
        if is_variable_name(name) {
            return format!("${{{name}}}");
        }
    }
    if body == "userHome" {
        return "${HOME}".to_owned();
    }
    if body == "pathSeparator" || body == "/" {
        return "/".to_owned();
    }
    if EDITOR_VARIABLES.contains(&body) {
        let variable = env_name(body);
        issues.push(Issue::lost(
            path,
            format!(
                "{original} is an editor variable with no value outside the editor; it became ${{{variable}}}: set {variable} before starting junction, or write the path itself"
            ),
        ));
        return format!("${{{variable}}}");
    }
    if is_variable_name(body) {
        return original;
    }
    if let Some((name, _default)) = body.split_once(":-") {
        if is_variable_name(name) {
            issues.push(Issue::lost(
                path,
                format!(
                    "${{{name}:-…}}: Junction has no defaults for variables, so {name} must be set (its default was dropped; not shown here, as it may be a secret)"
                ),
            ));
            return format!("${{{name}}}");
        }
    }
    issues.push(Issue::lost(
        path,
        format!("{original} has no Junction equivalent; it is kept as literal text"),
    ));
    format!("$${{{body}}}")
}

/// An environment variable name for an input id or editor variable:
/// `github-token` → `GITHUB_TOKEN`, `workspaceFolder` → `WORKSPACE_FOLDER`.
pub fn env_name(id: &str) -> String {
    let mut out = String::new();
    let mut previous_lower = false;
    for c in id.chars() {
        if c.is_ascii_alphanumeric() {
            if c.is_ascii_uppercase() && previous_lower {
                out.push('_');
            }
            out.push(c.to_ascii_uppercase());
            previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        } else {
            if !out.ends_with('_') {
                out.push('_');
            }
            previous_lower = false;
        }
    }
    let out = out.trim_matches('_').to_owned();
    if out.is_empty() {
        "INPUT".to_owned()
    } else if out.starts_with(|c: char| c.is_ascii_digit()) {
        format!("INPUT_{out}")
    } else {
        out
    }
}
