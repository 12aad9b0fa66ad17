//! `junction check`: load and validate a config and say what it mounts;
//! with `--connect`, start every upstream once and say what each offers.
//!
//! Without `--connect` nothing is spawned or connected (config loading does
//! no I/O beyond reading). With it, the mounts are started as `serve` would
//! ([`super::probe`]), their counts and final tool and prompt names printed,
//! tool names clients would reject flagged ([`super::names`]), names lost to
//! a collision marked, and everything stopped again before returning.

use std::time::Duration;

use super::{
    columns, print_stdout,
    probe::{probe, MountOutcome, Probe},
    Outcome,
};
use crate::{
    catalog::MountCatalog,
    config::{self, endpoint_path, Config, ConfigSource, MountConfig, UpstreamTransport},
    tool_filter::ToolFilter,
    tool_name_rule::tool_name_problems,
};

/// Shown under `junction check --help`.
pub const EXAMPLES: &str = "\
Examples:
  junction check                               check ./junction.toml (else the embedded default)
  junction check --config gateway.yaml
  junction check --config junction.toml --connect --timeout 60s

Exit codes: 0 valid (and, with --connect, every upstream started);
1 valid, but an upstream failed to start or to answer in time;
2 invalid config (every problem is printed with its field path);
3 the output could not be written; 130 interrupted (SIGINT or SIGTERM;
the upstreams it started are stopped).";

/// `junction check`.
pub async fn run(
    source: ConfigSource,
    listen: Option<std::net::SocketAddr>,
    connect: bool,
    wait: Duration,
) -> Outcome {
    let mut config = match config::load(&source) {
        Ok(config) => config,
        Err(error) => {
            crate::say_on_stderr!("junction: invalid config\n{error}");
            return Outcome::Invalid;
        }
    };
    // As `serve` takes it: a deployment's command line checks as it runs.
    if let Some(listen) = listen {
        config.server.listen = listen;
    }
    if let Err(unwritten) = print_stdout(&summary(&source.describe(), &config)) {
        return unwritten;
    }
    if !connect || config.mounts.is_empty() {
        return Outcome::Ok;
    }
    crate::say_on_stderr!(
        "junction: starting {} (waiting up to {})",
        plural(config.mounts.len(), "mount", "mounts"),
        humantime::format_duration(wait)
    );
    let probe = probe(config, wait).await;
    let (report, outcome) = connect_report(&probe);
    let written = print_stdout(&report);
    probe.stop().await;
    written.map_or_else(|unwritten| unwritten, |()| outcome)
}

/// The config in a few lines: where it serves and one row per mount.
pub fn summary(origin: &str, config: &Config) -> String {
    let server = &config.server;
    let older_transport = server
        .sse_path
        .as_ref()
        .map(|sse_path| format!(", HTTP+SSE at http://{}{sse_path}", server.listen))
        .unwrap_or_default();
    let fitted = match server.fit_tool_names {
        true => format!(
            ", tool names fitted to {} characters",
            server.tool_name_max_chars
        ),
        false => String::new(),
    };
    let mut out = format!(
        "{origin}: valid; {} served at http://{}{}{older_transport} (separator {:?}{fitted})\n",
        plural(config.mounts.len(), "mount", "mounts"),
        server.listen,
        server.path,
        server.separator.as_str()
    );
    for endpoint in &config.endpoints {
        let mounts: Vec<&str> = endpoint.mounts.iter().map(|mount| mount.as_str()).collect();
        let older = server
            .sse_path
            .as_ref()
            .map(|sse_path| format!(" (HTTP+SSE {})", endpoint_path(sse_path, &endpoint.name)))
            .unwrap_or_default();
        out.push_str(&format!(
            "endpoint {} at {}{older} serves {}\n",
            endpoint.name,
            endpoint_path(&server.path, &endpoint.name),
            mounts.join(", ")
        ));
    }
    for (setting, variable) in &config.overridden {
        out.push_str(&format!(
            "{setting}: set by environment variable {variable}; the file's value is not used\n"
        ));
    }
    if config.mounts.is_empty() {
        return out;
    }
    out.push('\n');
    let mut rows = vec![["MOUNT", "TRANSPORT", "ISOLATION", "NAMESPACE", "TARGET"]
        .map(str::to_owned)
        .to_vec()];
    for mount in &config.mounts {
        let namespace = if mount.namespace.is_pass_through() {
            "(none)".to_owned()
        } else {
            mount.namespace.as_str().to_owned()
        };
        rows.push(vec![
            mount.name.to_string(),
            mount.transport.kind().to_owned(),
            mount.isolation.as_str().to_owned(),
            namespace,
            target(config, mount),
        ]);
    }
    out.push_str(&columns(&rows));
    out
}

