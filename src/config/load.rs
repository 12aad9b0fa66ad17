//! Where the config comes from and how the layers are merged.
//!
//! Order, later wins: the file (TOML, YAML or JSON by extension, or the
//! embedded default), then `JUNCTION_{SERVER,MOUNTS,TIMEOUTS,SUPERVISION,LIMITS,TELEMETRY,ADMIN}__…`
//! environment overrides (`__` nests), then `${VAR}` expansion. Only those
//! section prefixes are read so that unrelated `JUNCTION_*` variables in a
//! user's shell cannot break start-up.

use std::path::{Path, PathBuf};

use figment::{
    providers::{Env, Format, Json, Serialized, Toml, Yaml},
    Figment,
};
use serde_json::Value;

use super::{
    expand::expand_tree,
    problems::{ConfigError, Problems},
    validate::resolve,
    Config,
};

/// The config compiled into the binary, used when no file is given or found.
pub const EMBEDDED_DEFAULT: &str = include_str!("../../config/junction.toml");

/// The file looked for in the working directory when `--config` is absent.
pub const LOCAL_CONFIG_FILE: &str = "junction.toml";

/// Variables the gateway defines itself for `${…}` expansion.
/// `JUNCTION_EXE` is this binary, so a config can mount `junction demo-server`
/// without knowing where the binary was installed.
const BUILTIN_EXE_VARIABLE: &str = "JUNCTION_EXE";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    File(PathBuf),
    Embedded,
}

impl ConfigSource {
    /// `--config PATH` if given, else `./junction.toml` if present, else the
    /// embedded default.
    pub fn resolve(explicit: Option<PathBuf>) -> Self {
        match explicit {
            Some(path) => ConfigSource::File(path),
            // Anything by that name, a file or not (a dangling symlink, a
            // directory): the operator meant it, and loading it says what
            // is wrong, rather than serving the embedded default unseen.
            None if Path::new(LOCAL_CONFIG_FILE).symlink_metadata().is_ok() => {
                ConfigSource::File(PathBuf::from(LOCAL_CONFIG_FILE))
            }
            None => ConfigSource::Embedded,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            ConfigSource::File(path) => path.display().to_string(),
            ConfigSource::Embedded => "embedded default config".to_owned(),
        }
    }

    /// The file's bytes as they are now (`None` for the embedded config or
    /// a file that cannot be read): what the reload watcher compares.
    pub fn snapshot(&self) -> Option<Vec<u8>> {
        match self {
            ConfigSource::File(path) => std::fs::read(path).ok(),
            ConfigSource::Embedded => None,
        }
    }
}

enum FileFormat {
    Toml,
    Yaml,
    Json,
}

fn format_of(path: &Path) -> Option<FileFormat> {
    match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
        "toml" => Some(FileFormat::Toml),
        "yaml" | "yml" => Some(FileFormat::Yaml),
        "json" => Some(FileFormat::Json),
        _ => None,
    }
}

/// The command line's `--listen`, over `server.listen` wherever the
/// config is loaded (start, `check`, every reload), so that it is
/// validated as the file's own would be (the admin listener may not take
/// it too), and not the file's value it replaces.
static LISTEN_OVERRIDE: std::sync::OnceLock<std::net::SocketAddr> = std::sync::OnceLock::new();

/// Sets the command line's `--listen` for every load of this process.
pub fn override_listen(listen: std::net::SocketAddr) {
    let _ = LISTEN_OVERRIDE.set(listen);
}

/// Loads, merges, expands and validates the config; every problem at once.
pub fn load(source: &ConfigSource) -> Result<Config, ConfigError> {
    load_read(source, source_text(source))
}

/// [`load`] from `content`, the file's bytes as read already (by the
/// reload watcher, which takes a file only once two reads agree: reading
/// it again could catch a write halfway).
pub fn load_content(source: &ConfigSource, content: Vec<u8>) -> Result<Config, ConfigError> {
    let read = match source {
        ConfigSource::Embedded => source_text(source),
        ConfigSource::File(path) => format_of(path)
            .ok_or_else(|| {
                "unknown config format: use a .toml, .yaml, .yml or .json file".to_owned()
            })
            .and_then(|format| {
                String::from_utf8(content)
                    .map(|text| (without_bom(text), format))
                    .map_err(|_| "cannot read file: stream did not contain valid UTF-8".to_owned())
            }),
    };
    load_read(source, read)
}

