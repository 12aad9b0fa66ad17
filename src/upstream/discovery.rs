//! Reading an upstream's lists into a [`MountCatalog`].
//!
//! Only lists the upstream declared a capability for are requested (asking
//! for others gets "method not found" from strict servers); a server with
//! `resources` but no templates handler has no templates. Every
//! `nextCursor` is followed, so no page is dropped, up to [`MAX_PAGES`]
//! per list (rmcp's `list_all_*` follow a server that never stops handing
//! out cursors for ever). Tools keep each one's `execution` (2025-11-25),
//! which rmcp's `Tool` has no field for, from the upstream's own answer.

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    time::Duration,
};

use rmcp::{
    model::{Cursor, PaginatedRequestParams, Tool},
    service::ServiceError,
};
use serde_json::Value;

use super::{ListKind, UpstreamSession};
use crate::catalog::MountCatalog;

/// More pages than this of one list means a server that keeps handing out
/// cursors: what was read is kept.
const MAX_PAGES: usize = 1000;

/// How long reading lists may take: each page within `page` (the
/// mount's request timeout: an answer to one request is waited for no
/// longer), and all of it within `whole` (`request_ceiling`). A bound on
/// the whole alone cut off a server with many pages that answers each in
/// time, and reported it as silent.
#[derive(Debug, Clone, Copy)]
pub struct ListLimits {
    pub page: Duration,
    pub whole: Duration,
}

/// Why a list could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// Said with its causes, which are not its source: rmcp's text for a
    /// transport error names the transport's Rust type.
    #[error("{}", super::http_client::with_causes(.0))]
    Upstream(ServiceError),
    #[error("no answer to {list} within {}", humantime::format_duration(*.within))]
    PageUnanswered {
        list: &'static str,
        within: Duration,
    },
    #[error("its lists were not all read within {} (request_ceiling)", humantime::format_duration(*.0))]
    TooLong(Duration),
}

impl From<ServiceError> for ListError {
    fn from(error: ServiceError) -> Self {
        ListError::Upstream(error)
    }
}

/// Reads every list the upstream offers.
pub async fn discover(
    session: &UpstreamSession,
    limits: ListLimits,
) -> Result<MountCatalog, ListError> {
    let read = async {
        let mut catalog = MountCatalog::default();
        for kind in [ListKind::Tools, ListKind::Prompts, ListKind::Resources] {
            refresh(session, kind, &mut catalog, limits.page).await?;
        }
        Ok(catalog)
    };
    tokio::time::timeout(limits.whole, read)
        .await
        .unwrap_or(Err(ListError::TooLong(limits.whole)))
}

/// The items of every page of one list, `list` naming it in errors and
/// warnings: each page answered within `page_limit`; what was read is
/// kept when the upstream still has more after [`MAX_PAGES`], or hands
/// out a cursor it gave before (it would go round for ever). Of items
/// sharing a `key` (a name listed twice) the first is kept.
async fn all_pages<T, Page>(
    session: &UpstreamSession,
    list: &'static str,
    page_limit: Duration,
    key: impl Fn(&T) -> &str,
    mut read_page: impl FnMut(Option<PaginatedRequestParams>) -> Page,
) -> Result<Vec<T>, ListError>
where
    Page: Future<Output = Result<(Vec<T>, Option<Cursor>), ServiceError>>,
{
    let mut items = Vec::new();
    let mut cursor = None;
    let mut given = HashSet::new();
    let mut ended = false;
    for _ in 0..MAX_PAGES {
        let params =
            cursor.map(|cursor| PaginatedRequestParams::default().with_cursor(Some(cursor)));
        let (page, next) = tokio::time::timeout(page_limit, read_page(params))
            .await
            .map_err(|_| ListError::PageUnanswered {
                list,
                within: page_limit,
            })??;
        items.extend(page);
        match next {
            None => {
                ended = true;
                break;
            }
            Some(next) if !given.insert(next.clone()) => {
                tracing::warn!(mount = %session.mount(), cursor = %next, "{list}: the upstream handed out a cursor it gave before; keeping what was read");
                ended = true;
                break;
            }
            next => cursor = next,
        }
    }
    if !ended {
        tracing::warn!(mount = %session.mount(), "{list} still had more pages after {MAX_PAGES}; keeping what was read");
    }
    keep_first(session.mount(), list, &mut items, key);
    Ok(items)
}

