//! Merge and routing tests: one `merge` helper builds catalogs from names.

use std::sync::Arc;

use rmcp::model::{Prompt, Resource, ResourceTemplate, Tool};

use super::*;
use crate::tool_filter::ToolFilter;

fn tool(name: &str) -> Tool {
    Tool::new(name.to_owned(), "", Arc::new(Default::default()))
}

fn view(mount: &str, namespace: &str, tools: &[&str], uris: &[&str]) -> MountView {
    MountView {
        mount: MountName::new(mount).unwrap(),
        namespace: Namespace::new(namespace).unwrap(),
        catalog: Arc::new(MountCatalog {
            tools: tools.iter().map(|name| tool(name)).collect(),
            prompts: tools
                .iter()
                .map(|name| Prompt::new(*name, None::<String>, None))
                .collect(),
            resources: uris.iter().map(|uri| Resource::new(*uri, "r")).collect(),
            templates: vec![ResourceTemplate::new("tmpl://{id}", "t")],
            tool_execution: HashMap::new(),
        }),
        tools: Default::default(),
    }
}

fn merge(views: &[MountView]) -> (MergedCatalog, Vec<Collision>) {
    MergedCatalog::build(1, &Naming::default(), views)
}

fn tool_names(merged: &MergedCatalog) -> Vec<&str> {
    merged.tools.iter().map(|tool| tool.name.as_ref()).collect()
}

fn route(mount: &str, original: &str) -> Option<Route> {
    Some(Route {
        mount: MountName::new(mount).unwrap(),
        original: original.into(),
    })
}

#[test]
fn names_are_qualified_per_mount() {
    let (merged, collisions) = merge(&[
        view("alpha", "alpha", &["echo", "add"], &["demo://x"]),
        view("beta", "b", &["echo"], &[]),
    ]);
    assert!(collisions.is_empty());
    assert_eq!(
        tool_names(&merged),
        ["alpha__echo", "alpha__add", "b__echo"]
    );
    assert_eq!(merged.resources[0].uri, "alpha+demo://x");
    assert_eq!(merged.templates[0].uri_template, "alpha+tmpl://{id}");
    assert_eq!(merged.templates[1].uri_template, "b+tmpl://{id}");
    assert_eq!(merged.resolve_tool("b__echo"), route("beta", "echo"));
    assert_eq!(merged.resolve_prompt("alpha__add"), route("alpha", "add"));
    assert_eq!(
        merged.resolve_uri("alpha+demo://x"),
        route("alpha", "demo://x")
    );
}

#[test]
fn unlisted_names_route_by_prefix() {
    let (merged, _) = merge(&[view("alpha", "alpha", &[], &[])]);
    assert_eq!(merged.resolve_tool("alpha__later"), route("alpha", "later"));
    assert_eq!(
        merged.resolve_uri("alpha+tmpl://7"),
        route("alpha", "tmpl://7")
    );
    assert_eq!(merged.resolve_tool("other__x"), None);
    assert_eq!(merged.resolve_tool("later"), None);
    assert_eq!(merged.resolve_uri("tmpl://7"), None);
}

fn filtered(mut view: MountView, include: Option<&[&str]>, exclude: &[&str]) -> MountView {
    let owned = |patterns: &[&str]| patterns.iter().map(|p| p.to_string()).collect();
    view.tools = Arc::new(ToolFilter::new(include.map(owned), owned(exclude)));
    view
}

