//! Names and URIs: `naming`, `rewrite` and routing through a merged catalog.
//!
//! The input is text, one item a line, so the seeds stay readable:
//!
//! ```text
//! __ everything fs=files local=      separator, then mount[=namespace]...
//! echo                               a tool/prompt name or URI per line
//! file:///a
//! {"content":[...]}                  a line starting with `{`: a result
//! ```
//!
//! Tokens the constructors refuse are first checked against what the
//! constructors promise, then mapped onto valid ones, so every input
//! exercises the rewrite. Mounts the config check would refuse together
//! (a namespace + separator prefixing another's) are left out.
//!
//! Checked: the constructors accept only what their docs say;
//! `unqualify(qualify(x)) == x` (a name or URI, non-empty: see README);
//! whatever `unqualify` returns qualifies back to its input; no namespace
//! claims another's qualified names; a qualified URI stays a valid URI;
//! every listed name routes, and every route qualifies back to the name
//! sent; rewriting results qualifies exactly the resource URIs, so
//! stripping the namespace again gives back the upstream's result.

#![no_main]

use std::sync::OnceLock;

use junction::{
    catalog::{MergedCatalog, MountView},
    naming::{MountName, Namespace, Naming, Separator},
    rewrite,
};
use junction_fuzz::{check_route, namespaces_accepted, view, Kind};
use libfuzzer_sys::fuzz_target;
use rmcp::model::{
    CallToolResult, ContentBlock, EmbeddedResource, GetPromptResult, PromptMessage,
    ReadResourceResult, Resource, ResourceContents, Role,
};

/// Bounds on one input, so one exec stays cheap.
const MAX_MOUNTS: usize = 6;
const MAX_LINES: usize = 48;

/// `JUNCTION_FUZZ_STRICT=1`: also assert the round trip of empty names.
fn strict() -> bool {
    static STRICT: OnceLock<bool> = OnceLock::new();
    *STRICT.get_or_init(|| std::env::var_os("JUNCTION_FUZZ_STRICT").is_some_and(|v| v == "1"))
}

const NAME_FIRST: &[u8] = b"abcdefghijklmnopqrstuvwxyz";
const NAME_REST: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789-";
const SEPARATOR_CHARS: &[u8] = b"_-.:";

fn is_documented_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=32).contains(&bytes.len())
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// A valid mount name (or namespace) made from any token.
fn repair_name(token: &str) -> String {
    token
        .bytes()
        .take(32)
        .enumerate()
        .map(|(i, b)| {
            let alphabet = if i == 0 { NAME_FIRST } else { NAME_REST };
            alphabet[usize::from(b) % alphabet.len()] as char
        })
        .collect()
}

fn mount_name(token: &str) -> MountName {
    match MountName::new(token) {
        Ok(mount) => {
            assert!(is_documented_name(token), "MountName accepted {token:?}");
            mount
        }
        Err(_) => {
            assert!(!is_documented_name(token), "MountName refused {token:?}");
            let repaired = repair_name(token);
            let repaired = if repaired.is_empty() {
                "m".to_owned()
            } else {
                repaired
            };
            MountName::new(&repaired).expect("a repaired name is valid")
        }
    }
}

fn namespace(token: &str) -> Namespace {
    match Namespace::new(token) {
        Ok(namespace) => {
            assert!(
                token.is_empty() || is_documented_name(token),
                "Namespace accepted {token:?}"
            );
            assert!(!token.contains(['_', '+']));
            namespace
        }
        Err(_) => {
            assert!(!token.is_empty() && !is_documented_name(token));
            Namespace::new(&repair_name(token)).expect("a repaired namespace is valid")
        }
    }
}

fn separator(token: &str) -> Separator {
    match Separator::new(token) {
        Ok(separator) => {
            assert!((1..=4).contains(&token.len()));
            assert!(token.bytes().all(|b| SEPARATOR_CHARS.contains(&b)));
            separator
        }
        Err(_) => {
            let repaired: String = token
                .bytes()
                .take(4)
                .map(|b| SEPARATOR_CHARS[usize::from(b) % SEPARATOR_CHARS.len()] as char)
                .collect();
            Separator::new(&repaired).unwrap_or_default()
        }
    }
}

/// The mounts of the first line, as the config check would accept them.
fn mounts(line: &str) -> (Separator, Vec<(MountName, Namespace)>) {
    let mut tokens = line.split(' ');
    let separator = separator(tokens.next().unwrap_or(""));
    let mut mounts: Vec<(MountName, Namespace)> = Vec::new();
    for token in tokens.take(MAX_MOUNTS) {
        let (mount, namespace) = match token.split_once('=') {
            Some((mount, ns)) => {
                let mount = mount_name(mount);
                (mount, namespace(ns))
            }
            None => {
                let mount = mount_name(token);
                let ns = Namespace::from_mount(&mount);
                (mount, ns)
            }
        };
        if mounts.iter().any(|(seen, _)| *seen == mount) {
            continue;
        }
        let mut namespaces: Vec<Namespace> = mounts.iter().map(|(_, ns)| ns.clone()).collect();
        namespaces.push(namespace.clone());
        if namespaces_accepted(&namespaces, &separator) {
            mounts.push((mount, namespace));
        }
    }
    (separator, mounts)
}

