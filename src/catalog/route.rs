//! Resolving a client-visible name or URI to the mount that serves it.
//!
//! Listed names resolve through the merged index, so collisions resolve the
//! same way the lists do. Names not (yet) listed, such as a tool of a mount
//! whose discovery has not finished or a URI produced by a resource
//! template, resolve by their namespace prefix; pass-through mounts are
//! tried last: the one whose listed template could expand to an unprefixed
//! URI, else the first in config order.

use std::sync::Arc;

use super::{uri_template, MergedCatalog};
use crate::naming::MountName;

/// How a URI's route was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimed {
    /// A mount's list or template names it (lists differ per client).
    Listed,
    /// A mount's namespace prefixes it (the same for every client).
    Namespace,
    /// Nothing claimed it: it went to the first pass-through mount.
    Fallback,
}

/// Where a client-visible name goes: the mount and the upstream's own name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub mount: MountName,
    pub original: Arc<str>,
}

impl MergedCatalog {
    pub fn resolve_tool(&self, name: &str) -> Option<Route> {
        self.resolve_tool_listed(name).map(|(route, _)| route)
    }

    /// `name`'s route, and whether the lists name it (`false`: a name a
    /// namespace merely claims). A tool its mount hides has none.
    pub fn resolve_tool_listed(&self, name: &str) -> Option<(Route, bool)> {
        self.resolve_listed(&self.tool_routes, name)
            .filter(|(_, listed)| *listed || !self.may_be_fitted(name))
            .filter(|(route, _)| self.offers_tool(route))
    }

    /// The mount whose namespace prefixes tool `name`, listed or not.
    pub fn namespace_claiming_tool(&self, name: &str) -> Option<MountName> {
        self.resolve_by_name_prefix(name).map(|route| route.mount)
    }

    /// Whether `name` may be a fitted name ([`crate::tool_name_rule::fit`]):
    /// one of those routes only through the lists. Claimed by its
    /// namespace, it would reach the upstream under its own text (the
    /// hash in it), a tool the client never called; unlisted (the
    /// mount's discovery not done yet), it is an unknown tool.
    pub fn may_be_fitted(&self, name: &str) -> bool {
        self.naming.fit_tool_names_to.is_some() && crate::tool_name_rule::looks_fitted(name)
    }

    /// Whether `route`'s mount offers its tool (a listed one always is).
    fn offers_tool(&self, route: &Route) -> bool {
        // Every call asks: most gateways filter nothing.
        self.tool_filters.is_empty()
            || self
                .tool_filters
                .get(&route.mount)
                .is_none_or(|filter| filter.offers(&route.original))
    }

    pub fn resolve_prompt(&self, name: &str) -> Option<Route> {
        self.resolve_prompt_listed(name).map(|(route, _)| route)
    }

    /// `name`'s route, and whether the lists name it.
    pub fn resolve_prompt_listed(&self, name: &str) -> Option<(Route, bool)> {
        self.resolve_listed(&self.prompt_routes, name)
    }

    /// A name found in `listed` (tools' or prompts' routes), else claimed
    /// by its namespace prefix; `true` for the first.
    fn resolve_listed(&self, listed: &super::Routes, name: &str) -> Option<(Route, bool)> {
        match listed.get(name) {
            Some(route) => Some((route.clone(), true)),
            None => self
                .resolve_by_name_prefix(name)
                .map(|route| (route, false)),
        }
    }

    /// For `resources/read`, subscriptions and `ref/resource` completions.
    pub fn resolve_uri(&self, uri: &str) -> Option<Route> {
        self.resolve_uri_claimed(uri).map(|(route, _)| route)
    }

    /// `uri`'s route, and whether a list, a template or a namespace
    /// claimed it, rather than it falling to the first pass-through mount
    /// because nothing did.
    pub fn resolve_uri_claimed(&self, uri: &str) -> Option<(Route, Claimed)> {
        if let Some(route) = self
            .resource_routes
            .get(uri)
            .or_else(|| self.template_routes.get(uri))
        {
            return Some((route.clone(), Claimed::Listed));
        }
        let prefixed = self.namespaces.iter().find_map(|(namespace, mount)| {
            if namespace.is_pass_through() {
                return None;
            }
            namespace.unqualify_uri(uri).map(|original| Route {
                mount: mount.clone(),
                original: Arc::from(original),
            })
        });
        if let Some(route) = prefixed {
            return Some((route, Claimed::Namespace));
        }
        if let Some(route) = self.resolve_by_pass_through_template(uri) {
            return Some((route, Claimed::Listed));
        }
        self.namespaces
            .iter()
            .find(|(namespace, _)| namespace.is_pass_through())
            .map(|(_, mount)| {
                let route = Route {
                    mount: mount.clone(),
                    original: uri.into(),
                };
                (route, Claimed::Fallback)
            })
    }

    /// An unlisted, unprefixed URI that a pass-through mount's listed
    /// template describes goes to that mount (the first in list order),
    /// not to the first pass-through mount: with two, the second's
    /// template expansions were out of reach.
    fn resolve_by_pass_through_template(&self, uri: &str) -> Option<Route> {
        // With one pass-through mount the fallback picks it anyway.
        let pass_through = self
            .namespaces
            .iter()
            .filter(|(namespace, _)| namespace.is_pass_through())
            .count();
        if pass_through < 2 {
            return None;
        }
        self.templates.iter().find_map(|template| {
            let route = self.template_routes.get(&template.uri_template)?;
            let pass_through = self
                .namespaces
                .iter()
                .any(|(namespace, mount)| *mount == route.mount && namespace.is_pass_through());
            (pass_through && uri_template::could_expand_to(&template.uri_template, uri)).then(
                || Route {
                    mount: route.mount.clone(),
                    original: uri.into(),
                },
            )
        })
    }

    /// A tool or prompt name not in the lists: only a namespaced mount can
    /// claim it, since a pass-through mount would claim every typo.
    fn resolve_by_name_prefix(&self, name: &str) -> Option<Route> {
        self.namespaces.iter().find_map(|(namespace, mount)| {
            if namespace.is_pass_through() {
                return None;
            }
            namespace
                .unqualify_name(&self.naming.separator, name)
                .map(|original| Route {
                    mount: mount.clone(),
                    original: original.into(),
                })
        })
    }
}