#[test]
fn hidden_tools_are_neither_listed_nor_routed() {
    let (merged, collisions) = merge(&[
        filtered(
            view(
                "alpha",
                "alpha",
                &["get_a", "get_b", "delete_a", "echo"],
                &[],
            ),
            Some(&["get_*", "delete_*"]),
            &["delete_*"],
        ),
        view("beta", "beta", &["delete_a"], &[]),
    ]);
    assert!(collisions.is_empty());
    assert_eq!(
        tool_names(&merged),
        ["alpha__get_a", "alpha__get_b", "beta__delete_a"]
    );
    assert_eq!(merged.resolve_tool("alpha__get_a"), route("alpha", "get_a"));
    assert_eq!(
        merged.resolve_tool_listed("alpha__get_later"),
        Some((route("alpha", "get_later").unwrap(), false)),
        "a name the namespace claims still routes when the filter offers it"
    );
    for hidden in ["alpha__delete_a", "alpha__echo", "alpha__later"] {
        assert_eq!(merged.resolve_tool(hidden), None, "{hidden}");
    }
    assert_eq!(
        merged.resolve_tool("beta__delete_a"),
        route("beta", "delete_a")
    );
    // Only tools: the filtered mount's prompts of the same names stay.
    assert_eq!(merged.resolve_prompt("alpha__echo"), route("alpha", "echo"));
    assert_eq!(merged.prompts.len(), 5);
}

#[test]
fn a_hidden_pass_through_tool_leaves_its_name_to_the_next_mount() {
    let (merged, collisions) = merge(&[
        filtered(view("one", "", &["echo", "add"], &[]), None, &["echo"]),
        view("two", "", &["echo"], &[]),
    ]);
    assert_eq!(tool_names(&merged), ["add", "echo"]);
    assert_eq!(merged.resolve_tool("echo"), route("two", "echo"));
    assert!(
        !collisions.iter().any(|c| c.kind == "tool"),
        "{collisions:?}"
    );
}

#[test]
fn pass_through_collisions_keep_the_first_mount() {
    let (merged, collisions) = merge(&[
        view("one", "", &["echo", "only-one"], &["demo://x"]),
        view("two", "", &["echo", "only-two"], &["demo://x"]),
    ]);
    assert_eq!(tool_names(&merged), ["echo", "only-one", "only-two"]);
    assert_eq!(merged.resolve_tool("echo"), route("one", "echo"));
    assert_eq!(merged.resolve_tool("only-two"), route("two", "only-two"));
    assert_eq!(merged.resolve_uri("demo://x"), route("one", "demo://x"));
    assert_eq!(
        merged.resolve_uri("demo://unlisted"),
        route("one", "demo://unlisted")
    );
    let kinds: Vec<_> = collisions
        .iter()
        .map(|c| {
            let (kept, dropped) = (c.kept.mount.as_str(), c.dropped.mount.as_str());
            (c.kind, c.name.as_str(), kept, dropped)
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("tool", "echo", "one", "two"),
            ("prompt", "echo", "one", "two"),
            ("resource", "demo://x", "one", "two"),
            ("resource template", "tmpl://{id}", "one", "two"),
        ]
    );
}

/// With two pass-through mounts, a URI that only the second's template
/// describes goes to the second, not to the first by default.
#[test]
fn an_unlisted_uri_goes_to_the_pass_through_mount_whose_template_fits() {
    let with_template = |mount: &str, template: &str| {
        let mut view = view(mount, "", &[], &[]);
        let catalog = Arc::make_mut(&mut view.catalog);
        catalog.templates = vec![ResourceTemplate::new(template, "t")];
        view
    };
    let (merged, _) = merge(&[
        with_template("one", "notes://{id}"),
        with_template("two", "report://{id}"),
    ]);
    assert_eq!(merged.resolve_uri("report://7"), route("two", "report://7"));
    assert_eq!(merged.resolve_uri("notes://7"), route("one", "notes://7"));
    // What no template describes still goes to the first.
    assert_eq!(
        merged.resolve_uri("report://7/pages"),
        route("one", "report://7/pages")
    );
}

