//! One client server entry → the fields of one Junction mount.
//!
//! The transport comes from `type` (`stdio`, `http`; Cursor leaves it out
//! and has `command` or `url`). `sse` cannot be mounted: Junction speaks
//! stdio and Streamable HTTP upstreams. A field with no Junction equivalent
//! (`envFile`, client-only settings) is dropped and reported; an entry that
//! cannot become a working mount at all is an `Err` with the reason, and the
//! caller skips it. Every string goes through [`super::vars`].

use serde_json::{Map, Value};

use super::secrets::Variables;
use super::{
    source::{kind_of, Entry},
    vars::{self, Inputs},
    Issue,
};

/// A mount's transport, strings already in Junction syntax, maps in source
/// order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        cwd: Option<String>,
    },
    Http {
        url: String,
        headers: Vec<(String, String)>,
        /// The older HTTP+SSE transport (`transport = "sse"`).
        legacy_sse: bool,
    },
}

/// What an entry becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub transport: Transport,
    /// `"disabled": true` in the source: written commented out.
    pub disabled: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Stdio,
    Http,
    /// Said to be the older HTTP+SSE transport.
    Sse,
}

/// Fields this translation reads; any other field is reported as dropped.
const KNOWN_FIELDS: [&str; 9] = [
    "type", "command", "args", "env", "cwd", "envFile", "url", "headers", "disabled",
];

/// Translates `entry`; `Err` is why it cannot be mounted.
pub fn translate(
    entry: &Entry,
    inputs: &Inputs,
    issues: &mut Vec<Issue>,
    variables: &mut Variables,
) -> Result<Mount, String> {
    let Value::Object(fields) = &entry.value else {
        return Err(format!(
            "expected an object with `command` or `url`, found {}",
            kind_of(&entry.value)
        ));
    };
    let path = &entry.path;
    let kind = transport_kind(fields)?;
    let disabled = match fields.get("disabled") {
        None => false,
        Some(Value::Bool(disabled)) => *disabled,
        Some(other) => {
            issues.push(Issue::lost(
                format!("{path}.disabled"),
                format!("expected true or false, found {}; ignored", kind_of(other)),
            ));
            false
        }
    };
    for key in fields.keys() {
        if !KNOWN_FIELDS.contains(&key.as_str()) {
            issues.push(Issue::lost(
                format!("{path}.{key}"),
                "has no Junction equivalent; dropped",
            ));
        }
    }
    let transport = match kind {
        Kind::Stdio => stdio(fields, &entry.key, path, inputs, issues, variables)?,
        Kind::Http => http(fields, &entry.key, path, inputs, issues, variables, false)?,
        Kind::Sse => http(fields, &entry.key, path, inputs, issues, variables, true)?,
    };
    Ok(Mount {
        transport,
        disabled,
    })
}

fn transport_kind(fields: &Map<String, Value>) -> Result<Kind, String> {
    match fields.get("type") {
        None if fields.contains_key("command") => Ok(Kind::Stdio),
        None if fields.contains_key("url") => Ok(Kind::Http),
        None => Err("has neither `command` (a local server) nor `url` (a remote server)".to_owned()),
        Some(Value::String(kind)) => match kind.as_str() {
            "stdio" => Ok(Kind::Stdio),
            "http" | "streamable-http" | "streamable_http" | "streamableHttp" => Ok(Kind::Http),
            "sse" => Ok(Kind::Sse),
            other => Err(format!(
                "type {other:?} is not a transport Junction knows (use \"stdio\", \"http\" or \"sse\")"
            )),
        },
        Some(other) => Err(format!("`type` must be a string, found {}", kind_of(other))),
    }
}

fn stdio(
    fields: &Map<String, Value>,
    server: &str,
    path: &str,
    inputs: &Inputs,
    issues: &mut Vec<Issue>,
    variables: &mut Variables,
) -> Result<Transport, String> {
    let command = match fields.get("command") {
        Some(Value::String(command)) if !command.trim().is_empty() => {
            vars::translate(command, inputs, &format!("{path}.command"), issues)
        }
        Some(Value::String(_)) => return Err("`command` is empty".to_owned()),
        Some(other) => {
            return Err(format!(
                "`command` must be a string, found {}",
                kind_of(other)
            ))
        }
        None => return Err("a stdio server needs `command`".to_owned()),
    };
    let args = match fields.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => {
            let mut args = Vec::new();
            for (index, item) in items.iter().enumerate() {
                let item_path = format!("{path}.args.{index}");
                match scalar_text(item) {
                    Some(text) => args.push(vars::translate(&text, inputs, &item_path, issues)),
                    // A missing argument would change what the server does.
                    None => {
                        return Err(format!(
                            "args.{index} must be a string, found {}",
                            kind_of(item)
                        ))
                    }
                }
            }
            args
        }
        Some(other) => return Err(format!("`args` must be an array, found {}", kind_of(other))),
    };
    // Env variables keep their names (no server's in them, unless another
    // server's of that name holds another value), which the arguments'
    // variables step around.
    let env = string_map(fields, "env", (server, path), inputs, issues, variables)?;
    // A token passed as an argument (`--api-key sk-…`) is moved out as
    // one in `env` is.
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut kept_out = super::secrets::ArgsKeptOut {
        server,
        path,
        issues,
        variables,
        command: false,
    };
    let args = crate::cli::secret_args::rewrite_secrets(&words, &mut kept_out);
    // A command written with settings before it (`TOKEN=… npx`, which
    // only a shell runs) keeps its secrets out too.
    kept_out.command = true;
    let command = crate::cli::secret_args::rewrite_secrets(&[&command], &mut kept_out)
        .pop()
        .unwrap_or(command);
    let cwd = match fields.get("cwd") {
        None | Some(Value::Null) => None,
        Some(Value::String(cwd)) => {
            Some(vars::translate(cwd, inputs, &format!("{path}.cwd"), issues))
        }
        Some(other) => {
            issues.push(Issue::lost(
                format!("{path}.cwd"),
                format!("expected a string, found {}; dropped", kind_of(other)),
            ));
            None
        }
    };
    if fields.contains_key("envFile") {
        issues.push(Issue::lost(
            format!("{path}.envFile"),
            "Junction does not read env files; dropped: copy its variables into `env`, or export them before starting junction and refer to them as ${NAME}",
        ));
    }
    for field in ["url", "headers"] {
        if fields.contains_key(field) {
            issues.push(Issue::lost(
                format!("{path}.{field}"),
                "a stdio server takes no `url` or `headers`; dropped",
            ));
        }
    }
    Ok(Transport::Stdio {
        command,
        args,
        env,
        cwd,
    })
}