fn load_read(
    source: &ConfigSource,
    read: Result<(String, FileFormat), String>,
) -> Result<Config, ConfigError> {
    let origin = source.describe();
    let fail = |path: &str, message: String| {
        let mut problems = Problems::default();
        problems.push(path, message);
        problems.into_error(origin.clone())
    };
    let (text, format) = match read {
        Ok(read) => read,
        Err(message) => return Err(fail("", message)),
    };

    // Figment merges into sorted maps, so the order of mounts (which decides
    // who wins a name collision) is read from the document itself.
    let mount_order = match document_mount_order(&text, &format) {
        Ok(order) => order,
        Err(message) => return Err(fail("", message)),
    };
    // TOML refuses a key written twice; JSON and YAML readers keep the
    // last one, so a copied mount not renamed replaced the first unseen.
    let repeated = match format {
        FileFormat::Toml => Vec::new(),
        FileFormat::Yaml => super::duplicates::in_yaml(&text),
        FileFormat::Json => super::duplicates::in_json(&text),
    };
    if !repeated.is_empty() {
        let mut problems = Problems::default();
        for path in repeated {
            problems.push(
                path,
                "written twice in its table (the later would silently replace the earlier)"
                    .to_owned(),
            );
        }
        return Err(problems.into_error(origin));
    }

    let overrides = env_overrides();
    let file = match format {
        FileFormat::Toml => Figment::from(Toml::string(&text)),
        FileFormat::Yaml => Figment::from(Yaml::string(&text)),
        FileFormat::Json => Figment::from(Json::string(&text)),
    };
    let overridden = overridden_in(&file);
    let mut figment = file.merge(overrides.clone());
    if let Some(listen) = LISTEN_OVERRIDE.get() {
        figment = figment.merge(Serialized::default("server.listen", listen.to_string()));
    }

    let mut tree: Value = match figment.extract() {
        Ok(tree) => tree,
        Err(errors) => {
            let mut problems = Problems::default();
            for error in errors {
                problems.push(error.path.join("."), error.kind.to_string());
            }
            return Err(from_overrides(problems.into_error(origin)));
        }
    };

    keep_override_text(&mut tree, &overrides);

    let mut problems = Problems::default();
    if let Ok(as_read) = figment.extract::<figment::value::Value>() {
        report_non_finite_numbers(&as_read, &mut Vec::new(), &mut problems);
    }
    let mut written = Vec::new();
    expand_tree(
        &mut tree,
        &mut Vec::new(),
        &lookup_variable,
        &mut problems,
        &mut written,
    );
    match resolve(tree, &mount_order, problems) {
        Ok(mut config) => {
            // `${JUNCTION_EXE}` is no secret: shown as what it stands for.
            let builtin = format!("${{{BUILTIN_EXE_VARIABLE}}}");
            config.as_written = written
                .into_iter()
                .filter(|(_, raw)| raw.replace(&builtin, "").contains("${"))
                .collect();
            for mount in &mut config.mounts {
                let path = format!("mounts.{}.command", mount.name);
                mount.command_as_written = config.as_written.get(&path).cloned();
            }
            config.overridden = overridden;
            Ok(config)
        }
        Err(problems) => Err(from_overrides(problems.into_error(origin))),
    }
}

/// `text` without a leading byte order mark, which editors on Windows
/// write: the TOML and YAML readers skip it, the JSON one refused the file.
fn without_bom(text: String) -> String {
    match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_owned(),
        None => text,
    }
}

/// The config's text and format.
fn source_text(source: &ConfigSource) -> Result<(String, FileFormat), String> {
    match source {
        ConfigSource::Embedded => Ok((EMBEDDED_DEFAULT.to_owned(), FileFormat::Toml)),
        ConfigSource::File(path) => {
            let format = format_of(path).ok_or_else(|| {
                "unknown config format: use a .toml, .yaml, .yml or .json file".to_owned()
            })?;
            let text = std::fs::read_to_string(path)
                .map_err(|error| format!("cannot read file: {error}"))?;
            Ok((without_bom(text), format))
        }
    }
}