/// Every page of the upstream's tools, and the `execution` of those that
/// declare one.
async fn all_tools(
    session: &UpstreamSession,
    page_limit: Duration,
) -> Result<(Vec<Tool>, HashMap<String, Value>), ListError> {
    let pages = all_pages(
        session,
        "tools/list",
        page_limit,
        tool_name,
        |params| async move {
            let (page, raw) = session
                .list_tools_page(params.and_then(|params| params.cursor))
                .await?;
            let raw_tools = raw.as_ref().and_then(|raw| raw.get("tools")?.as_array());
            // By name, the first of a name only: a name listed twice is kept
            // in its first place (`all_pages`), with its own `execution`, not
            // a later one's.
            let mut execution: HashMap<&str, Option<&Value>> = HashMap::new();
            for tool in raw_tools.into_iter().flatten() {
                if let Some(name) = tool.get("name").and_then(Value::as_str) {
                    execution.entry(name).or_insert(tool.get("execution"));
                }
            }
            let tools = page
                .tools
                .into_iter()
                .map(|tool| {
                    let declared = execution
                        .get(tool.name.as_ref())
                        .copied()
                        .flatten()
                        .cloned();
                    (legacy_output_schema(tool), declared)
                })
                .collect();
            Ok((tools, page.next_cursor))
        },
    )
    .await?;
    let mut execution = HashMap::new();
    let tools = pages
        .into_iter()
        .map(|(tool, declared)| {
            if let Some(declared) = declared {
                execution.insert(tool.name.to_string(), declared);
            }
            tool
        })
        .collect();
    Ok((tools, execution))
}

/// `tool` as clients before 2026-07-28 may see it (every client: the
/// gateway offers none newer): an `outputSchema` whose root is not an
/// object is dropped, as rmcp's handler drops it from every `tools/list`
/// answer it writes. Done here, once, so that every path that lists tools
/// (prebuilt pages, rmcp's, the raw one with `execution`) agrees.
fn legacy_output_schema(mut tool: Tool) -> Tool {
    tool.output_schema
        .take_if(|schema| schema.get("type").and_then(Value::as_str) != Some("object"));
    tool
}

/// Re-reads one list into `catalog`, leaving the others as they are, each
/// page answered within `page_limit`.
async fn refresh(
    session: &UpstreamSession,
    kind: ListKind,
    catalog: &mut MountCatalog,
    page_limit: Duration,
) -> Result<(), ListError> {
    let peer = session.peer();
    let capabilities = peer.peer_info().map(|info| info.capabilities.clone());
    let declared = |check: fn(&rmcp::model::ServerCapabilities) -> bool| {
        capabilities.as_ref().is_some_and(check)
    };
    match kind {
        ListKind::Tools => {
            (catalog.tools, catalog.tool_execution) = if declared(|c| c.tools.is_some()) {
                all_tools(session, page_limit).await?
            } else {
                Default::default()
            };
        }
        ListKind::Prompts => {
            catalog.prompts = if declared(|c| c.prompts.is_some()) {
                all_pages(
                    session,
                    "prompts/list",
                    page_limit,
                    prompt_name,
                    |params| async move {
                        let page = peer.list_prompts(params).await?;
                        Ok((page.prompts, page.next_cursor))
                    },
                )
                .await?
            } else {
                Vec::new()
            };
        }
        ListKind::Resources => {
            if declared(|c| c.resources.is_some()) {
                catalog.resources = all_pages(
                    session,
                    "resources/list",
                    page_limit,
                    resource_uri,
                    |params| async move {
                        let page = peer.list_resources(params).await?;
                        Ok((page.resources, page.next_cursor))
                    },
                )
                .await?;
                let templates = all_pages(
                    session,
                    "resources/templates/list",
                    page_limit,
                    template_uri,
                    |params| async move {
                        let page = peer.list_resource_templates(params).await?;
                        Ok((page.resource_templates, page.next_cursor))
                    },
                );
                catalog.templates = match templates.await {
                    // The SDKs' low-level servers declare `resources` with
                    // only a list and a read handler: no templates, not a
                    // broken server.
                    Err(ListError::Upstream(ServiceError::McpError(error)))
                        if error.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND =>
                    {
                        tracing::debug!(mount = %session.mount(), "resources/templates/list: method not found; no templates");
                        Vec::new()
                    }
                    templates => templates?,
                };
            } else {
                catalog.resources = Vec::new();
                catalog.templates = Vec::new();
            }
        }
    }
    Ok(())
}

