//! `junction tools`: the merged tool list exactly as clients will be given
//! it, by starting the config's mounts once ([`super::probe`]) without
//! serving HTTP.
//!
//! Text output is one tool per line, the name clients see (qualified, or
//! fitted: `[server] fit_tool_names`) then description;
//! `--json` prints the tool objects a `tools/list` answer would carry (all
//! pages, in order). Mounts that failed are reported on stderr and make the
//! exit code 1, with whatever the other mounts offered still printed.

use std::time::Duration;

use super::{
    columns, print_stdout,
    probe::{probe, MountOutcome},
    Outcome,
};
use crate::config::{self, ConfigSource};

/// Shown under `junction tools --help`.
pub const EXAMPLES: &str = "\
Examples:
  junction tools                               the tools of ./junction.toml (else the embedded default)
  junction tools --config junction.toml --json | jq '.[].name'

The list is the one a client declaring sampling, elicitation and roots
gets; a per_session mount may list fewer tools to clients without them.

Exit codes: 0 every mount answered; 1 some mount failed or timed out (the
others' tools are still printed); 2 invalid config; 3 the output could not
be written; 130 interrupted (SIGINT or SIGTERM; the upstreams it started
are stopped).";

/// `junction tools`.
pub async fn run(source: ConfigSource, json: bool, wait: Duration) -> Outcome {
    let config = match config::load(&source) {
        Ok(config) => config,
        Err(error) => {
            crate::say_on_stderr!("junction: invalid config\n{error}");
            return Outcome::Invalid;
        }
    };
    let probe = probe(config, wait).await;
    let mut outcome = Outcome::Ok;
    for mount in probe.unavailable() {
        outcome = Outcome::Partial;
        let reason = match &mount.outcome {
            MountOutcome::Failed(error) => error.clone(),
            _ => format!(
                "no answer within {} (try --timeout)",
                humantime::format_duration(probe.waited)
            ),
        };
        crate::say_on_stderr!(
            "junction: mount {} is missing from the list: {reason}",
            mount.config.name
        );
    }
    let tools = &probe.catalog.tools;
    let written = if json {
        match serde_json::to_string_pretty(&as_listed(&probe.catalog)) {
            Ok(text) => print_stdout(&format!("{text}\n")),
            Err(error) => {
                crate::say_on_stderr!("junction: cannot write the tools as JSON: {error}");
                Err(Outcome::Unwritten)
            }
        }
    } else {
        let rows: Vec<Vec<String>> = tools
            .iter()
            .map(|tool| {
                let description = tool.description.as_deref().unwrap_or_default();
                vec![tool.name.to_string(), one_line(description)]
            })
            .collect();
        print_stdout(&columns(&rows))
    };
    probe.stop().await;
    written.map_or_else(|unwritten| unwritten, |()| outcome)
}

/// A multi-line description on one line, so each tool is one greppable line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The tools as a client's `tools/list` gets them: with each one's
/// `execution` (2025-11-25 tasks), which rmcp's `Tool` has no field for
/// and the catalog keeps aside.
fn as_listed(catalog: &crate::catalog::MergedCatalog) -> serde_json::Value {
    let listed = rmcp::model::ListToolsResult::with_all_items(catalog.tools.clone());
    crate::downstream::tasks::with_execution(&listed, &catalog.tool_execution)
        .and_then(|mut result| result.get_mut("tools").map(serde_json::Value::take))
        .unwrap_or_else(|| serde_json::to_value(&catalog.tools).unwrap_or_default())
}