#[test]
fn a_pass_through_name_can_collide_with_a_qualified_one() {
    let (merged, collisions) = merge(&[
        view("a", "a", &["x"], &[]),
        view("raw", "", &["a__x", "y"], &[]),
    ]);
    assert_eq!(tool_names(&merged), ["a__x", "y"]);
    assert_eq!(merged.resolve_tool("a__x"), route("a", "x"));
    assert_eq!(collisions[0].dropped, route("raw", "a__x").unwrap());
    assert_eq!(
        collisions[0].to_string(),
        "tool \"a__x\" is served by mount a (its \"x\") and mount raw (its \"a__x\"); keeping mount a's"
    );
}

/// Each prebuilt first page is the typed first page as rmcp's handler
/// sends it to a client of the versions the gateway offers: without
/// `resultType` (2026-07-28's), which the prebuilt pages carried while
/// every later page, sent through rmcp, did not.
#[test]
fn each_prebuilt_first_page_is_the_typed_first_page_as_rmcp_sends_it() {
    use rmcp::model::ServerResult;
    let (merged, _) = merge(&[
        view("a", "a", &["one", "two"], &["file:///x"]),
        view("b", "b", &["three"], &[]),
    ]);
    let as_sent = |mut result: ServerResult| {
        result.strip_result_type_for_legacy_peer();
        result.strip_non_object_output_for_legacy_peer();
        serde_json::to_vec(&result).unwrap()
    };
    for (listing, typed) in [
        (
            Listing::Tools,
            ServerResult::ListToolsResult(merged.tools_page(None).unwrap()),
        ),
        (
            Listing::Prompts,
            ServerResult::ListPromptsResult(merged.prompts_page(None).unwrap()),
        ),
        (
            Listing::Resources,
            ServerResult::ListResourcesResult(merged.resources_page(None).unwrap()),
        ),
        (
            Listing::ResourceTemplates,
            ServerResult::ListResourceTemplatesResult(merged.templates_page(None).unwrap()),
        ),
    ] {
        let prebuilt = merged.first_page_json(listing).expect("serialized");
        assert_eq!(&prebuilt[..], &as_sent(typed)[..], "{listing:?}");
        let page: serde_json::Value = serde_json::from_slice(&prebuilt).unwrap();
        assert!(page.get("resultType").is_none(), "{listing:?}: {page}");
    }
    let prebuilt = merged.first_page_json(Listing::Tools).expect("serialized");
    let again = merged.first_page_json(Listing::Tools).expect("serialized");
    assert_eq!(prebuilt.as_ptr(), again.as_ptr(), "made once, then shared");
}