/// What a mount runs or connects to. Header and env values are left out
/// (they usually carry secrets); what came from `${VAR}` is shown as
/// written, and a URL's secrets are masked ([`masked_url`]).
fn target(config: &Config, mount: &MountConfig) -> String {
    let at = |field: &str| format!("mounts.{}.{field}", mount.name);
    match &mount.transport {
        UpstreamTransport::Stdio { command, args, .. } => {
            let words: Vec<&str> = std::iter::once(config.shown(&at("command"), command))
                .chain(
                    args.iter()
                        .enumerate()
                        .map(|(index, arg)| config.shown(&at(&format!("args.{index}")), arg)),
                )
                .collect();
            masked_arguments(&words)
                .iter()
                .map(|word| shell_word(word))
                .collect::<Vec<_>>()
                .join(" ")
        }
        UpstreamTransport::StreamableHttp { url, .. } | UpstreamTransport::Sse { url, .. } => {
            masked_url(config.shown(&at("url"), url.as_str()))
        }
    }
}

/// A command line with what is likely a secret masked
/// ([`super::secret_args`]). A value that is one `${VAR}` as written names
/// the secret without showing it, and stays.
fn masked_arguments(words: &[&str]) -> Vec<String> {
    super::secret_args::rewrite_secrets(words, &mut Masked)
}

/// Masks secrets: `***` for a value, [`masked_url`] for a URL.
struct Masked;

impl super::secret_args::SecretRewrite for Masked {
    fn value(&mut self, _index: usize, _name: &str, value: &str) -> String {
        let one_reference =
            value.starts_with("${") && value.ends_with('}') && value.matches("${").count() == 1;
        match one_reference {
            true => value.to_owned(),
            false => "***".to_owned(),
        }
    }

    fn url(&mut self, _index: usize, url: &str) -> String {
        masked_url(url)
    }
}

#[cfg(test)]
#[test]
fn secret_flags_are_masked() {
    let words = [
        "server",
        "--api-key=sk-live-123",
        "--token",
        "tok-456",
        "--verbose",
        "--password=${DB_PASSWORD}",
        "--auth-token",
        "--port",
        "8080",
        "--url=https://u:pw@h/mcp",
        "--keyboard",
        "us",
        "--header",
        "Authorization: Bearer sk-789",
        "--header",
        "Accept: text/plain",
        "--secret=sk-${SUFFIX}",
        "https://h/mcp",
        "--header=X-Api-Key: k-1",
        "-e",
        "GITHUB_PERSONAL_ACCESS_TOKEN=ghp_1",
        "--env=API_KEY=sk-2",
        "MODE=fast",
    ];
    assert_eq!(
        masked_arguments(&words),
        [
            "server",
            "--api-key=***",
            "--token",
            "***",
            "--verbose",
            "--password=${DB_PASSWORD}",
            "--auth-token",
            "--port",
            "8080",
            "--url=https://u:***@h/mcp",
            "--keyboard",
            "us",
            "--header",
            "Authorization: ***",
            "--header",
            "Accept: text/plain",
            "--secret=sk-${SUFFIX}",
            "https://h/mcp",
            "--header=X-Api-Key: ***",
            "-e",
            "GITHUB_PERSONAL_ACCESS_TOKEN=***",
            "--env=API_KEY=***",
            "MODE=fast",
        ]
    );
}

