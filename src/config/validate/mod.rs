//! Raw config → resolved [`Config`], collecting every problem with its path.
//!
//! Each section is deserialized on its own (with `serde_path_to_error`, so a
//! type error names its field) and then checked; a broken mount never hides
//! the problems of the next one. Here: the whole pass and the reading of a
//! section; the sections' own checks are in `server.rs` (`[server]`,
//! `[admin]`, `[telemetry]`), `bounds.rs` (timeouts, supervision, limits),
//! `mount.rs` (one mount) and `namespaces.rs` (across mounts), with the
//! durations and sizes they read in `values.rs`.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{
    defaults,
    problems::{without_the_value, Problems},
    raw::{RawAdmin, RawLimits, RawMount, RawServer, RawSupervision, RawTelemetry, RawTimeouts},
    Config,
};
use crate::naming::Separator;

mod bounds;
mod endpoints;
mod mount;
mod namespaces;
mod server;
mod values;

use bounds::{check_ceiling, resolve_limits, resolve_supervision, resolve_timeouts};
pub use endpoints::endpoint_path_problems;
use endpoints::{check_endpoint_paths, resolve_endpoints};
use mount::resolve_mount;
pub use namespaces::namespace_problems;
use namespaces::{check_namespaces, namespace_of};
pub use server::listen_address;
use server::{admin_listen_problem, resolve_admin, resolve_server, resolve_telemetry};

/// Turns the merged, expanded tree into a [`Config`]. `problems` may already
/// hold problems found earlier (expansion); they are reported with the rest.
pub fn resolve(
    tree: Value,
    mount_order: &[String],
    mut problems: Problems,
) -> Result<Config, Problems> {
    let mut root = match tree {
        Value::Object(root) => root,
        Value::Null => Default::default(),
        other => {
            problems.push(
                "",
                format!(
                    "expected a table at the top level, found {}",
                    kind_of(&other)
                ),
            );
            return Err(problems);
        }
    };
    // A section left empty in YAML (`limits:` with every key commented
    // out) is null: the same as no section.
    let mut section = |name: &str| root.remove(name).filter(|value| !value.is_null());
    let server_value = section("server");
    let mounts_value = section("mounts");
    let telemetry_value = section("telemetry");
    let admin_value = section("admin");
    let timeouts_value = section("timeouts");
    let supervision_value = section("supervision");
    let limits_value = section("limits");
    let endpoints_value = section("endpoints");
    for key in root.keys() {
        problems.push(
            key.as_str(),
            "unknown key (expected `server`, `mounts`, `endpoints`, `timeouts`, `supervision`, `limits`, `telemetry` or `admin`)",
        );
    }
    let raw_timeouts: RawTimeouts = match timeouts_value {
        None => RawTimeouts::default(),
        Some(value) => parse_section("timeouts", value, &mut problems).unwrap_or_default(),
    };
    let (timeouts, timeouts_to_check_against) = resolve_timeouts(raw_timeouts, &mut problems);
    let raw_supervision: RawSupervision = match supervision_value {
        None => RawSupervision::default(),
        Some(value) => parse_section("supervision", value, &mut problems).unwrap_or_default(),
    };
    let supervision = resolve_supervision(raw_supervision, &mut problems);
    let raw_limits: RawLimits = match limits_value {
        None => RawLimits::default(),
        Some(value) => parse_section("limits", value, &mut problems).unwrap_or_default(),
    };
    let limits = resolve_limits(raw_limits, &mut problems);
    let raw_telemetry: RawTelemetry = match telemetry_value {
        None => RawTelemetry::default(),
        Some(value) => parse_section("telemetry", value, &mut problems).unwrap_or_default(),
    };
    let telemetry = resolve_telemetry(raw_telemetry, &mut problems);
    let raw_admin: RawAdmin = match admin_value {
        None => RawAdmin::default(),
        Some(value) => parse_section("admin", value, &mut problems).unwrap_or_default(),
    };
    let admin = resolve_admin(raw_admin, &mut problems);

    let raw_server: RawServer = match server_value {
        None => RawServer::default(),
        Some(value) => parse_section("server", value, &mut problems).unwrap_or_default(),
    };
    // Namespaces are checked with the separator even when another
    // `[server]` field is wrong, so that that problem hides no other.
    let separator = raw_server
        .separator
        .as_deref()
        .map_or_else(|| Separator::new(defaults::SEPARATOR), Separator::new)
        .ok();
    let server = resolve_server(raw_server, &mut problems);
    if let (Some(server), Some(admin)) = (&server, &admin) {
        if let Some(problem) = admin_listen_problem(server.listen, admin) {
            problems.push("admin.listen", problem);
        }
    }

    let mut raw_mounts = match mounts_value {
        None => serde_json::Map::new(),
        Some(Value::Object(mounts)) => mounts,
        Some(other) => {
            problems.push(
                "mounts",
                format!("expected a table of mounts, found {}", kind_of(&other)),
            );
            serde_json::Map::new()
        }
    };
    // Document order first; mounts added only through env overrides follow.
    let mut ordered: Vec<(String, Value)> = Vec::new();
    for name in mount_order {
        if let Some(value) = raw_mounts.remove(name) {
            ordered.push((name.clone(), value));
        }
    }
    let mut remaining: Vec<(String, Value)> = raw_mounts.into_iter().collect();
    remaining.sort_by(|a, b| a.0.cmp(&b.0));
    ordered.extend(remaining);
    let mount_names: Vec<String> = ordered.iter().map(|(name, _)| name.clone()).collect();
    let endpoints = resolve_endpoints(endpoints_value, &mount_names, &mut problems);

    let mut mounts = Vec::new();
    // Every mount's namespace, also of a mount with other problems: a
    // collision is reported with them, not after they are fixed.
    let mut namespaces = Vec::new();
    for (name, value) in ordered {
        let path = format!("mounts.{name}");
        let Some(raw) = parse_section::<RawMount>(&path, value, &mut problems) else {
            continue;
        };
        namespaces.extend(namespace_of(&name, raw.namespace.as_deref()));
        if let Some(mount) = resolve_mount(&name, raw, &mut problems) {
            mounts.push(mount);
        }
    }
    if let Some(timeouts) = &timeouts_to_check_against {
        for mount in &mounts {
            check_ceiling(
                &format!("mounts.{}.timeouts", mount.name),
                &timeouts.for_mount(&mount.timeouts),
                &mount.timeouts,
                &mut problems,
            );
        }
    }

    // A namespace used twice is reported with an invalid separator too.
    let named = namespaces.iter().map(|(name, namespace)| (name, namespace));
    check_namespaces(named, separator.as_ref(), &mut problems);

    if let Some(server) = &server {
        check_endpoint_paths(&endpoints, server, &mut problems);
    }

    match (server, telemetry, admin, timeouts, supervision, limits) {
        (
            Some(server),
            Some(telemetry),
            Some(admin),
            Some(timeouts),
            Some(supervision),
            Some(limits),
        ) if problems.is_empty() => Ok(Config {
            server,
            telemetry,
            admin,
            timeouts,
            supervision,
            limits,
            mounts,
            endpoints,
            as_written: Default::default(),
            overridden: Default::default(),
        }),
        _ => Err(problems),
    }
}

