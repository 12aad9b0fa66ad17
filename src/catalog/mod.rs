//! The discovery cache: what each mount offers, merged into what clients see.
//!
//! A [`MountCatalog`] holds one mount's lists in the upstream's own names,
//! exactly as discovered (every page followed). [`MergedCatalog::build`]
//! qualifies the names, drops collisions (first mount in config order wins)
//! and indexes every name for routing. Building is pure: no I/O, no logging;
//! the caller logs the [`Collision`]s it returns. A merged catalog is
//! immutable once built and shared behind an `Arc`, so `list` calls never
//! lock or wake an upstream.

mod page;
mod route;
mod uri_template;

use std::{
    collections::HashMap,
    sync::{Arc, OnceLock},
};

use bytes::Bytes;

use rmcp::model::{
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, Prompt,
    Resource, ResourceTemplate, ServerResult, Tool,
};
use serde_json::Value;

pub use page::{page, PageError, PAGE_SIZE};
pub use route::{Claimed, Route};

use crate::{
    naming::{MountName, Namespace, Naming},
    tool_filter::ToolFilter,
};

/// One mount's lists, in the upstream's own names.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MountCatalog {
    pub tools: Vec<Tool>,
    /// Each tool's `execution` (2025-11-25 task support) by upstream name,
    /// for the tools that declare one: rmcp's `Tool` has no such field.
    pub tool_execution: HashMap<String, Value>,
    pub prompts: Vec<Prompt>,
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
}

/// What goes into a merge: one mount and its current catalog.
#[derive(Debug, Clone)]
pub struct MountView {
    pub mount: MountName,
    pub namespace: Namespace,
    pub catalog: Arc<MountCatalog>,
    /// Which of the catalog's tools the mount offers.
    pub tools: Arc<ToolFilter>,
}

/// The same client-visible name offered by two mounts; `kept` wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collision {
    pub kind: &'static str,
    pub name: String,
    /// The mount and own name of what is served under `name`.
    pub kept: Route,
    /// The mount and own name of what is not.
    pub dropped: Route,
}

impl std::fmt::Display for Collision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kept, dropped) = (&self.kept, &self.dropped);
        write!(
            f,
            "{} {:?} is served by mount {} (its {:?}) and mount {} (its {:?}); keeping mount {}'s",
            self.kind,
            self.name,
            kept.mount,
            kept.original,
            dropped.mount,
            dropped.original,
            kept.mount
        )
    }
}

/// How many of each kind one mount has in the merged lists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListedCounts {
    pub tools: usize,
    pub prompts: usize,
    pub resources: usize,
    pub resource_templates: usize,
}

/// A list's names to their routes, looked up on every routed request.
/// foldhash, seeded per process like SipHash but cheaper on every lookup:
/// the names come from the configured upstreams' lists.
type Routes = foldhash::HashMap<String, Route>;

/// Every mount's lists merged, qualified and indexed.
#[derive(Debug, Default)]
pub struct MergedCatalog {
    /// Unique to this build of the catalog (what it is kept by).
    pub generation: u64,
    /// Each list's names in order, hashed ([`Listing`] order): what its
    /// cursors carry. A cursor stays good across rebuilds that leave its
    /// list as it was (another list's change, another profile's first
    /// discovery, a reload that changed nothing) and across replicas
    /// serving the same lists; it goes stale when its own list changes.
    list_versions: [u64; 4],
    pub tools: Vec<Tool>,
    /// Each listed tool's `execution`, by qualified name, where declared.
    pub tool_execution: HashMap<String, Value>,
    pub prompts: Vec<Prompt>,
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
    naming: Naming,
    /// Mounts in config order, for routing names not in the lists.
    namespaces: Vec<(Namespace, MountName)>,
    /// The mounts that hide some tools, with their filters: a name such a
    /// mount's namespace claims routes only to a tool it offers.
    tool_filters: HashMap<MountName, Arc<ToolFilter>>,
    tool_routes: Routes,
    prompt_routes: Routes,
    resource_routes: Routes,
    template_routes: Routes,
    /// The first page of each list as its `*/list` result in JSON, made on
    /// first use (by [`Listing`]): every client lists them, and the catalog
    /// never changes.
    first_pages: [OnceLock<Option<Bytes>>; 4],
}

/// A version of list `listing` with `names` in this order: the same for
/// the same names in the same order, in any build of this binary.
fn list_version<'a>(listing: Listing, names: impl Iterator<Item = &'a str>) -> u64 {
    use std::hash::{Hash, Hasher};
    // Keys fixed (not `RandomState`): every replica agrees.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (listing as u8).hash(&mut hasher);
    for name in names {
        name.hash(&mut hasher);
    }
    hasher.finish()
}