/// `url`, parsed or as written (with `${VAR}` in it, so not parsed), with
/// what is likely a secret masked: the password of its user info, every
/// query value (API keys often travel there) that is not a `${VAR}`
/// already, which names the secret without showing it, and each path
/// segment that looks like a key ([`super::url_text::looks_like_a_key`]: hosted servers
/// take theirs in the path, `/s/<key>/mcp`).
pub(crate) fn masked_url(url: &str) -> String {
    use super::url_text::{is_variable, UrlText};
    let parts = UrlText::split(url);
    let user_info = parts
        .user_info
        .map(|user_info| match user_info.split_once(':') {
            Some((user, _)) => format!("{user}:***"),
            // A user alone is sent as Basic credentials, and is often a
            // token (`https://TOKEN@host`).
            None if is_variable(user_info) => user_info.to_owned(),
            None => "***".to_owned(),
        });
    let path: Vec<&str> = parts
        .path
        .split('/')
        .map(|segment| match super::url_text::looks_like_a_key(segment) {
            true => "***",
            false => segment,
        })
        .collect();
    let query = parts.query.map(|query| {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((_, value)) if value.is_empty() || is_variable(value) => pair.to_owned(),
                Some((key, _)) => format!("{key}=***"),
                None if pair.is_empty() || is_variable(pair) => pair.to_owned(),
                None => "***".to_owned(),
            })
            .collect();
        pairs.join("&")
    });
    parts.with(user_info.as_deref(), &path.join("/"), query.as_deref())
}

#[cfg(test)]
#[test]
fn names_that_would_break_a_row_are_quoted_and_escaped() {
    assert_eq!(shown("odd__get.weather"), "odd__get.weather");
    assert_eq!(shown("naïve tool"), "naïve tool");
    assert_eq!(shown("tab\tnl\n"), "\"tab\\tnl\\n\"");
    assert_eq!(shown(""), "\"\"");
}

#[cfg(test)]
#[test]
fn url_secrets_are_masked_as_written_or_parsed() {
    for (url, shown) in [
        ("https://h/mcp", "https://h/mcp"),
        ("https://u:pw@h/mcp", "https://u:***@h/mcp"),
        (
            "https://user:hunter2@${HOST}/mcp",
            "https://user:***@${HOST}/mcp",
        ),
        ("https://u@h/mcp", "https://***@h/mcp"),
        ("https://sk-TOKEN@h/mcp", "https://***@h/mcp"),
        ("https://${TOKEN}@h/mcp", "https://${TOKEN}@h/mcp"),
        (
            "https://h/mcp?api_key=abc&profile=${PROFILE}&flag&x=",
            "https://h/mcp?api_key=***&profile=${PROFILE}&***&x=",
        ),
        (
            "https://h/a@b:c/mcp?k=v#top",
            "https://h/a@b:c/mcp?k=***#top",
        ),
        (
            "https://mcp.zapier.com/api/mcp/s/a1b2c3d4e5f6a7b8c9d0/mcp",
            "https://mcp.zapier.com/api/mcp/s/***/mcp",
        ),
        (
            "https://h/v1/${KEY}/my-server/sse",
            "https://h/v1/${KEY}/my-server/sse",
        ),
        (
            "postgresql://app:s3cret@db/prod",
            "postgresql://app:***@db/prod",
        ),
        (
            "postgresql://app:p#ss@db/prod",
            "postgresql://app:***@db/prod",
        ),
        ("https://app:pa?ss@h/mcp", "https://app:***@h/mcp"),
        (
            "postgresql://app:Ab3/vG+x@db/prod",
            "postgresql://app:***@db/prod",
        ),
        ("https://h?key=abc", "https://h?key=***"),
        (
            "https://server.smithery.ai/@smithery-ai/server-sequential-thinking/mcp",
            "https://server.smithery.ai/@smithery-ai/server-sequential-thinking/mcp",
        ),
    ] {
        assert_eq!(masked_url(url), shown, "{url}");
    }
}