/// The log format a config asks for (`telemetry.log_format`, or its
/// `JUNCTION_…` override), read on its own: the config may be invalid
/// otherwise, and the report of its problems is then written in the format
/// the log pipeline reading it expects.
pub fn log_format_asked(source: &ConfigSource) -> Option<crate::telemetry::LogFormat> {
    let (text, format) = source_text(source).ok()?;
    let file = match format {
        FileFormat::Toml => Figment::from(Toml::string(&text)),
        FileFormat::Yaml => Figment::from(Yaml::string(&text)),
        FileFormat::Json => Figment::from(Json::string(&text)),
    };
    let asked: String = file
        .merge(env_overrides())
        .extract_inner("telemetry.log_format")
        .ok()?;
    match asked.as_str() {
        "json" => Some(crate::telemetry::LogFormat::Json),
        "text" => Some(crate::telemetry::LogFormat::Text),
        _ => None,
    }
}

/// The settings `file` holds that a `JUNCTION_…` variable overrides, by
/// path, with the variable.
fn overridden_in(file: &Figment) -> Vec<(String, String)> {
    let Ok(tree) = file.extract::<Value>() else {
        return Vec::new();
    };
    let mut found: Vec<(String, String)> = override_variables()
        .into_iter()
        .filter(|(path, _)| {
            path.split('.')
                .try_fold(&tree, |node, level| node.get(level))
                .is_some()
        })
        .collect();
    found.sort();
    found
}

/// Every `JUNCTION_…` config override set now, as (config path, variable).
fn override_variables() -> Vec<(String, String)> {
    std::env::vars()
        .filter_map(|(name, _)| {
            let key = name.strip_prefix("JUNCTION_")?;
            is_override_key(key).then(|| (env_key_path(key), name.clone()))
        })
        .collect()
}

/// `error` with each problem about a setting an environment override set
/// naming that variable: the value was not in the file the error names
/// (the Docker image always sets `JUNCTION_SERVER__ALLOWED_HOSTS`, and an
/// operator would search the file for it in vain). A problem with a table
/// an override sets something in names those variables too: a mount the
/// file no longer has, kept alive by an override of one of its settings,
/// is missing its `command` or `url`, which no edit of the file explains.
fn from_overrides(mut error: super::ConfigError) -> super::ConfigError {
    let overrides = override_variables();
    for problem in &mut error.problems {
        let set_by = overrides.iter().find(|(path, _)| {
            problem.path == *path || problem.path.starts_with(&format!("{path}."))
        });
        if let Some((_, variable)) = set_by {
            problem.message = format!(
                "{} (set by environment variable {variable})",
                problem.message
            );
            continue;
        }
        if problem.path.is_empty() {
            continue;
        }
        let within = format!("{}.", problem.path);
        let setting_within: Vec<&str> = overrides
            .iter()
            .filter(|(path, _)| path.starts_with(&within))
            .map(|(_, variable)| variable.as_str())
            .collect();
        if !setting_within.is_empty() {
            problem.message = format!(
                "{} (environment variable {} sets a value in it)",
                problem.message,
                setting_within.join(", ")
            );
        }
    }
    error
}

/// Whether `key` (after `JUNCTION_`) is a config override: it starts with
/// a section of the config.
fn is_override_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "server__",
        "mounts__",
        "endpoints__",
        "timeouts__",
        "supervision__",
        "limits__",
        "telemetry__",
        "admin__",
    ]
    .iter()
    .any(|section| key.starts_with(section))
}

/// The `JUNCTION_…` environment overrides, keyed by config path.
fn env_overrides() -> Env {
    Env::prefixed("JUNCTION_")
        .filter(|key| is_override_key(key.as_str()))
        .map(|key| env_key_path(key.as_str()).into())
        // Last: each `filter`/`map` turns lowercasing back on.
        .lowercase(false)
}