fn check_naming(namespace: &Namespace, separator: &Separator, item: &str) {
    // The round trip, for the names an upstream can list. An empty name
    // does not round-trip under a namespace (README: findings); STRICT
    // checks it anyway, to reproduce that.
    if !item.is_empty() || namespace.is_pass_through() || strict() {
        let qualified = namespace.qualify_name(separator, item);
        assert_eq!(
            namespace.unqualify_name(separator, &qualified),
            Some(item),
            "name {item:?} qualified as {qualified:?} does not come back"
        );
        let qualified = namespace.qualify_uri(item);
        assert_eq!(
            namespace.unqualify_uri(&qualified).as_deref(),
            Some(item),
            "URI {item:?} qualified as {qualified:?} does not come back"
        );
        // `Url::parse` drops leading and trailing spaces and controls and
        // every tab and newline, and reads a backslash as `/` in `http`,
        // `file` and the other special schemes: such text is no URI at all.
        let plain = !item.chars().any(|c| c <= ' ' || c == '\x7f' || c == '\\');
        if !namespace.is_pass_through() && plain && url::Url::parse(item).is_ok() {
            assert!(
                url::Url::parse(&qualified).is_ok(),
                "{item:?} is a URI but {qualified:?} is not"
            );
        }
    }
    // What unqualify returns for any text is what qualifies to that text.
    if let Some(original) = namespace.unqualify_name(separator, item) {
        assert_eq!(namespace.qualify_name(separator, original), item);
    }
    if let Some(original) = namespace.unqualify_uri(item) {
        assert_eq!(namespace.qualify_uri(&original), item);
    }
}

/// A result with the item in every place `rewrite` touches.
fn results_for(item: &str) -> (CallToolResult, GetPromptResult, ReadResourceResult) {
    let link = || ContentBlock::ResourceLink(Resource::new(item, "link"));
    let text = || ContentBlock::Resource(EmbeddedResource::new(ResourceContents::text("t", item)));
    let blob =
        || ContentBlock::Resource(EmbeddedResource::new(ResourceContents::blob("AA==", item)));
    let plain = || ContentBlock::text(item);
    let call = CallToolResult::success(vec![plain(), link(), text(), blob()]);
    let prompt = GetPromptResult::new(vec![
        PromptMessage::new(Role::User, link()),
        PromptMessage::new(Role::Assistant, text()),
    ]);
    let read = ReadResourceResult::new(vec![
        ResourceContents::text("t", item),
        ResourceContents::blob("AA==", item),
    ]);
    (call, prompt, read)
}

fn strip_uri(namespace: &Namespace, uri: &mut String) {
    let original = namespace
        .unqualify_uri(uri)
        .unwrap_or_else(|| panic!("rewritten URI {uri:?} is not in namespace {namespace}"));
    *uri = original.into_owned();
}

fn strip_contents(namespace: &Namespace, contents: &mut ResourceContents) {
    match contents {
        ResourceContents::TextResourceContents { uri, .. }
        | ResourceContents::BlobResourceContents { uri, .. } => strip_uri(namespace, uri),
        _ => {}
    }
}

fn strip_content(namespace: &Namespace, content: &mut ContentBlock) {
    match content {
        ContentBlock::ResourceLink(link) => strip_uri(namespace, &mut link.uri),
        ContentBlock::Resource(embedded) => strip_contents(namespace, &mut embedded.resource),
        _ => {}
    }
}

/// Whether any URI `rewrite` would touch is empty (the known exception).
fn has_empty_uri(contents: impl IntoIterator<Item = String>) -> bool {
    contents.into_iter().any(|uri| uri.is_empty())
}

fn uris_of_content(content: &ContentBlock) -> Option<String> {
    match content {
        ContentBlock::ResourceLink(link) => Some(link.uri.clone()),
        ContentBlock::Resource(embedded) => uri_of_contents(&embedded.resource),
        _ => None,
    }
}

fn uri_of_contents(contents: &ResourceContents) -> Option<String> {
    match contents {
        ResourceContents::TextResourceContents { uri, .. }
        | ResourceContents::BlobResourceContents { uri, .. } => Some(uri.clone()),
        _ => None,
    }
}

