//! `[endpoints.NAME]`: further MCP endpoints, each serving some of the
//! mounts. An endpoint's name is a path segment, checked as a mount name
//! is; its `mounts` must name mounts of this config, each once.

use std::sync::Arc;

use serde_json::Value;

use super::{kind_of, parse_section};
use crate::config::{
    endpoint_path,
    problems::Problems,
    raw::{texts, RawEndpoint},
    EndpointConfig, Problem, ServerConfig,
};
use crate::naming::{is_valid_mount_name, MountName};

/// The endpoints of `value` (the `endpoints` section), checked against
/// `mount_names` (every mount the config names, also one with problems
/// of its own: those are reported where the mount is, not again here).
pub(super) fn resolve_endpoints(
    value: Option<Value>,
    mount_names: &[String],
    problems: &mut Problems,
) -> Vec<EndpointConfig> {
    let tables = match value {
        None => return Vec::new(),
        Some(Value::Object(tables)) => tables,
        Some(other) => {
            problems.push(
                "endpoints",
                format!("expected a table of endpoints, found {}", kind_of(&other)),
            );
            return Vec::new();
        }
    };
    let mut endpoints = Vec::new();
    for (name, table) in tables {
        let path = format!("endpoints.{name}");
        let name_ok = is_valid_mount_name(&name);
        if !name_ok {
            problems.push(
                path.as_str(),
                format!("endpoint name {name:?} must match ^[a-z][a-z0-9-]{{0,31}}$ (it is a path segment of the URL)"),
            );
        }
        // A `mounts` of the wrong kind is reported by the typed read, and
        // left out of what it returns: not missing.
        let written_at_all = table.get("mounts").is_some();
        let Some(raw) = parse_section::<RawEndpoint>(&path, table, problems) else {
            continue;
        };
        let Some(written) = raw.mounts else {
            if !written_at_all {
                problems.push(
                    format!("{path}.mounts"),
                    "missing: the mounts this endpoint serves (`mounts = [\"a\", \"b\"]`)",
                );
            }
            continue;
        };
        let written = texts(written);
        if written.is_empty() {
            problems.push(
                format!("{path}.mounts"),
                "empty: an endpoint serves at least one mount",
            );
            continue;
        }
        let mut mounts: Vec<MountName> = Vec::with_capacity(written.len());
        let mut all_known = true;
        for (at, mount) in written.iter().enumerate() {
            // `.0`, as every list's entry is written (an environment
            // override is then named by its variable).
            let at_path = format!("{path}.mounts.{at}");
            if !mount_names.iter().any(|known| known == mount) {
                all_known = false;
                let known = match mount_names.is_empty() {
                    true => "none is configured".to_owned(),
                    false => format!("mounts: {}", mount_names.join(", ")),
                };
                problems.push(at_path, format!("no mount named {mount:?} ({known})"));
                continue;
            }
            match MountName::new(mount) {
                // A mount with an invalid name is reported where it is.
                Err(_) => all_known = false,
                Ok(mount) if mounts.contains(&mount) => {
                    problems.push(at_path, format!("{:?} is listed twice", mount.as_str()));
                }
                Ok(mount) => mounts.push(mount),
            }
        }
        if name_ok && all_known {
            endpoints.push(EndpointConfig {
                name: Arc::from(name.as_str()),
                mounts,
            });
        }
    }
    endpoints
}

/// An endpoint whose path is the other transport's: its route would never
/// be reached (`server.path = "/mcp"`, `sse_path = "/mcp/sse"` and an
/// endpoint named `sse`).
pub(super) fn check_endpoint_paths(
    endpoints: &[EndpointConfig],
    server: &ServerConfig,
    problems: &mut Problems,
) {
    let Some(sse_path) = &server.sse_path else {
        return;
    };
    for endpoint in endpoints {
        let main = endpoint_path(&server.path, &endpoint.name);
        let older = endpoint_path(sse_path, &endpoint.name);
        let taken = if &main == sse_path {
            Some((main, "server.sse_path"))
        } else if older == server.path {
            Some((older, "server.path"))
        } else {
            None
        };
        if let Some((path, by)) = taken {
            problems.push(
                format!("endpoints.{}", endpoint.name),
                format!("its path {path:?} is {by}'s; name the endpoint otherwise"),
            );
        }
    }
}

/// [`check_endpoint_paths`] on its own, for a reload, which keeps the
/// running `[server]` (and so its paths): the new endpoints must not take
/// one of those.
pub fn endpoint_path_problems(endpoints: &[EndpointConfig], server: &ServerConfig) -> Vec<Problem> {
    let mut problems = Problems::default();
    check_endpoint_paths(endpoints, server, &mut problems);
    problems.into_error("").problems
}