/// `word` as a shell would need it, so the printed command can be pasted.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The `--connect` part: per mount its state, counts and names; the outcome
/// is [`Outcome::Partial`] if any mount did not become ready.
pub fn connect_report(probe: &Probe) -> (String, Outcome) {
    let mut out = String::from("\n");
    let mut rejected_names = 0;
    for mount in &probe.mounts {
        let name = &mount.config.name;
        match &mount.outcome {
            MountOutcome::Ready(catalog) => {
                out.push_str(&format!(
                    "{name}: ready: {}\n",
                    counts(catalog, &mount.config.tools)
                ));
                let (lines, rejected) = name_lines(probe, &mount.config, catalog);
                rejected_names += rejected;
                out.push_str(&lines);
            }
            MountOutcome::Failed(error) => {
                out.push_str(&format!("{name}: failed: {error}\n"));
            }
            MountOutcome::TimedOut => out.push_str(&format!(
                "{name}: failed: no answer within {} (still starting or discovering; try --timeout)\n",
                humantime::format_duration(probe.waited)
            )),
        }
    }
    let failed = probe.unavailable().count();
    let ready = probe.mounts.len() - failed;
    out.push_str(&format!(
        "\n{} of {} ready",
        ready,
        plural(probe.mounts.len(), "mount", "mounts")
    ));
    if failed > 0 {
        out.push_str(&format!(", {failed} failed"));
    }
    if rejected_names > 0 {
        out.push_str(&format!(
            "; {} many clients would reject ([server] fit_tool_names = true serves names that fit)",
            plural(rejected_names, "tool name", "tool names")
        ));
    }
    out.push('\n');
    let outcome = if failed > 0 {
        Outcome::Partial
    } else {
        Outcome::Ok
    };
    (out, outcome)
}

/// The mount's lists by count; the tools its `include_tools` /
/// `exclude_tools` hide are counted apart.
fn counts(catalog: &MountCatalog, filter: &ToolFilter) -> String {
    let hidden = filter.hides_of(catalog.tools.iter().map(|tool| tool.name.as_ref()));
    let tools = match hidden {
        0 => plural(catalog.tools.len(), "tool", "tools"),
        hidden => format!(
            "{} ({hidden} more hidden)",
            plural(catalog.tools.len() - hidden, "tool", "tools")
        ),
    };
    [
        tools,
        plural(catalog.prompts.len(), "prompt", "prompts"),
        plural(catalog.resources.len(), "resource", "resources"),
        plural(
            catalog.templates.len(),
            "resource template",
            "resource templates",
        ),
    ]
    .join(", ")
}

/// One line per tool and prompt under the name clients see, with a note
/// when a tool name breaks the client rule or a name was lost to another
/// mount. Returns the lines and how many tool names break the rule.
fn name_lines(probe: &Probe, mount: &MountConfig, catalog: &MountCatalog) -> (String, usize) {
    let mut rows = Vec::new();
    let mut rejected = 0;
    let naming = probe.catalog.naming();
    for tool in &catalog.tools {
        let (name, fitted) = naming.served_tool_name(&mount.namespace, &tool.name);
        if !mount.tools.offers(&tool.name) {
            // No client sees it: no client rule to break, no name lost.
            let note = "hidden by include_tools / exclude_tools".to_owned();
            rows.push(vec![kind("tool"), shown(&name), note]);
            continue;
        }
        let mut notes: Vec<String> = Vec::new();
        if fitted {
            let qualified = mount.namespace.qualify_name(&naming.separator, &tool.name);
            notes.push(format!("fitted from {}", shown(&qualified)));
        }
        let problems = tool_name_problems(&name, probe.tool_name_max_chars);
        if !problems.is_empty() {
            rejected += 1;
            for problem in problems {
                notes.push(format!("warning: {problem}"));
            }
        }
        if let Some(route) = probe.catalog.resolve_tool(&name) {
            if route.mount != mount.name {
                notes.push(format!(
                    "not listed: mount {} offers the same name and comes first in config order",
                    route.mount
                ));
            } else if *route.original != *tool.name {
                notes.push(format!(
                    "not listed: the mount's own {:?} has this name as it is",
                    route.original
                ));
            }
        }
        rows.push(vec![kind("tool"), shown(&name), notes.join("; ")]);
    }
    for prompt in &catalog.prompts {
        let name = naming.prompt_name(&mount.namespace, &prompt.name);
        let mut note = String::new();
        if let Some(route) = probe.catalog.resolve_prompt(&name) {
            if route.mount != mount.name {
                note = format!(
                    "not listed: mount {} offers the same name and comes first in config order",
                    route.mount
                );
            }
        }
        rows.push(vec![kind("prompt"), shown(&name), note]);
    }
    (columns(&rows), rejected)
}

