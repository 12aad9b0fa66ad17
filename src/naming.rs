//! The names clients see, and the way back to an upstream's own names.
//!
//! Tools and prompts become `{namespace}{separator}{name}` (a tool name
//! that breaks the rule LLM clients enforce fitted to it, when the config
//! asks: [`Naming`]); resource and
//! template URIs become `{namespace}+{uri}`, which is still a valid URI (the
//! namespace reads as a URI scheme prefix), except MCP Apps' `ui://` URIs,
//! which hosts render only with that scheme: `ui://{namespace}/{rest}`. An
//! empty namespace passes names through unchanged. Both rewrites are pure string functions so they can be
//! tested (and fuzzed) alone; the types make an unchecked mount name or
//! namespace unrepresentable.

use std::{borrow::Cow, fmt, sync::Arc};

/// The scheme of MCP Apps' UI resources (a tool's `_meta.ui.resourceUri`).
/// Hosts render a UI only from a URI starting with it, so a namespace goes
/// after it rather than before.
pub const UI_SCHEME: &str = "ui://";

/// Mount names and namespaces: `^[a-z][a-z0-9-]{0,31}$`. Neither `_` nor `+`
/// can appear, so the default separator `__` and the URI marker `+` always
/// split unambiguously.
pub fn is_valid_mount_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 32
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

/// A checked mount name (the key under `[mounts]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MountName(Arc<str>);

