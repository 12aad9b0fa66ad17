//! The tool-name rule many MCP clients enforce, checked on the names the
//! gateway will serve, and names fitted to it.
//!
//! LLM APIs take tool (function) names matching `^[A-Za-z0-9_-]{1,64}$`, and
//! clients such as Claude Code, Cursor and VS Code refuse or silently drop
//! MCP tools whose names break that rule (some refuse every tool of the
//! server). Junction's own names always pass (mount names are `[a-z0-9-]`),
//! but a separator of `.` or `:`, an upstream's own odd names, or a long
//! namespace plus a long tool name can produce names clients reject:
//! `junction check --connect` flags them, and `[server] fit_tool_names`
//! serves each as a name that fits ([`fit`]). Pure functions only.

use std::{borrow::Cow, fmt};

use sha2::Digest;

/// Longest tool name the rule accepts, in characters, unless the config
/// says otherwise (`[server] tool_name_max_chars`: a client that adds its
/// own prefix leaves less).
pub const MAX_TOOL_NAME_CHARS: usize = 64;

/// The spec's longest tool name (2025-11-25: "SHOULD be between 1 and 128
/// characters"): the most `tool_name_max_chars` may be.
pub const MAX_SPEC_TOOL_NAME_CHARS: usize = 128;

/// How much of the name's SHA-256 [`fit`] appends, in bytes. 32 bits keep
/// a server's names apart (two alike would need a one-in-four-billion
/// draw, and the catalog still reports a collision, keeping the first);
/// every byte more is two characters less of the name.
const HASH_BYTES: usize = 4;

/// What [`fit`] appends to a name it changed: `_` and the hash in hex.
const FITTED_SUFFIX_CHARS: usize = 1 + 2 * HASH_BYTES;

/// The fewest characters a fitted name may be cut to: the suffix and a
/// few of the name, so that it still reads as the tool it is.
pub const MIN_FITTED_CHARS: usize = FITTED_SUFFIX_CHARS + 7;

/// One way a name breaks the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameProblem {
    Empty,
    /// Longer than the limit.
    TooLong {
        chars: usize,
        limit: usize,
    },
    /// Characters outside `[A-Za-z0-9_-]`, each listed once, in order.
    Characters(Vec<char>),
}

impl fmt::Display for NameProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameProblem::Empty => f.write_str("is empty (tool names are 1 character or more)"),
            NameProblem::TooLong { chars, limit } => write!(
                f,
                "is {chars} characters, over the {limit} many clients accept"
            ),
            NameProblem::Characters(found) => {
                let listed: Vec<String> = found.iter().map(|c| format!("{c:?}")).collect();
                write!(
                    f,
                    "contains {} outside [A-Za-z0-9_-], which many clients reject",
                    listed.join(", ")
                )
            }
        }
    }
}

/// Whether clients take `c` in a tool name.
fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Everything wrong with `name` under the rule, at most `limit`
/// characters; empty when it passes.
pub fn tool_name_problems(name: &str, limit: usize) -> Vec<NameProblem> {
    let mut problems = Vec::new();
    let chars = name.chars().count();
    if chars == 0 {
        problems.push(NameProblem::Empty);
    }
    if chars > limit {
        problems.push(NameProblem::TooLong { chars, limit });
    }
    let mut bad: Vec<char> = Vec::new();
    for c in name.chars() {
        if !allowed(c) && !bad.contains(&c) {
            bad.push(c);
        }
    }
    if !bad.is_empty() {
        problems.push(NameProblem::Characters(bad));
    }
    problems
}

/// `name` as it is if it passes the rule (at most `limit` characters,
/// `limit` at least [`MIN_FITTED_CHARS`]); else a name that does: each
/// character clients refuse becomes `_`, the name is cut to leave room,
/// and `_` and 8 hex characters of `name`'s SHA-256 are added. The hash
/// keeps two names that fit alike apart (`get.weather`, `get_weather`),
/// and gives the same name on every replica and after every restart.
pub fn fit(name: &str, limit: usize) -> Cow<'_, str> {
    let chars = name.chars().count();
    if chars != 0 && chars <= limit && name.chars().all(allowed) {
        return Cow::Borrowed(name);
    }
    let digest = sha2::Sha256::digest(name.as_bytes());
    let kept = limit.max(MIN_FITTED_CHARS) - FITTED_SUFFIX_CHARS;
    let mut fitted: String = name
        .chars()
        .take(kept)
        .map(|c| if allowed(c) { c } else { '_' })
        .collect();
    fitted.push('_');
    for byte in &digest[..HASH_BYTES] {
        fitted.push_str(&format!("{byte:02x}"));
    }
    Cow::Owned(fitted)
}