/// figment reads an override's value as TOML-like data, so `8080`, `0123`
/// and `true` arrive as numbers and booleans, `["/data"]` as a list,
/// `"etag"` without its quotes, ` x ` trimmed: a child's `PORT=8080` was
/// refused as not a string, a PIN `0123` would silently lose its zero, a
/// JSON list passed to a server was refused. Wherever the config takes
/// text, the override's text is put back exactly as set; only the settings
/// that take numbers, booleans, lists or tables ([`takes_data`]) keep
/// figment's reading.
fn keep_override_text(tree: &mut Value, overrides: &Env) {
    for (key, text) in overrides.iter() {
        let path: Vec<&str> = key.as_str().split('.').collect();
        if takes_data(&path) {
            continue;
        }
        let place = path
            .iter()
            .try_fold(&mut *tree, |node, level| node.get_mut(*level));
        if let Some(place) = place {
            *place = Value::String(text);
        }
    }
}

/// Reports each number in `value` that is no finite number (YAML's `.inf`,
/// `.nan`), with its path: on its way to JSON it became `null`, which
/// every setting reads as unset, so the default would be used without a
/// word. Only a file writes one: figment reads an environment value such
/// as `inf` or `1e999` as text.
fn report_non_finite_numbers(
    value: &figment::value::Value,
    path: &mut Vec<String>,
    problems: &mut Problems,
) {
    use figment::value::Value as Read;
    match value {
        Read::Dict(_, fields) => {
            for (key, field) in fields {
                path.push(key.clone());
                report_non_finite_numbers(field, path, problems);
                path.pop();
            }
        }
        Read::Array(_, items) => {
            for (index, item) in items.iter().enumerate() {
                path.push(index.to_string());
                report_non_finite_numbers(item, path, problems);
                path.pop();
            }
        }
        Read::Num(_, number) => {
            if let Some(float) = number.to_f64().filter(|float| !float.is_finite()) {
                problems.push(path.join("."), format!("{float} is not a finite number"));
            }
        }
        _ => {}
    }
}

/// The config paths whose values are numbers, booleans, lists or tables
/// (read as figment reads them), rather than text.
fn takes_data(path: &[&str]) -> bool {
    match path {
        // A whole section, a whole mount.
        [_] | ["mounts" | "endpoints", _] => true,
        ["endpoints", _, "mounts"] => true,
        ["mounts", _, "max_upstream_sessions" | "args" | "env" | "headers" | "timeouts"] => true,
        ["mounts", _, "include_tools" | "exclude_tools" | "forward_headers"] => true,
        ["mounts", _, "timeouts", "tools"] => true,
        ["mounts", ..] => false,
        [_, field] => matches!(
            *field,
            "allowed_hosts"
                | "allowed_origins"
                | "crash_loop_restarts"
                | "max_sessions"
                | "max_concurrent_requests"
                | "max_body_size"
                | "max_upstream_sessions"
                | "enabled"
                | "fit_tool_names"
                | "tool_name_max_chars"
        ),
        _ => false,
    }
}