fn check_rewrite(
    namespace: &Namespace,
    call: &CallToolResult,
    prompt: &GetPromptResult,
    read: &ReadResourceResult,
) {
    let mut rewritten = call.clone();
    rewrite::qualify_tool_result(namespace, &mut rewritten);
    serde_json::to_vec(&rewritten).expect("a rewritten result serializes");
    if !has_empty_uri(call.content.iter().filter_map(uris_of_content)) {
        for content in &mut rewritten.content {
            strip_content(namespace, content);
        }
        assert_eq!(
            &rewritten, call,
            "stripping the namespace gives back the result"
        );
    }

    let mut rewritten = prompt.clone();
    rewrite::qualify_prompt_result(namespace, &mut rewritten);
    let uris = prompt
        .messages
        .iter()
        .filter_map(|m| uris_of_content(&m.content));
    if !has_empty_uri(uris) {
        for message in &mut rewritten.messages {
            strip_content(namespace, &mut message.content);
        }
        assert_eq!(&rewritten, prompt);
    }

    let mut rewritten = read.clone();
    rewrite::qualify_read_result(namespace, &mut rewritten);
    if !has_empty_uri(read.contents.iter().filter_map(uri_of_contents)) {
        for contents in &mut rewritten.contents {
            strip_contents(namespace, contents);
        }
        assert_eq!(&rewritten, read);
    }
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let (separator, mounts) = mounts(lines.next().unwrap_or(""));
    let (json, items): (Vec<&str>, Vec<&str>) = lines
        .take(MAX_LINES)
        .partition(|line| line.starts_with('{'));

    for (_, namespace) in &mounts {
        for item in &items {
            check_naming(namespace, &separator, item);
        }
    }
    // No namespace claims another's qualified names.
    for (_, a) in mounts.iter().filter(|(_, ns)| !ns.is_pass_through()) {
        for (_, b) in mounts.iter().filter(|(_, ns)| !ns.is_pass_through()) {
            if a == b {
                continue;
            }
            for item in items.iter().filter(|item| !item.is_empty()) {
                let name = a.qualify_name(&separator, item);
                assert_eq!(
                    b.unqualify_name(&separator, &name),
                    None,
                    "{b} claims {name:?}"
                );
                let uri = a.qualify_uri(item);
                assert_eq!(b.unqualify_uri(&uri), None, "{b} claims {uri:?}");
            }
        }
    }

    // Mount k lists the items k, k + n, ...; the first item every mount
    // lists, so mounts collide.
    let count = mounts.len().max(1);
    let views: Vec<MountView> = mounts
        .iter()
        .enumerate()
        .map(|(k, (mount, namespace))| {
            let names: Vec<String> = items
                .iter()
                .enumerate()
                .filter(|(i, _)| *i == 0 || i % count == k)
                .map(|(_, item)| item.to_string())
                .collect();
            view(mount.clone(), namespace.clone(), &names)
        })
        .collect();
    // Names as qualified, not fitted: every route must qualify back to the
    // name sent (`tool_name_rule`'s own tests cover fitted names).
    let naming = Naming {
        separator: separator.clone(),
        fit_tool_names_to: None,
    };
    let (merged, _collisions) = MergedCatalog::build(7, &naming, &views);
    for tool in &merged.tools {
        assert!(check_route(&merged, &views, Kind::Tool, &tool.name).is_some());
    }
    for prompt in &merged.prompts {
        assert!(check_route(&merged, &views, Kind::Prompt, &prompt.name).is_some());
    }
    for resource in &merged.resources {
        assert!(check_route(&merged, &views, Kind::Uri, &resource.uri).is_some());
    }
    for template in &merged.templates {
        assert!(check_route(&merged, &views, Kind::Uri, &template.uri_template).is_some());
    }
    for item in &items {
        for kind in [Kind::Tool, Kind::Prompt, Kind::Uri] {
            check_route(&merged, &views, kind, item);
        }
        for view in views
            .iter()
            .filter(|view| !view.namespace.is_pass_through())
        {
            if item.is_empty() {
                continue;
            }
            let name = view.namespace.qualify_name(&separator, item);
            assert!(check_route(&merged, &views, Kind::Tool, &name).is_some());
            let uri = view.namespace.qualify_uri(item);
            assert!(check_route(&merged, &views, Kind::Uri, &uri).is_some());
        }
    }

    // Results: built from the items, and any JSON line that reads as one.
    let mut results: Vec<(CallToolResult, GetPromptResult, ReadResourceResult)> =
        items.iter().map(|item| results_for(item)).collect();
    for line in &json {
        let (mut call, mut prompt, mut read) = results_for("demo://x");
        if let Ok(parsed) = serde_json::from_str(line) {
            call = parsed;
        }
        if let Ok(parsed) = serde_json::from_str(line) {
            prompt = parsed;
        }
        if let Ok(parsed) = serde_json::from_str(line) {
            read = parsed;
        }
        results.push((call, prompt, read));
    }
    for (_, namespace) in &mounts {
        for (call, prompt, read) in &results {
            check_rewrite(namespace, call, prompt, read);
        }
    }
});