impl MountName {
    pub fn new(name: &str) -> Result<Self, String> {
        if is_valid_mount_name(name) {
            Ok(Self(name.into()))
        } else {
            Err(format!(
                "mount name {name:?} must match ^[a-z][a-z0-9-]{{0,31}}$"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name's text, shared rather than copied.
    pub fn shared_str(&self) -> Arc<str> {
        self.0.clone()
    }
}

impl fmt::Display for MountName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The text that separates namespace and name, `__` by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Separator(Arc<str>);

impl Separator {
    /// Allowed: 1–4 characters from `_ - . :`. Letters and digits would make
    /// splitting depend on the tool name; anything else breaks client rules.
    pub fn new(separator: &str) -> Result<Self, String> {
        let ok = (1..=4).contains(&separator.len())
            && separator
                .chars()
                .all(|c| matches!(c, '_' | '-' | '.' | ':'));
        if ok {
            Ok(Self(separator.into()))
        } else {
            Err(format!(
                "separator {separator:?} must be 1 to 4 characters from `_`, `-`, `.`, `:`"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Separator {
    fn default() -> Self {
        Self("__".into())
    }
}

/// How the tool and prompt names clients see are made: namespace,
/// separator and the upstream's name, and for tools, when
/// `[server] fit_tool_names` asks, fitted to the rule clients enforce
/// ([`crate::tool_name_rule::fit`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Naming {
    pub separator: Separator,
    /// The length tool names are fitted to; `None`: served as qualified.
    pub fit_tool_names_to: Option<usize>,
}

impl Naming {
    /// The name clients see for `namespace`'s tool `name`, and whether it
    /// was fitted (is not the name as qualified).
    pub fn served_tool_name(&self, namespace: &Namespace, name: &str) -> (String, bool) {
        let qualified = namespace.qualify_name(&self.separator, name);
        let fitted = self
            .fit_tool_names_to
            .map(|limit| crate::tool_name_rule::fit(&qualified, limit));
        match fitted {
            Some(Cow::Owned(fitted)) => (fitted, true),
            Some(Cow::Borrowed(_)) | None => (qualified, false),
        }
    }

    /// The name clients see for `namespace`'s prompt `name` (prompts are
    /// not offered to a model as functions: no rule to fit).
    pub fn prompt_name(&self, namespace: &Namespace, name: &str) -> String {
        namespace.qualify_name(&self.separator, name)
    }
}

/// A mount's namespace: a valid mount name, or empty for pass-through.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Namespace(Arc<str>);

impl Namespace {
    pub fn new(namespace: &str) -> Result<Self, String> {
        if namespace.is_empty() || is_valid_mount_name(namespace) {
            Ok(Self(namespace.into()))
        } else {
            Err(format!(
                "namespace {namespace:?} must be empty or match ^[a-z][a-z0-9-]{{0,31}}$"
            ))
        }
    }

    pub fn from_mount(mount: &MountName) -> Self {
        Self(mount.0.clone())
    }

    pub fn is_pass_through(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `echo` → `everything__echo`.
    pub fn qualify_name(&self, separator: &Separator, name: &str) -> String {
        if self.is_pass_through() {
            return name.to_owned();
        }
        let mut out = String::with_capacity(self.0.len() + separator.0.len() + name.len());
        out.push_str(&self.0);
        out.push_str(&separator.0);
        out.push_str(name);
        out
    }

    /// `everything__echo` → `echo`; `None` when the name is not in this
    /// namespace. A pass-through namespace claims every name.
    pub fn unqualify_name<'a>(&self, separator: &Separator, qualified: &'a str) -> Option<&'a str> {
        if self.is_pass_through() {
            return Some(qualified);
        }
        qualified
            .strip_prefix(&*self.0)?
            .strip_prefix(&*separator.0)
            .filter(|name| !name.is_empty())
    }

    /// `demo://x` → `everything+demo://x`; `ui://x/app` →
    /// `ui://everything/x/app`.
    pub fn qualify_uri(&self, uri: &str) -> String {
        if self.is_pass_through() {
            return uri.to_owned();
        }
        let mut out = String::with_capacity(self.0.len() + 1 + uri.len());
        if let Some(rest) = uri.strip_prefix(UI_SCHEME) {
            out.push_str(UI_SCHEME);
            out.push_str(&self.0);
            out.push('/');
            out.push_str(rest);
            return out;
        }
        out.push_str(&self.0);
        out.push('+');
        out.push_str(uri);
        out
    }

    /// `everything+demo://x` → `demo://x`, `ui://everything/x/app` →
    /// `ui://x/app`; `None` when not in this namespace. Only what
    /// [`Self::qualify_uri`] makes comes back (`everything+ui://x` does not:
    /// it is not how a `ui://` URI is qualified).
    pub fn unqualify_uri<'a>(&self, qualified: &'a str) -> Option<Cow<'a, str>> {
        if self.is_pass_through() {
            return Some(Cow::Borrowed(qualified));
        }
        if let Some(rest) = qualified.strip_prefix(UI_SCHEME) {
            let rest = rest.strip_prefix(&*self.0)?.strip_prefix('/')?;
            return Some(Cow::Owned(format!("{UI_SCHEME}{rest}")));
        }
        qualified
            .strip_prefix(&*self.0)?
            .strip_prefix('+')
            .filter(|uri| !uri.is_empty() && !uri.starts_with(UI_SCHEME))
            .map(Cow::Borrowed)
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(namespace: &str) -> Namespace {
        Namespace::new(namespace).unwrap()
    }

    fn check_name(namespace: &str, separator: &str, name: &str, qualified: &str) {
        let namespace = ns(namespace);
        let separator = Separator::new(separator).unwrap();
        assert_eq!(namespace.qualify_name(&separator, name), qualified);
        assert_eq!(
            namespace.unqualify_name(&separator, qualified),
            Some(name),
            "round trip of {qualified:?}"
        );
    }

    fn check_uri(namespace: &str, uri: &str, qualified: &str) {
        let namespace = ns(namespace);
        assert_eq!(namespace.qualify_uri(uri), qualified);
        assert_eq!(namespace.unqualify_uri(qualified).as_deref(), Some(uri));
        if !namespace.is_pass_through() {
            assert!(
                url::Url::parse(qualified).is_ok() || url::Url::parse(uri).is_err(),
                "{qualified:?} should stay a valid URI"
            );
        }
    }

    #[test]
    fn names_round_trip() {
        check_name("everything", "__", "echo", "everything__echo");
        check_name("everything", "__", "get-sum", "everything__get-sum");
        check_name("a", "__", "b__c", "a__b__c");
        check_name("tiny", "-", "tool", "tiny-tool");
        check_name("x1", ".", "dotted.name", "x1.dotted.name");
        check_name("", "__", "echo", "echo");
    }

    #[test]
    fn uris_round_trip_and_stay_valid() {
        check_uri(
            "everything",
            "demo://resource/static/document/architecture.md",
            "everything+demo://resource/static/document/architecture.md",
        );
        check_uri("fs", "file:///tmp/a%20b.txt", "fs+file:///tmp/a%20b.txt");
        check_uri(
            "web",
            "https://example.com/x?y=1#z",
            "web+https://example.com/x?y=1#z",
        );
        check_uri(
            "t",
            "test://template/{id}/data",
            "t+test://template/{id}/data",
        );
        check_uri("", "demo://x", "demo://x");
        // MCP Apps: hosts render only `ui://` URIs.
        check_uri(
            "apps",
            "ui://weather/forecast",
            "ui://apps/weather/forecast",
        );
        check_uri("apps", "ui://x", "ui://apps/x");
        check_uri("", "ui://x", "ui://x");
    }

    /// The fuzz target's two URI properties (`rewrite_names`), over the
    /// inputs near the `ui://` rule: what qualifies comes back, and what
    /// comes back qualifies to what was given.
    #[test]
    fn uri_rules_hold_around_the_ui_scheme() {
        let items = [
            "ui://",
            "ui://x",
            "ui://a/x",
            "ui:/x",
            "UI://x",
            "a+ui://x",
            "ui://a",
            "a+",
            "ui://ab/x",
            "demo://x",
            "",
        ];
        for namespace in ["a", "ab", ""].map(ns) {
            for item in items {
                if !item.is_empty() || namespace.is_pass_through() {
                    let qualified = namespace.qualify_uri(item);
                    assert_eq!(namespace.unqualify_uri(&qualified).as_deref(), Some(item));
                }
                if let Some(original) = namespace.unqualify_uri(item) {
                    assert_eq!(
                        namespace.qualify_uri(&original),
                        item,
                        "{namespace}: {item}"
                    );
                }
                for other in ["a", "ab"].map(ns).into_iter().filter(|o| *o != namespace) {
                    if !namespace.is_pass_through() && !item.is_empty() {
                        let qualified = namespace.qualify_uri(item);
                        assert_eq!(
                            other.unqualify_uri(&qualified),
                            None,
                            "{other} claims {qualified}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn foreign_names_are_not_claimed() {
        let separator = Separator::default();
        assert_eq!(ns("a").unqualify_name(&separator, "b__echo"), None);
        assert_eq!(ns("a").unqualify_name(&separator, "ab__echo"), None);
        assert_eq!(ns("a").unqualify_name(&separator, "a_echo"), None);
        assert_eq!(ns("a").unqualify_name(&separator, "a__"), None);
        assert_eq!(ns("a").unqualify_uri("b+demo://x"), None);
        assert_eq!(ns("a").unqualify_uri("ab+demo://x"), None);
        assert_eq!(ns("a").unqualify_uri("a+"), None);
        assert_eq!(ns("a").unqualify_uri("demo://x"), None);
        assert_eq!(ns("a").unqualify_uri("ui://b/x"), None);
        assert_eq!(ns("a").unqualify_uri("ui://ab/x"), None);
        assert_eq!(ns("a").unqualify_uri("ui://a"), None);
        // Not how a `ui://` URI is qualified: nothing qualifies to it.
        assert_eq!(ns("a").unqualify_uri("a+ui://x"), None);
    }

    #[test]
    fn invalid_names_are_rejected() {
        for bad in ["", "A", "1abc", "a_b", "a+b", "a.b", "a b", &"a".repeat(33)] {
            assert!(MountName::new(bad).is_err(), "{bad:?} should be invalid");
        }
        for good in ["a", "everything", "my-mount-2", &"a".repeat(32)] {
            assert!(MountName::new(good).is_ok(), "{good:?} should be valid");
        }
        assert!(Namespace::new("").is_ok());
        assert!(Namespace::new("Bad").is_err());
        for bad in ["", "abc", "_a_b_c", "/", " "] {
            assert!(Separator::new(bad).is_err(), "{bad:?} should be invalid");
        }
        for good in ["__", "_", "-", ".", "::"] {
            assert!(Separator::new(good).is_ok(), "{good:?} should be valid");
        }
    }
}