/// The config path an environment override names: `__` separates the
/// levels and names are lowercase (`SERVER__LISTEN` → `server.listen`),
/// a mount's or an endpoint's name's `_` is its `-` (no such name has `_`,
/// no variable name `-`: `MOUNTS__MY_SERVER__URL` → `mounts.my-server.url`), and the keys a
/// mount chooses keep their case: a child's `env` variable, a header, a
/// tool's timeout (`MOUNTS__A__ENV__API_KEY` → `mounts.a.env.API_KEY`).
pub(super) fn env_key_path(key: &str) -> String {
    let levels: Vec<&str> = key.split("__").collect();
    let keeps_case = |at: usize| match levels.get(2).map(|field| field.to_ascii_lowercase()) {
        Some(field) if at == 3 && (field == "env" || field == "headers") => true,
        Some(field) if at == 4 && field == "timeouts" => levels[3].eq_ignore_ascii_case("tools"),
        _ => false,
    };
    let is_mounts = levels
        .first()
        .is_some_and(|section| section.eq_ignore_ascii_case("mounts"));
    // Endpoint names are written as mount names are.
    let names_a_table = is_mounts
        || levels
            .first()
            .is_some_and(|section| section.eq_ignore_ascii_case("endpoints"));
    levels
        .iter()
        .enumerate()
        .map(|(at, level)| {
            if keeps_case(at) && is_mounts {
                (*level).to_owned()
            } else if at == 1 && names_a_table {
                level.to_ascii_lowercase().replace('_', "-")
            } else {
                level.to_ascii_lowercase()
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn lookup_variable(name: &str) -> Option<String> {
    if name == BUILTIN_EXE_VARIABLE {
        if let Ok(exe) = std::env::current_exe() {
            return Some(installed_path(&exe.display().to_string()).to_owned());
        }
    }
    std::env::var(name).ok()
}

/// The running binary's path as installed. Once the file is replaced (an
/// upgrade, a rebuild) Linux names the running one `… (deleted)`: that
/// path cannot be started, and would make every mount running
/// `${JUNCTION_EXE}` look changed to the next reload, which would restart
/// it and fail. The file now at the path is the one to run.
fn installed_path(exe: &str) -> &str {
    exe.strip_suffix(" (deleted)").unwrap_or(exe)
}

#[cfg(test)]
#[test]
fn a_replaced_binary_is_named_by_its_path() {
    assert_eq!(
        installed_path("/usr/bin/junction (deleted)"),
        "/usr/bin/junction"
    );
    assert_eq!(installed_path("/usr/bin/junction"), "/usr/bin/junction");
}

/// A TOML syntax error by line and column, without the offending line
/// toml prints under it: that line may hold a secret (an unclosed quote
/// around a token is a typical mistake).
fn toml_syntax_error(text: &str, error: &toml::de::Error) -> String {
    // On one line ("invalid array; expected `]`"). toml says nothing for
    // a value left out at the end of a line, as in a file half written.
    let message = match error.message().trim() {
        "" => "a value is missing here (is the file complete?)".to_owned(),
        message => message.lines().collect::<Vec<_>>().join("; "),
    };
    let Some(span) = error.span() else {
        return format!("invalid TOML: {message}");
    };
    let before = &text[..span.start.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!("invalid TOML at line {line}, column {column}: {message}")
}

#[cfg(test)]
#[test]
fn a_toml_syntax_error_does_not_show_the_line() {
    let text = "[mounts.a]\nheaders = { Authorization = \"Bearer sk-live-abc }\n";
    let error = toml::from_str::<Value>(text).expect_err("unclosed string");
    let said = toml_syntax_error(text, &error);
    assert!(
        said.starts_with("invalid TOML at line 2, column "),
        "{said}"
    );
    assert!(!said.contains("sk-live"), "{said}");
}

/// A file cut short after `key = ` (an editor's save caught half way)
/// is said so: toml gives no message for it, and the error ended in ": ".
/// toml's messages on two lines are said on one.
#[cfg(test)]
#[test]
fn a_toml_error_always_says_what_is_wrong_on_one_line() {
    let cut = "[server]\nlisten = ";
    let error = toml::from_str::<Value>(cut).expect_err("no value");
    assert_eq!(
        toml_syntax_error(cut, &error),
        "invalid TOML at line 2, column 10: a value is missing here (is the file complete?)"
    );
    let open = "a = [1,\n";
    let error = toml::from_str::<Value>(open).expect_err("unclosed");
    assert_eq!(
        toml_syntax_error(open, &error),
        "invalid TOML at line 2, column 1: invalid array; expected `]`"
    );
}

/// Mount names in the order the document lists them.
fn document_mount_order(text: &str, format: &FileFormat) -> Result<Vec<String>, String> {
    let document: Value = match format {
        FileFormat::Toml => toml::from_str(text).map_err(|e| toml_syntax_error(text, &e))?,
        FileFormat::Yaml => {
            if text.trim().is_empty() {
                Value::Null
            } else {
                serde_yaml::from_str(text).map_err(|e| format!("invalid YAML: {e}"))?
            }
        }
        FileFormat::Json => serde_json::from_str(text).map_err(|e| format!("invalid JSON: {e}"))?,
    };
    Ok(document
        .get("mounts")
        .and_then(Value::as_object)
        .map(|mounts| mounts.keys().cloned().collect())
        .unwrap_or_default())
}