/// What kind of value `value` is, for a problem about it: never the value
/// itself, which `${VAR}` may have filled with a secret.
fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "true or false",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "a table",
    }
}

/// Reads a table (every field optional) into `T`. serde stops at a
/// table's first bad field, so each field is read on its own first: every
/// bad field is reported, and the table is read without them, so that
/// the checks after this one see what is good and report their own
/// problems too.
fn parse_section<T: DeserializeOwned>(
    path: &str,
    value: Value,
    problems: &mut Problems,
) -> Option<T> {
    let value = match value {
        Value::Object(fields) => {
            let mut good = serde_json::Map::new();
            for (key, field) in fields {
                let alone = Value::Object(serde_json::Map::from_iter([(key.clone(), field)]));
                match serde_path_to_error::deserialize::<_, T>(alone.clone()) {
                    Ok(_) => good.extend(alone.as_object().cloned().unwrap_or_default()),
                    Err(error) => {
                        let before = problems.len();
                        let field = alone[key.as_str()].clone();
                        let within_field = |inner: Value| json_object(&key, inner);
                        report_each_member::<T>(
                            path,
                            &within_field,
                            &field,
                            MEMBER_DEPTH,
                            problems,
                        );
                        if problems.len() == before {
                            push_deserialize_problem(path, error, problems);
                        }
                    }
                }
            }
            Value::Object(good)
        }
        other => other,
    };
    match serde_path_to_error::deserialize::<_, T>(value) {
        Ok(parsed) => Some(parsed),
        Err(error) => {
            push_deserialize_problem(path, error, problems);
            None
        }
    }
}

/// How deep [`report_each_member`] looks into a bad field: far enough for
/// `mounts.NAME.timeouts.tools.TOOL`.
const MEMBER_DEPTH: usize = 3;