/// The four lists a client reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    Tools,
    Prompts,
    Resources,
    ResourceTemplates,
}

impl Listing {
    /// The method that lists it.
    pub fn method(self) -> &'static str {
        match self {
            Listing::Tools => "tools/list",
            Listing::Prompts => "prompts/list",
            Listing::Resources => "resources/list",
            Listing::ResourceTemplates => "resources/templates/list",
        }
    }
}

impl MergedCatalog {
    /// Merges `views` (in config order) into one catalog.
    pub fn build(generation: u64, naming: &Naming, views: &[MountView]) -> (Self, Vec<Collision>) {
        let mut merged = MergedCatalog {
            generation,
            naming: naming.clone(),
            namespaces: views
                .iter()
                .map(|view| (view.namespace.clone(), view.mount.clone()))
                .collect(),
            tool_filters: views
                .iter()
                .filter(|view| !view.tools.offers_everything())
                .map(|view| (view.mount.clone(), view.tools.clone()))
                .collect(),
            ..Default::default()
        };
        let mut collisions = Vec::new();
        for view in views {
            // Each offered tool, the name clients see, and whether it was
            // fitted to the client rule (not as qualified).
            let named: Vec<(&Tool, String, bool)> = view
                .catalog
                .tools
                .iter()
                .filter(|tool| view.tools.offers(&tool.name))
                .map(|tool| {
                    let (name, fitted) = naming.served_tool_name(&view.namespace, &tool.name);
                    (tool, name, fitted)
                })
                .collect();
            // A fitted name may be one of the mount's own names that
            // already fit (`get.weather` fitted as `get_weather_9bd2ad39`,
            // and a tool of that name): the one that fits as it is keeps
            // it, whichever the upstream lists first, or what a name
            // reaches would change with the upstream's order.
            let fit_as_they_are: HashMap<&str, &str> =
                match named.iter().any(|(_, _, fitted)| *fitted) {
                    true => named
                        .iter()
                        .filter(|(_, _, fitted)| !fitted)
                        .map(|(tool, name, _)| (name.as_str(), tool.name.as_ref()))
                        .collect(),
                    false => HashMap::new(),
                };
            for (tool, name, fitted) in &named {
                let name = name.clone();
                if let (true, Some(own)) = (fitted, fit_as_they_are.get(name.as_str())) {
                    let kept = merged
                        .tool_routes
                        .get(&name)
                        .cloned()
                        .unwrap_or_else(|| Route {
                            mount: view.mount.clone(),
                            original: Arc::from(*own),
                        });
                    collisions.push(Collision {
                        kind: "tool",
                        name,
                        kept,
                        dropped: Route {
                            mount: view.mount.clone(),
                            original: Arc::from(tool.name.as_ref()),
                        },
                    });
                    continue;
                }
                if let Some(kept) = claim(&mut merged.tool_routes, &name, view, &tool.name) {
                    collisions.push(collision("tool", name, kept, view, &tool.name));
                    continue;
                }
                if let Some(execution) = view.catalog.tool_execution.get(tool.name.as_ref()) {
                    merged
                        .tool_execution
                        .insert(name.clone(), execution.clone());
                }
                let mut tool = Tool::clone(tool);
                tool.name = name.into();
                if let Some(meta) = tool.meta.as_mut() {
                    crate::rewrite::qualify_ui_meta(&view.namespace, meta);
                }
                merged.tools.push(tool);
            }
            for prompt in &view.catalog.prompts {
                let name = naming.prompt_name(&view.namespace, &prompt.name);
                if let Some(kept) = claim(&mut merged.prompt_routes, &name, view, &prompt.name) {
                    collisions.push(collision("prompt", name, kept, view, &prompt.name));
                    continue;
                }
                let mut prompt = prompt.clone();
                prompt.name = name;
                merged.prompts.push(prompt);
            }
            for resource in &view.catalog.resources {
                let uri = view.namespace.qualify_uri(&resource.uri);
                if let Some(kept) = claim(&mut merged.resource_routes, &uri, view, &resource.uri) {
                    collisions.push(collision("resource", uri, kept, view, &resource.uri));
                    continue;
                }
                let mut resource = resource.clone();
                resource.uri = uri;
                merged.resources.push(resource);
            }
            for template in &view.catalog.templates {
                let uri = view.namespace.qualify_uri(&template.uri_template);
                let original = &template.uri_template;
                if let Some(kept) = claim(&mut merged.template_routes, &uri, view, original) {
                    collisions.push(collision("resource template", uri, kept, view, original));
                    continue;
                }
                let mut template = template.clone();
                template.uri_template = uri;
                merged.templates.push(template);
            }
        }
        merged.list_versions = [
            list_version(Listing::Tools, merged.tools.iter().map(|t| t.name.as_ref())),
            list_version(
                Listing::Prompts,
                merged.prompts.iter().map(|p| p.name.as_str()),
            ),
            list_version(
                Listing::Resources,
                merged.resources.iter().map(|r| r.uri.as_str()),
            ),
            list_version(
                Listing::ResourceTemplates,
                merged.templates.iter().map(|t| t.uri_template.as_str()),
            ),
        ];
        (merged, collisions)
    }