/// Whether `name` ends as [`fit`] ends the names it makes: `_` and the
/// hash in lowercase hex. An upstream's own name may end so too.
pub fn looks_fitted(name: &str) -> bool {
    let hex = 2 * HASH_BYTES;
    name.len() > hex
        && name.as_bytes()[name.len() - hex - 1] == b'_'
        && name.as_bytes()[name.len() - hex..]
            .iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The problems of `name`, rendered, joined with `; `.
    fn check(name: &str, expect: &str) {
        let rendered: Vec<String> = tool_name_problems(name, MAX_TOOL_NAME_CHARS)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(rendered.join("; "), expect, "name {name:?}");
    }

    #[test]
    fn gateway_names_pass() {
        check("demo__echo", "");
        check("my-mount__get_weather", "");
        check("A-z_0-9", "");
    }

    #[test]
    fn sixty_four_characters_pass_sixty_five_do_not() {
        check(&"a".repeat(64), "");
        check(
            &"a".repeat(65),
            "is 65 characters, over the 64 many clients accept",
        );
    }

    #[test]
    fn length_counts_characters_not_bytes() {
        let name = "é".repeat(40);
        let problems = tool_name_problems(&name, MAX_TOOL_NAME_CHARS);
        assert!(!problems
            .iter()
            .any(|p| matches!(p, NameProblem::TooLong { .. })));
    }

    #[test]
    fn separators_clients_reject_are_named() {
        check(
            "demo.echo",
            "contains '.' outside [A-Za-z0-9_-], which many clients reject",
        );
        check(
            "demo:echo:now",
            "contains ':' outside [A-Za-z0-9_-], which many clients reject",
        );
    }

    #[test]
    fn every_offending_character_is_listed_once() {
        check(
            "get weather/now (v2)",
            "contains ' ', '/', '(', ')' outside [A-Za-z0-9_-], which many clients reject",
        );
        check(
            "naïve",
            "contains 'ï' outside [A-Za-z0-9_-], which many clients reject",
        );
    }

    #[test]
    fn both_rules_are_reported() {
        let name = format!("ns.{}", "x".repeat(70));
        check(
            &name,
            "is 73 characters, over the 64 many clients accept; contains '.' outside [A-Za-z0-9_-], which many clients reject",
        );
    }

    #[test]
    fn empty_name_fails() {
        check("", "is empty (tool names are 1 character or more)");
    }

    #[test]
    fn a_name_that_passes_is_kept_as_it_is() {
        for name in ["demo__echo", &"a".repeat(64)] {
            assert!(matches!(fit(name, 64), Cow::Borrowed(kept) if kept == name));
        }
    }

    #[test]
    fn a_fitted_name_passes_and_is_told_apart_by_its_hash() {
        let long = format!("demo__{}", "report_".repeat(12));
        for (name, limit) in [
            ("demo__get.weather", 64),
            ("demo__get weather/now (v2)", 64),
            ("demo__naïve", 64),
            ("", 64),
            (long.as_str(), 64),
            (long.as_str(), 45),
        ] {
            let fitted = fit(name, limit);
            assert_eq!(
                tool_name_problems(&fitted, limit),
                [],
                "{name:?} fitted as {fitted:?}"
            );
        }
        assert!(fit("demo__get.weather", 64).starts_with("demo__get_weather_"));
        assert_eq!(fit(&long, 64).chars().count(), 64);
        assert!(fit(&long, 64).starts_with(&long[..55]));
        // Alike once fitted, apart by their hash; each the same every time.
        assert_ne!(fit("demo__get.weather", 64), fit("demo__get:weather", 64));
        assert_ne!(fit(&format!("{long}a"), 64), fit(&format!("{long}b"), 64));
        assert_eq!(fit("demo__get.weather", 64), fit("demo__get.weather", 64));
    }

    #[test]
    fn fitted_names_look_fitted() {
        let long = "x".repeat(80);
        for name in ["demo__get.weather", "", long.as_str(), "naïve"] {
            assert!(looks_fitted(&fit(name, 64)), "{name:?}");
        }
        for name in [
            "demo__echo",
            "_12345678",
            "a_1234567",
            "a_1234567G",
            "a-12345678",
            "a_ABCDEF12",
        ] {
            assert_eq!(looks_fitted(name), name == "_12345678", "{name:?}");
        }
    }

    #[test]
    fn the_hash_is_sha_256s_first_four_bytes() {
        // SHA-256("a.b") = 2e7336dc…, as `printf a.b | sha256sum` gives.
        assert_eq!(fit("a.b", 64), "a_b_2e7336dc");
        // README.md's example.
        assert_eq!(fit("odd__get.weather", 64), "odd__get_weather_9bd2ad39");
    }
}