/// A cursor pages through its own list: it stays good across rebuilds that
/// leave that list as it was (another list changed, another profile was
/// discovered, a reload changed nothing) and goes stale when it changes.
/// It was refused after any rebuild, with no `list_changed` to say why.
#[test]
fn a_cursor_outlives_rebuilds_that_leave_its_list_as_it_was() {
    let names: Vec<String> = (0..PAGE_SIZE + 5).map(|n| format!("t{n}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let build = |generation, tools: &[&str], uris: &[&str]| {
        MergedCatalog::build(
            generation,
            &Naming::default(),
            &[view("m", "m", tools, uris)],
        )
        .0
    };
    let first = build(1, &names, &["a://1"]);
    let cursor = first
        .tools_page(None)
        .unwrap()
        .next_cursor
        .expect("a second page");
    // Another list changed; a later generation.
    let resources_changed = build(2, &names, &["a://1", "a://2"]);
    let rest = resources_changed.tools_page(Some(&cursor)).unwrap();
    assert_eq!(rest.tools.len(), 5);
    assert!(rest.next_cursor.is_none());
    // Its own list changed.
    let tools_changed = build(3, &names[1..], &["a://1"]);
    assert_eq!(
        tools_changed.tools_page(Some(&cursor)).unwrap_err(),
        page::PageError::Stale(cursor.clone())
    );
    // Not another list's cursor, though at the same offset.
    let prompt_cursor = first.prompts_page(None).unwrap().next_cursor.unwrap();
    assert!(first.tools_page(Some(&prompt_cursor)).is_err());
}

/// With `fit_tool_names`, a tool name clients would refuse is listed as
/// one that fits, routes back to the upstream's own name, and a name that
/// already fits is left alone; prompts keep their qualified names.
#[test]
fn fitted_tool_names_are_listed_and_route_back_to_the_upstreams_names() {
    let long = format!("export_{}", "quarterly_".repeat(6));
    let naming = Naming {
        fit_tool_names_to: Some(64),
        ..Naming::default()
    };
    let (merged, collisions) = MergedCatalog::build(
        1,
        &naming,
        &[view(
            "m",
            "m",
            &["get.weather", "get_weather", &long, "echo"],
            &[],
        )],
    );
    assert!(collisions.is_empty(), "{collisions:?}");
    let listed = tool_names(&merged);
    assert_eq!(listed.len(), 4, "{listed:?}");
    for name in &listed {
        let problems = crate::tool_name_rule::tool_name_problems(name, 64);
        assert!(problems.is_empty(), "{name}: {problems:?}");
    }
    assert!(listed.contains(&"m__get_weather") && listed.contains(&"m__echo"));
    for original in ["get.weather", long.as_str()] {
        let fitted = crate::tool_name_rule::fit(&format!("m__{original}"), 64).into_owned();
        assert!(listed.contains(&fitted.as_str()), "{fitted} in {listed:?}");
        assert_eq!(merged.resolve_tool(&fitted), route("m", original));
    }
    let prompts: Vec<&str> = merged.prompts.iter().map(|p| p.name.as_str()).collect();
    assert!(prompts.contains(&"m__get.weather"), "{prompts:?}");
    // Not listed (the mount's discovery not done, or another's list), a
    // name that looks fitted is no tool: claimed by its namespace, it
    // would reach the upstream as `get_weather_0123abcd`. One as
    // qualified still routes by its namespace.
    assert_eq!(merged.resolve_tool("m__get_weather_0123abcd"), None);
    assert_eq!(merged.resolve_tool("m__later"), route("m", "later"));
    // Unfitted, the names are as qualified.
    let (plain, _) = merge(&[view("m", "m", &["get.weather"], &[])]);
    assert_eq!(tool_names(&plain), ["m__get.weather"]);
    assert_eq!(
        plain.resolve_tool("m__get_weather_0123abcd"),
        route("m", "get_weather_0123abcd")
    );
}

/// A name fitted to the client rule that is also one of the mount's own
/// names as they are goes to the tool of that name, whichever the
/// upstream lists first; the fitted one is reported, not served.
#[test]
fn a_name_that_fits_as_it_is_keeps_it_from_a_fitted_one_in_either_order() {
    let naming = Naming {
        fit_tool_names_to: Some(64),
        ..Naming::default()
    };
    let fitted = crate::tool_name_rule::fit("m__get.weather", 64).into_owned();
    let own = fitted.strip_prefix("m__").expect("namespaced").to_owned();
    for order in [["get.weather", own.as_str()], [own.as_str(), "get.weather"]] {
        let (merged, collisions) = MergedCatalog::build(1, &naming, &[view("m", "m", &order, &[])]);
        assert_eq!(tool_names(&merged), [fitted.as_str()], "{order:?}");
        assert_eq!(merged.resolve_tool(&fitted), route("m", &own), "{order:?}");
        // The fitted one is still reached under its qualified name.
        assert_eq!(
            merged.resolve_tool("m__get.weather"),
            route("m", "get.weather")
        );
        let tools: Vec<&Collision> = collisions.iter().filter(|c| c.kind == "tool").collect();
        assert_eq!(tools.len(), 1, "{collisions:?}");
        assert_eq!(tools[0].kept, route("m", &own).unwrap(), "{order:?}");
        assert_eq!(
            tools[0].dropped,
            route("m", "get.weather").unwrap(),
            "{order:?}"
        );
    }
}