/// What names an entry of each list (the keys of [`all_pages`]).
fn tool_name((tool, _): &(Tool, Option<Value>)) -> &str {
    &tool.name
}

fn prompt_name(prompt: &rmcp::model::Prompt) -> &str {
    &prompt.name
}

fn resource_uri(resource: &rmcp::model::Resource) -> &str {
    &resource.uri
}

fn template_uri(template: &rmcp::model::ResourceTemplate) -> &str {
    &template.uri_template
}

/// Keeps the first of the entries of a list that share a name (or URI),
/// warning of the others. A server listing a name twice breaks the spec's
/// uniqueness; only one of them can be routed to, and counting both
/// (`/status.json`) would tell of a tool nobody can call.
fn keep_first<T>(
    mount: &crate::naming::MountName,
    list: &str,
    entries: &mut Vec<T>,
    key: impl Fn(&T) -> &str,
) {
    let keep: Vec<bool> = {
        let mut seen = HashSet::with_capacity(entries.len());
        entries
            .iter()
            .map(|entry| seen.insert(key(entry)))
            .collect()
    };
    if keep.iter().all(|kept| *kept) {
        return;
    }
    let repeated: Vec<String> = entries
        .iter()
        .zip(&keep)
        .filter(|(_, kept)| !**kept)
        .map(|(entry, _)| key(entry).to_owned())
        .collect();
    tracing::warn!(%mount, ?repeated, "{list}: the upstream lists these names more than once; keeping the first of each");
    let mut keep = keep.into_iter();
    entries.retain(|_| keep.next().unwrap_or(true));
}

/// How one refresh of a list after `list_changed` went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refreshed {
    /// The list is read and stored: it changed.
    Done,
    /// The list is read, and is as it was.
    Unchanged,
    /// The live session failed to list: worth trying again.
    Failed,
    /// Nothing to refresh any more: the session or its mount is gone, or
    /// was replaced (its successor discovers anew).
    Moot,
}

/// A failed refresh is tried again this many times, after this long,
/// doubled each time (1 + 2 + 4 s).
const REFRESH_RETRIES: u32 = 3;
const REFRESH_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs `refresh` until it is done or moot, trying a failure again a few
/// times, further apart; how the last try went. A server announces a
/// change once: a refresh that failed on a live session (an error, an
/// answer too slow) left the list stale until the next announcement or
/// restart, which may never come.
pub async fn refresh_retrying<F, Fut>(mut refresh: F) -> Refreshed
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Refreshed>,
{
    let mut retry = 0;
    loop {
        let refreshed = refresh().await;
        if refreshed != Refreshed::Failed || retry == REFRESH_RETRIES {
            return refreshed;
        }
        tokio::time::sleep(REFRESH_RETRY_AFTER * 2u32.pow(retry)).await;
        retry += 1;
    }
}