/// A remote server `server` (its key in the source) at `path`.
fn http(
    fields: &Map<String, Value>,
    server: &str,
    path: &str,
    inputs: &Inputs,
    issues: &mut Vec<Issue>,
    variables: &mut Variables,
    said_sse: bool,
) -> Result<Transport, String> {
    let mut legacy_sse = said_sse;
    let url = match fields.get("url") {
        Some(Value::String(url)) => super::secrets::url_kept_out(
            server,
            vars::translate(url, inputs, &format!("{path}.url"), issues),
            &format!("{path}.url"),
            issues,
            variables,
        ),
        Some(other) => return Err(format!("`url` must be a string, found {}", kind_of(other))),
        None => return Err("a remote server needs `url`".to_owned()),
    };
    // With a variable in it the URL is only known at load; `junction
    // check` will judge it then.
    if !url.contains('$') {
        match url::Url::parse(&url) {
            Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {
                // Cursor's files say nothing of the transport (Cursor
                // tries both); a URL ending in /sse is the old one's
                // usual address.
                if !fields.contains_key("type")
                    && parsed.path().trim_end_matches('/').ends_with("/sse")
                {
                    legacy_sse = true;
                    issues.push(Issue::note(
                        format!("{path}.url"),
                        "ends in /sse, the usual address of the older HTTP+SSE transport: imported with `transport = \"sse\"` (if the server speaks Streamable HTTP there, remove that line; `junction check --connect` will tell)",
                    ));
                }
            }
            Ok(parsed) => {
                return Err(format!(
                    "url {:?} has scheme {:?}; Junction connects over http or https",
                    crate::cli::check::masked_url(&url),
                    parsed.scheme()
                ))
            }
            Err(error) => {
                return Err(format!(
                    "url {:?} is not a URL: {error}",
                    crate::cli::check::masked_url(&url)
                ))
            }
        }
    }
    let mut headers = string_map(fields, "headers", (server, path), inputs, issues, variables)?;
    headers.retain(|(name, value)| {
        let problem = if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            "is not a valid HTTP header name; dropped"
        } else if reqwest::header::HeaderValue::from_str(value).is_err() {
            // Not echoed: a header's value is likely a secret.
            "value is not a valid HTTP header value; dropped"
        } else {
            return true;
        };
        issues.push(Issue::lost(format!("{path}.headers.{name}"), problem));
        false
    });
    for field in ["command", "args", "env", "cwd", "envFile"] {
        if fields.contains_key(field) {
            issues.push(Issue::lost(
                format!("{path}.{field}"),
                "a remote server takes no `command`, `args`, `env`, `cwd` or `envFile`; dropped",
            ));
        }
    }
    Ok(Transport::Http {
        url,
        headers,
        legacy_sse,
    })
}

/// `env` or `headers`: an object of strings (numbers and booleans are
/// written as text); other values are dropped and reported; a secret
/// written as is becomes an environment variable's reference
/// ([`super::secrets`]).
fn string_map(
    fields: &Map<String, Value>,
    field: &str,
    (server, path): (&str, &str),
    inputs: &Inputs,
    issues: &mut Vec<Issue>,
    variables: &mut Variables,
) -> Result<Vec<(String, String)>, String> {
    let map = match fields.get(field) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(map)) => map,
        Some(other) => {
            return Err(format!(
                "`{field}` must be an object, found {}",
                kind_of(other)
            ))
        }
    };
    let mut out = Vec::new();
    for (key, value) in map {
        let value_path = format!("{path}.{field}.{key}");
        match scalar_text(value) {
            Some(text) => {
                let text = vars::translate(&text, inputs, &value_path, issues);
                let text = super::secrets::kept_out(
                    server,
                    field,
                    key,
                    text,
                    &value_path,
                    issues,
                    variables,
                );
                // A URL under any name (`DATABASE_URL`) keeps its password
                // out as one in the arguments does.
                // Its variable is named after the key: `DATABASE_URL`'s
                // password is `${DATABASE_URL_PASSWORD}`.
                let text = match field == "env" && text.contains("://") {
                    true => super::secrets::url_kept_out(
                        key.strip_suffix("_URL")
                            .or_else(|| key.strip_suffix("_url"))
                            .unwrap_or(key),
                        text,
                        &value_path,
                        issues,
                        variables,
                    ),
                    false => text,
                };
                out.push((key.clone(), text));
            }
            None => issues.push(Issue::lost(
                value_path,
                format!("expected a string, found {}; dropped", kind_of(value)),
            )),
        }
    }
    Ok(out)
}

/// A string, or a number or boolean as the text a client would pass on.
fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}
