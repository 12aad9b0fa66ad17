//! `junction import FILE`: another MCP client's server list as a Junction
//! config.
//!
//! [`translate`] is pure: text in, TOML and a list of [`Issue`]s out. The
//! pieces: [`source`] recognizes the file's shape, [`server`] translates one
//! entry's fields, [`vars`] rewrites `${…}` references, [`mount_name`] makes
//! keys into mount names, [`emit`] writes the TOML. [`run`] reads the file,
//! prints the TOML on stdout and the issues on stderr, and picks the exit
//! code: 0 all translated, 1 something dropped or left for the user to set,
//! 2 the file is unreadable or not an MCP client config.

mod emit;
mod jsonc;
mod mount_name;
pub(crate) mod secrets;
mod server;
mod source;
mod vars;

#[cfg(test)]
mod tests;

use std::{fmt, path::Path};

use super::{print_stdout, Outcome};

/// Shown under `junction import --help`.
pub const EXAMPLES: &str = "\
Reads the \"mcpServers\" JSON of Claude Desktop (claude_desktop_config.json),
Claude Code (.mcp.json) and Cursor (~/.cursor/mcp.json), or VS Code's
.vscode/mcp.json (\"servers\" and \"inputs\"), and prints an equivalent
Junction TOML config on stdout (an \"sse\" server, or a URL ending in /sse
with no type, gets `transport = \"sse\"`). What cannot be carried over
(envFile, ${input:…} prompts, client-only settings) is reported on stderr. A token or key written as is in an `env` or `headers` entry, a URL,
or an argument (`--api-key sk-…`) is not copied: it becomes a ${VAR} to set before starting junction, so the
TOML can be kept and shared (a ConfigMap) without it.

Examples:
  junction import ~/.cursor/mcp.json > junction.toml
  junction import .vscode/mcp.json > junction.toml && junction check --config junction.toml --connect

Exit codes: 0 everything translated; 1 something was dropped or needs a
variable set (see stderr); 2 the file is unreadable or not such a config;
3 the output could not be written.";

/// How much an issue matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Translated, but worth knowing (a mount was renamed).
    Note,
    /// Not carried over, or carried over only if the user acts (sets a
    /// variable); makes the exit code 1.
    Lost,
}

/// One thing to tell the user about the translation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// Where in the source, e.g. `servers.github.envFile`.
    pub path: String,
    pub severity: Severity,
    pub message: String,
}

impl Issue {
    pub fn note(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            severity: Severity::Note,
            message: message.into(),
        }
    }

    pub fn lost(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            severity: Severity::Lost,
            message: message.into(),
        }
    }
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let label = match self.severity {
            Severity::Note => "note",
            Severity::Lost => "not translated",
        };
        write!(f, "{}: {label}: {}", self.path, self.message)
    }
}

/// The file as a whole cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidInput(pub String);

/// The result of translating one file.
#[derive(Debug, Clone)]
pub struct Translation {
    pub toml: String,
    pub issues: Vec<Issue>,
    /// Servers written as mounts (disabled ones included, commented out).
    pub imported: usize,
    /// Servers left out.
    pub skipped: usize,
}

impl Translation {
    /// Whether anything was lost.
    pub fn is_complete(&self) -> bool {
        self.issues
            .iter()
            .all(|issue| issue.severity == Severity::Note)
    }
}

/// Translates the client config `text`; `origin` names it in the output.
pub fn translate(text: &str, origin: &str) -> Result<Translation, InvalidInput> {
    let document = source::read(text)?;
    let mut issues = Vec::new();
    let mut items = Vec::new();
    let mut taken: Vec<String> = Vec::new();
    // A key that is a valid mount name already keeps it: another key that
    // only sanitizes to it (`brave_search` before `brave-search`) takes a
    // suffix instead, whatever the order in the file.
    let valid_keys: Vec<String> = document
        .entries
        .iter()
        .map(|entry| entry.key.clone())
        .filter(|key| crate::naming::is_valid_mount_name(key))
        .collect();
    let mut imported = 0;
    let mut skipped = 0;
    let mut variables = secrets::Variables::claiming_env_names(&document.entries);
    for entry in &document.entries {
        let mut entry_issues = Vec::new();
        match server::translate(entry, &document.inputs, &mut entry_issues, &mut variables) {
            Ok(mount) => {
                let name = if valid_keys.contains(&entry.key) && !taken.contains(&entry.key) {
                    entry.key.clone()
                } else {
                    let avoid: Vec<String> = taken.iter().chain(&valid_keys).cloned().collect();
                    mount_name::sanitize(&entry.key, &avoid)
                };
                if name != entry.key {
                    issues.push(Issue::note(
                        &entry.path,
                        format!(
                            "renamed to mount {name:?} (mount names must match ^[a-z][a-z0-9-]{{0,31}}$), so its tools and prompts appear as {name}__…"
                        ),
                    ));
                }
                if mount.disabled {
                    issues.push(Issue::note(
                        &entry.path,
                        "disabled in the source; written commented out",
                    ));
                }
                taken.push(name.clone());
                imported += 1;
                items.push(emit::Item::Mount {
                    name,
                    original: entry.key.clone(),
                    mount,
                });
            }
            Err(reason) => {
                // Field-level problems of an entry that is skipped anyway
                // would only be noise.
                entry_issues.clear();
                issues.push(Issue::lost(&entry.path, format!("not imported: {reason}")));
                skipped += 1;
                items.push(emit::Item::Skipped {
                    path: entry.path.clone(),
                    reason,
                });
            }
        }
        issues.append(&mut entry_issues);
    }
    Ok(Translation {
        toml: emit::render(origin, document.shape, &items),
        issues,
        imported,
        skipped,
    })
}

/// `junction import FILE`.
pub fn run(path: &Path) -> Outcome {
    let origin = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            crate::say_on_stderr!("junction import: {origin}: cannot read file: {error}");
            return Outcome::Invalid;
        }
    };
    let translation = match translate(&text, &origin) {
        Ok(translation) => translation,
        Err(error) => {
            crate::say_on_stderr!("junction import: {origin}: {error}");
            return Outcome::Invalid;
        }
    };
    if let Err(unwritten) = print_stdout(&translation.toml) {
        return unwritten;
    }
    for issue in &translation.issues {
        crate::say_on_stderr!("{origin}: {issue}");
    }
    let lost = translation
        .issues
        .iter()
        .filter(|issue| issue.severity == Severity::Lost)
        .count();
    let mut summary = format!(
        "junction import: {} of {} servers imported",
        translation.imported,
        translation.imported + translation.skipped
    );
    if lost > 0 {
        summary.push_str(&format!(
            "; {lost} {} not translated (listed above)",
            if lost == 1 { "thing" } else { "things" }
        ));
    }
    crate::say_on_stderr!("{summary}");
    if translation.is_complete() {
        Outcome::Ok
    } else {
        Outcome::Partial
    }
}