/// How long a list's refreshes pause between one that found the list
/// unchanged and the next: a server that announces a change with every
/// list it answers (or on every call) would otherwise have its lists read
/// back to back for as long as it lives.
pub const UNCHANGED_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// One list read afresh after the upstream said it changed, within
/// `limits`: an upstream that announces a change and then never answers
/// must not hold the list's refresh (and what the refresh holds) for ever.
pub async fn refresh_within(
    session: &UpstreamSession,
    kind: ListKind,
    limits: ListLimits,
) -> Result<MountCatalog, String> {
    let mut fresh = MountCatalog::default();
    let read = refresh(session, kind, &mut fresh, limits.page);
    match tokio::time::timeout(limits.whole, read)
        .await
        .unwrap_or(Err(ListError::TooLong(limits.whole)))
    {
        Ok(()) => Ok(fresh),
        Err(error) => Err(super::http_client::with_causes(&error)),
    }
}

/// Whether `old` and `new` list something different of `kind`
/// (`execution` is kept beside the tools, rmcp's `Tool` having no field for
/// it: a change to it alone is a change too).
pub fn differs(old: &MountCatalog, new: &MountCatalog, kind: ListKind) -> bool {
    match kind {
        ListKind::Tools => old.tools != new.tools || old.tool_execution != new.tool_execution,
        ListKind::Prompts => old.prompts != new.prompts,
        ListKind::Resources => old.resources != new.resources || old.templates != new.templates,
    }
}

/// Copies the `kind` lists of `fresh` into `catalog`, leaving the others.
/// Refreshes of different lists run concurrently; each must write back
/// only its own list, or the slower one would put back a stale copy of the
/// other's.
pub fn replace_kind(catalog: &mut MountCatalog, kind: ListKind, fresh: MountCatalog) {
    match kind {
        ListKind::Tools => {
            catalog.tools = fresh.tools;
            catalog.tool_execution = fresh.tool_execution;
        }
        ListKind::Prompts => catalog.prompts = fresh.prompts,
        ListKind::Resources => {
            catalog.resources = fresh.resources;
            catalog.templates = fresh.templates;
        }
    }
}

#[cfg(test)]
#[test]
fn only_object_output_schemas_are_kept() {
    let tool = |schema: Value| {
        let mut tool = Tool::new("t", "", serde_json::Map::new());
        tool.output_schema = schema.as_object().cloned().map(std::sync::Arc::new);
        tool
    };
    let object = serde_json::json!({"type": "object", "properties": {}});
    assert!(legacy_output_schema(tool(object)).output_schema.is_some());
    for dropped in [
        serde_json::json!({"type": "array", "items": {}}),
        serde_json::json!({"oneOf": [{"type": "object"}]}),
    ] {
        assert!(legacy_output_schema(tool(dropped)).output_schema.is_none());
    }
}

#[cfg(test)]
#[test]
fn a_name_listed_twice_is_kept_once_in_its_first_place() {
    let mount = crate::naming::MountName::new("m").unwrap();
    let mut names = vec!["a", "b", "a", "c", "b", "a"];
    keep_first(&mount, "tools/list", &mut names, |name| name);
    assert_eq!(names, ["a", "b", "c"]);
    let mut unique = vec!["x", "y"];
    keep_first(&mount, "tools/list", &mut unique, |name| name);
    assert_eq!(unique, ["x", "y"]);
}

/// A list that failed on the transport says what happened, not rmcp's
/// "Transport send error: Transport [junction::upstream::…] error: ".
#[cfg(test)]
#[test]
fn a_transport_failure_is_said_without_rust_type_names() {
    let inner = std::io::Error::other("answer larger than 16777216 bytes");
    let error = ListError::from(ServiceError::TransportSend(
        rmcp::transport::DynamicTransportError::from_parts(
            "junction::upstream::ordered::OrderedTransport<…>",
            std::any::TypeId::of::<()>(),
            Box::new(inner),
        ),
    ));
    let said = crate::upstream::http_client::with_causes(&error);
    assert_eq!(said, "answer larger than 16777216 bytes");
}
