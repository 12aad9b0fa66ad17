//! Writing the translated mounts as a Junction TOML config.
//!
//! Hand-laid-out rather than serialized, so the file reads like one a
//! person wrote: a header saying where it came from, one `[mounts.NAME]`
//! table per server in the source's order with its original key noted when
//! it was renamed, disabled servers commented out, skipped ones named in a
//! comment. Every string is written as a one-line basic string with escapes, so
//! any value round-trips and none can break out of its line.

use super::server::{Mount, Transport};

/// One source entry's place in the output.
#[derive(Debug, Clone)]
pub enum Item {
    Mount {
        name: String,
        /// The key in the source.
        original: String,
        mount: Mount,
    },
    Skipped {
        /// Where the entry is in the source, e.g. `servers.legacy`.
        path: String,
        reason: String,
    },
}

/// The whole config file.
pub fn render(origin: &str, shape: &str, items: &[Item]) -> String {
    let origin = origin.replace(['\r', '\n'], " ");
    let mut out = format!(
        "# Junction config translated by `junction import` from {origin}\n\
         # ({shape}).\n\
         # Check it with: junction check --config FILE --connect\n\
         #\n\
         # isolation: \"shared\" runs one upstream for every client session;\n\
         # \"per_session\" gives each client session its own.\n"
    );
    for item in items {
        out.push('\n');
        match item {
            Item::Mount {
                name,
                original,
                mount,
            } => {
                if original != name {
                    out.push_str(&format!("# {} in the source\n", string(original)));
                }
                let table = table(name, mount);
                if mount.disabled {
                    out.push_str("# disabled in the source:\n");
                    for line in table.lines() {
                        out.push_str(&format!("# {line}\n"));
                    }
                } else {
                    out.push_str(&table);
                }
            }
            Item::Skipped { path, reason } => {
                let line = format!("{path} was not imported: {reason}");
                // A newline (in a key, say) would end the comment early.
                out.push_str(&format!("# {}\n", line.replace(['\r', '\n'], " ")));
            }
        }
    }
    out
}

/// `[mounts.NAME]` and its fields.
fn table(name: &str, mount: &Mount) -> String {
    let mut out = format!("[mounts.{}]\n", key(name));
    match &mount.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            out.push_str(&format!("command = {}\n", string(command)));
            if !args.is_empty() {
                let args: Vec<String> = args.iter().map(|arg| string(arg)).collect();
                out.push_str(&format!("args = [{}]\n", args.join(", ")));
            }
            if !env.is_empty() {
                out.push_str(&format!("env = {}\n", inline_table(env)));
            }
            if let Some(cwd) = cwd {
                out.push_str(&format!("cwd = {}\n", string(cwd)));
            }
        }
        Transport::Http {
            url,
            headers,
            legacy_sse,
        } => {
            out.push_str(&format!("url = {}\n", string(url)));
            if *legacy_sse {
                out.push_str("transport = \"sse\"\n");
            }
            if !headers.is_empty() {
                out.push_str(&format!("headers = {}\n", inline_table(headers)));
            }
        }
    }
    out.push_str("isolation = \"shared\"\n");
    out
}

fn inline_table(pairs: &[(String, String)]) -> String {
    let fields: Vec<String> = pairs
        .iter()
        .map(|(name, value)| format!("{} = {}", key(name), string(value)))
        .collect();
    format!("{{ {} }}", fields.join(", "))
}

/// `text` as a one-line TOML basic string. One line always, so it is also
/// safe inside a comment and valid as a quoted key.
fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML key: bare when it can be, quoted otherwise.
fn key(text: &str) -> String {
    let bare = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        text.to_owned()
    } else {
        string(text)
    }
}
