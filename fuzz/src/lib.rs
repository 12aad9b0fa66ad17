//! Helpers shared by the fuzz targets: building a merged catalog from plain
//! names, and the routing property every target checks.
//!
//! The property is the one `catalog::route` promises: a name resolves the
//! way the lists show it, so whatever mount and upstream name a resolve
//! returns, qualifying that upstream name with the mount's namespace gives
//! back the name the client sent.

use std::sync::Arc;

use junction::{
    catalog::{MergedCatalog, MountCatalog, MountView, Route},
    naming::{MountName, Namespace, Separator},
};
use rmcp::model::{Prompt, Resource, ResourceTemplate, Tool};

/// One mount's catalog with every name used as a tool, a prompt, a
/// resource URI and a template URI.
pub fn view(mount: MountName, namespace: Namespace, names: &[String]) -> MountView {
    MountView {
        mount,
        namespace,
        catalog: Arc::new(MountCatalog {
            tools: names
                .iter()
                .map(|name| Tool::new(name.clone(), "", Arc::new(Default::default())))
                .collect(),
            tool_execution: Default::default(),
            prompts: names
                .iter()
                .map(|name| Prompt::new(name.clone(), None::<String>, None))
                .collect(),
            resources: names.iter().map(|uri| Resource::new(uri, "r")).collect(),
            templates: names
                .iter()
                .map(|uri| ResourceTemplate::new(uri, "t"))
                .collect(),
        }),
        tools: Default::default(),
    }
}

/// Which qualification a name goes through.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Tool,
    Prompt,
    Uri,
}

/// Resolves `name` and, if it routes anywhere, checks the route qualifies
/// back to `name` under that mount's namespace.
pub fn check_route(
    merged: &MergedCatalog,
    views: &[MountView],
    kind: Kind,
    name: &str,
) -> Option<Route> {
    let route = match kind {
        Kind::Tool => merged.resolve_tool(name),
        Kind::Prompt => merged.resolve_prompt(name),
        Kind::Uri => merged.resolve_uri(name),
    }?;
    let view = views
        .iter()
        .find(|view| view.mount == route.mount)
        .expect("a route names a mount of the catalog");
    let back = match kind {
        Kind::Tool | Kind::Prompt => view
            .namespace
            .qualify_name(&merged.naming().separator, &route.original),
        Kind::Uri => view.namespace.qualify_uri(&route.original),
    };
    assert_eq!(
        back, name,
        "{kind:?} {name:?} routed to {route:?}, which qualifies to {back:?}"
    );
    Some(route)
}

/// Whether the config check would accept these namespaces together: no two
/// mounts share a non-empty namespace, and no `namespace + separator` is a
/// prefix of another's (mirrors `config::validate::check_namespaces`).
pub fn namespaces_accepted(namespaces: &[Namespace], separator: &Separator) -> bool {
    let named: Vec<String> = namespaces
        .iter()
        .filter(|namespace| !namespace.is_pass_through())
        .map(|namespace| format!("{namespace}{}", separator.as_str()))
        .collect();
    named.iter().enumerate().all(|(i, a)| {
        named
            .iter()
            .enumerate()
            .all(|(j, b)| i == j || !b.starts_with(a.as_str()))
    })
}