/// `{key: inner}`.
fn json_object(key: &str, inner: Value) -> Value {
    Value::Object(serde_json::Map::from_iter([(key.to_owned(), inner)]))
}

/// serde stops at a field's first bad member too (`env = { A = [], B = {} }`
/// reports only `A`): reads each member of the bad field `value` on its own,
/// inside the document `wrap` makes of it, and reports every bad one
/// (looking into members that are tables or lists themselves, `depth`
/// levels down). Reports nothing if no member alone is bad: the field is
/// then wrong as a whole, and the caller reports that.
fn report_each_member<T: DeserializeOwned>(
    path: &str,
    wrap: &dyn Fn(Value) -> Value,
    value: &Value,
    depth: usize,
    problems: &mut Problems,
) {
    if depth == 0 {
        return;
    }
    // A list where text goes (`command = [1, 2]`) is wrong as a whole:
    // each member read alone failed the same way, and said so once each.
    let empty = match value {
        Value::Object(_) => Value::Object(serde_json::Map::new()),
        Value::Array(_) => Value::Array(Vec::new()),
        _ => return,
    };
    if serde_path_to_error::deserialize::<_, T>(wrap(empty)).is_err() {
        return;
    }
    type Wrap<'a> = Box<dyn Fn(Value) -> Value + 'a>;
    let members: Vec<(Value, Wrap<'_>)> = match value {
        Value::Object(map) => map
            .iter()
            .map(|(key, member)| {
                let rewrap: Wrap<'_> = Box::new(move |inner| wrap(json_object(key, inner)));
                (member.clone(), rewrap)
            })
            .collect(),
        // Each item alone, in a list of one (its index is put back below).
        Value::Array(items) => items
            .iter()
            .map(|item| {
                let rewrap: Wrap<'_> = Box::new(move |inner| wrap(Value::Array(vec![inner])));
                (item.clone(), rewrap)
            })
            .collect(),
        _ => return,
    };
    let is_list = value.is_array();
    for (index, (member, rewrap)) in members.into_iter().enumerate() {
        let Err(error) = serde_path_to_error::deserialize::<_, T>(rewrap(member.clone())) else {
            continue;
        };
        // Looked into only if its kind fits (an empty one reads): else
        // the member itself is what is wrong (a list where text goes).
        let empty = match &member {
            Value::Object(_) => Some(Value::Object(serde_json::Map::new())),
            Value::Array(_) => Some(Value::Array(Vec::new())),
            _ => None,
        };
        let fits = empty
            .is_some_and(|empty| serde_path_to_error::deserialize::<_, T>(rewrap(empty)).is_ok());
        let before = problems.len();
        if fits {
            report_each_member::<T>(path, &*rewrap, &member, depth - 1, problems);
        }
        if problems.len() == before {
            // The member was read at index 0 of a list of one.
            let inner = field_path(error.path(), is_list.then_some(index));
            problems.push(
                format!("{path}.{inner}"),
                without_the_value(&error.into_inner().to_string()),
            );
        }
    }
}

/// `path` written as every problem's path is (`mounts.m.args.2`, the
/// way figment, `${VAR}` expansion and environment overrides name a
/// field), not serde_path_to_error's `args[2]`: one way to read them, and
/// a problem inside a list set by a variable is told that variable.
/// `list_index`: the index the last list level really had, for a member
/// read alone in a list of one (the config's lists hold text, so a list
/// is always the last level looked into).
fn field_path(path: &serde_path_to_error::Path, list_index: Option<usize>) -> String {
    use serde_path_to_error::Segment;
    let segments: Vec<&Segment> = path.iter().collect();
    let last_list = segments
        .iter()
        .rposition(|segment| matches!(segment, Segment::Seq { .. }));
    segments
        .iter()
        .enumerate()
        .map(|(at, segment)| match segment {
            Segment::Seq { index } => match list_index {
                Some(real) if Some(at) == last_list => real.to_string(),
                _ => index.to_string(),
            },
            Segment::Map { key } => key.clone(),
            Segment::Enum { variant } => variant.clone(),
            Segment::Unknown => "?".to_owned(),
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn push_deserialize_problem(
    path: &str,
    error: serde_path_to_error::Error<serde_json::Error>,
    problems: &mut Problems,
) {
    let inner = field_path(error.path(), None);
    let full = if inner.is_empty() {
        path.to_owned()
    } else {
        format!("{path}.{inner}")
    };
    problems.push(full, without_the_value(&error.into_inner().to_string()));
}