/// `name` for a line of the table: as it is, or, if it is empty or holds
/// a control character (a tab or newline would break the row), in quotes
/// with each escaped as Rust writes it (`"a\tb"`).
fn shown(name: &str) -> String {
    match name.is_empty() || name.chars().any(char::is_control) {
        true => format!("{name:?}"),
        false => name.to_owned(),
    }
}

/// The indented kind column, one width for every mount so the names line
/// up (and read the same) whether or not a mount has prompts.
fn kind(kind: &str) -> String {
    format!("  {kind:<6}")
}

fn plural(count: usize, one: &str, many: &str) -> String {
    if count == 1 {
        format!("{count} {one}")
    } else {
        format!("{count} {many}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted_only_when_needed() {
        assert_eq!(shell_word("npx"), "npx");
        assert_eq!(shell_word("@scope/pkg@1.2"), "@scope/pkg@1.2");
        assert_eq!(shell_word("two words"), "'two words'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn summary_lists_every_mount() {
        let config = config::embedded_for_tests();
        let text = summary("embedded", &config);
        assert!(text.starts_with(
            "embedded: valid; 2 mounts served at http://127.0.0.1:8080/mcp, HTTP+SSE at http://127.0.0.1:8080/sse (separator"
        ));
        let demo = text
            .lines()
            .find(|line| line.starts_with("demo "))
            .unwrap_or_else(|| panic!("no demo row in\n{text}"));
        let cells: Vec<&str> = demo.split_whitespace().collect();
        assert_eq!(&cells[..4], ["demo", "stdio", "shared", "demo"]);
        assert!(demo.ends_with(" demo-server"), "{demo}");
        assert!(text.contains("per_session"), "{text}");
        assert!(!text.contains("endpoint "), "none configured: {text}");

        let mut config = config;
        config.endpoints.push(config::EndpointConfig {
            name: "ide".into(),
            mounts: vec![crate::naming::MountName::new("private").unwrap()],
        });
        let text = summary("embedded", &config);
        assert!(
            text.contains("\nendpoint ide at /mcp/ide (HTTP+SSE /sse/ide) serves private\n"),
            "{text}"
        );
    }

    /// The summary goes to stdout, often into CI logs: keys in a URL's
    /// path and passwords in connection strings given as arguments are
    /// masked.
    #[test]
    fn summary_masks_keys_in_paths_and_arguments() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("junction.toml");
        std::fs::write(
            &file,
            "[mounts.db]\ncommand = \"npx\"\nargs = [\"server-postgres\", \"postgresql://app:s3cret@db/prod\", \"--url=https://h/mcp?key=abc123\", \"--db=postgresql://app:pw2@db/x\"]\n\n[mounts.zap]\nurl = \"https://mcp.zapier.com/api/mcp/s/a1b2c3d4e5f6a7b8c9d0e1f2/mcp\"\n",
        )
        .expect("write the config");
        let config = config::load(&ConfigSource::File(file)).expect("a valid config");
        let text = summary("junction.toml", &config);
        assert!(!text.contains("s3cret"), "{text}");
        assert!(!text.contains("a1b2c3d4e5f6a7b8c9d0e1f2"), "{text}");
        assert!(text.contains("postgresql://app:***@db/prod"), "{text}");
        assert!(!text.contains("abc123") && !text.contains("pw2"), "{text}");
        assert!(text.contains("--db=postgresql://app:***@db/x"), "{text}");
    }
}
