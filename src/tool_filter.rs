//! Which of an upstream's tools a mount offers: `include_tools` and
//! `exclude_tools`, patterns matched against the upstream's own names.
//!
//! IDE agents cap how many tools they use (Cursor 40, Windsurf 50) and
//! every listed tool costs the model context, so a mount of a server with
//! dozens of tools often should offer a few. A tool the filter hides is
//! gone from the gateway for every client: not listed, and a call by its
//! qualified name is an unknown tool, like any name no mount lists. The
//! filter is applied where the merged catalog is built and where a name is
//! routed, so lists, calls, per-session overlays and `junction tools` all
//! agree. Patterns use `*` (any run of characters) and `?` (one
//! character), case-sensitive, as the upstream spells its names.

use wildmatch::WildMatch;

/// A mount's tool patterns. The default offers every tool.
#[derive(Debug, Clone, Default)]
pub struct ToolFilter {
    /// `None`: every tool not excluded.
    include: Option<Vec<Pattern>>,
    exclude: Vec<Pattern>,
}

#[derive(Debug, Clone)]
struct Pattern {
    /// As written: compared on reload, shown in messages.
    text: String,
    matcher: WildMatch,
}

impl Pattern {
    fn new(text: String) -> Self {
        Self {
            matcher: WildMatch::new(&text),
            text,
        }
    }
}

impl PartialEq for ToolFilter {
    fn eq(&self, other: &Self) -> bool {
        let texts = |patterns: &[Pattern]| -> Vec<String> {
            patterns.iter().map(|p| p.text.clone()).collect()
        };
        self.include.as_deref().map(texts) == other.include.as_deref().map(texts)
            && texts(&self.exclude) == texts(&other.exclude)
    }
}

impl Eq for ToolFilter {}

impl ToolFilter {
    /// `include`: `None` for every tool; `exclude` wins over `include`.
    pub fn new(include: Option<Vec<String>>, exclude: Vec<String>) -> Self {
        Self {
            include: include.map(|patterns| patterns.into_iter().map(Pattern::new).collect()),
            exclude: exclude.into_iter().map(Pattern::new).collect(),
        }
    }

    /// Whether the mount offers the upstream's tool `name`.
    pub fn offers(&self, name: &str) -> bool {
        let included = self
            .include
            .as_ref()
            .is_none_or(|patterns| patterns.iter().any(|p| p.matcher.matches(name)));
        included && !self.exclude.iter().any(|p| p.matcher.matches(name))
    }

    /// How many of `names` (the upstream's own) the mount hides.
    pub fn hides_of<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> usize {
        names.into_iter().filter(|name| !self.offers(name)).count()
    }

    /// Whether every tool is offered (no pattern at all): the catalog
    /// keeps no filter for such a mount.
    pub fn offers_everything(&self) -> bool {
        self.include.is_none() && self.exclude.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(include: Option<&[&str]>, exclude: &[&str]) -> ToolFilter {
        let owned = |patterns: &[&str]| patterns.iter().map(|p| p.to_string()).collect();
        ToolFilter::new(include.map(owned), owned(exclude))
    }

    #[test]
    fn the_default_offers_every_tool() {
        let all = ToolFilter::default();
        assert!(all.offers_everything());
        assert!(all.offers("anything"));
        assert!(all.offers(""));
    }

    #[test]
    fn include_offers_only_what_a_pattern_matches() {
        let some = filter(Some(&["get_*", "echo", "item-?"]), &[]);
        assert!(!some.offers_everything());
        assert_eq!(some.hides_of(["get_a", "echo", "add", "item-10"]), 2);
        for offered in ["get_", "get_issue", "echo", "item-1"] {
            assert!(some.offers(offered), "{offered}");
        }
        for hidden in ["echo2", "Get_issue", "list_issues", "item-10", "xget_issue"] {
            assert!(!some.offers(hidden), "{hidden}");
        }
    }

    #[test]
    fn exclude_wins_over_include() {
        let some = filter(Some(&["*_issue*"]), &["delete_*"]);
        assert!(some.offers("get_issue"));
        assert!(!some.offers("delete_issue"));
        let all_but = filter(None, &["delete_*", "admin"]);
        assert!(all_but.offers("get_issue"));
        assert!(!all_but.offers("delete_repo"));
        assert!(!all_but.offers("admin"));
        assert!(all_but.offers("administer"));
    }

    #[test]
    fn an_empty_include_list_offers_no_tool() {
        let none = filter(Some(&[]), &[]);
        assert!(!none.offers_everything());
        assert!(!none.offers("echo"));
    }

    #[test]
    fn filters_are_equal_by_their_patterns() {
        assert_eq!(filter(Some(&["a*"]), &["b"]), filter(Some(&["a*"]), &["b"]));
        assert_ne!(filter(Some(&["a*"]), &[]), filter(None, &["a*"]));
        assert_ne!(filter(Some(&[]), &[]), ToolFilter::default());
        assert_ne!(filter(None, &["a"]), filter(None, &["a", "b"]));
    }
}