    /// How its names were made.
    pub fn naming(&self) -> &Naming {
        &self.naming
    }

    /// What `mount` has in these lists: a name it shares with an earlier
    /// mount (or a fitted twin, see `naming.rs`) is served by the other,
    /// so its own catalog may hold more. For the status page, not a
    /// request's path: it walks every route.
    pub fn listed_of(&self, mount: &MountName) -> ListedCounts {
        let count = |routes: &Routes| {
            routes
                .values()
                .filter(|route| route.mount == *mount)
                .count()
        };
        ListedCounts {
            tools: count(&self.tool_routes),
            prompts: count(&self.prompt_routes),
            resources: count(&self.resource_routes),
            resource_templates: count(&self.template_routes),
        }
    }

    /// The page of `tools` that starts at `cursor` (the first without one).
    pub fn tools_page(&self, cursor: Option<&str>) -> Result<ListToolsResult, PageError> {
        let (items, next) = page(
            &self.tools,
            self.list_versions[Listing::Tools as usize],
            cursor,
            PAGE_SIZE,
        )?;
        let mut result = ListToolsResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    /// The page of `prompts` that starts at `cursor`.
    pub fn prompts_page(&self, cursor: Option<&str>) -> Result<ListPromptsResult, PageError> {
        let (items, next) = page(
            &self.prompts,
            self.list_versions[Listing::Prompts as usize],
            cursor,
            PAGE_SIZE,
        )?;
        let mut result = ListPromptsResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    /// The page of `resources` that starts at `cursor`.
    pub fn resources_page(&self, cursor: Option<&str>) -> Result<ListResourcesResult, PageError> {
        let (items, next) = page(
            &self.resources,
            self.list_versions[Listing::Resources as usize],
            cursor,
            PAGE_SIZE,
        )?;
        let mut result = ListResourcesResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    /// The page of resource `templates` that starts at `cursor`.
    pub fn templates_page(
        &self,
        cursor: Option<&str>,
    ) -> Result<ListResourceTemplatesResult, PageError> {
        let (items, next) = page(
            &self.templates,
            self.list_versions[Listing::ResourceTemplates as usize],
            cursor,
            PAGE_SIZE,
        )?;
        let mut result = ListResourceTemplatesResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    /// The first page of `listing`, serialized once for this catalog
    /// (`downstream/prebuilt.rs` answers with it), as rmcp's handler
    /// shapes a page for the protocol versions the gateway offers (none
    /// newer than 2025-11-25): without `resultType`, which only 2026-07-28
    /// has and rmcp's typed results carry, and without a tool's non-object
    /// `outputSchema`.
    pub fn first_page_json(&self, listing: Listing) -> Option<Bytes> {
        self.first_pages[listing as usize]
            .get_or_init(|| {
                let mut page = match listing {
                    Listing::Tools => ServerResult::ListToolsResult(self.tools_page(None).ok()?),
                    Listing::Prompts => {
                        ServerResult::ListPromptsResult(self.prompts_page(None).ok()?)
                    }
                    Listing::Resources => {
                        ServerResult::ListResourcesResult(self.resources_page(None).ok()?)
                    }
                    Listing::ResourceTemplates => {
                        ServerResult::ListResourceTemplatesResult(self.templates_page(None).ok()?)
                    }
                };
                page.strip_result_type_for_legacy_peer();
                page.strip_non_object_output_for_legacy_peer();
                serde_json::to_vec(&page).ok().map(Bytes::from)
            })
            .clone()
    }
}

/// Records `name` for `view` unless taken; returns the mount that has it.
fn claim(routes: &mut Routes, name: &str, view: &MountView, original: &str) -> Option<Route> {
    if let Some(existing) = routes.get(name) {
        return Some(existing.clone());
    }
    routes.insert(
        name.to_owned(),
        Route {
            mount: view.mount.clone(),
            original: original.into(),
        },
    );
    None
}

/// `view`'s `original`, named `name` as `kept` is, is not served.
fn collision(
    kind: &'static str,
    name: String,
    kept: Route,
    view: &MountView,
    original: &str,
) -> Collision {
    Collision {
        kind,
        name,
        kept,
        dropped: Route {
            mount: view.mount.clone(),
            original: Arc::from(original),
        },
    }
}

#[cfg(test)]
mod tests;
