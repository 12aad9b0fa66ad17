//! The tool-name rule many MCP clients enforce, checked on the names the
//! gateway will serve.
//!
//! LLM APIs take tool (function) names matching `^[A-Za-z0-9_-]{1,64}$`, and
//! clients such as Claude Code, Cursor and VS Code refuse or silently drop
//! MCP tools whose names break that rule. Junction's own names always pass
//! (mount names are `[a-z0-9-]`), but a separator of `.` or `:`, an
//! upstream's own odd names, or a long namespace plus a long tool name can
//! produce names clients reject; `junction check --connect` flags them. Pure
//! functions only.

use std::fmt;

/// Longest tool name the rule accepts, in characters.
pub const MAX_TOOL_NAME_CHARS: usize = 64;

/// One way a name breaks the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameProblem {
    Empty,
    /// Longer than [`MAX_TOOL_NAME_CHARS`].
    TooLong {
        chars: usize,
    },
    /// Characters outside `[A-Za-z0-9_-]`, each listed once, in order.
    Characters(Vec<char>),
}

impl fmt::Display for NameProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameProblem::Empty => f.write_str("is empty (the 1 to 64 character rule)"),
            NameProblem::TooLong { chars } => write!(
                f,
                "is {chars} characters, over the {MAX_TOOL_NAME_CHARS} many clients accept"
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

/// Everything wrong with `name` under the rule; empty when it passes.
pub fn tool_name_problems(name: &str) -> Vec<NameProblem> {
    let mut problems = Vec::new();
    let chars = name.chars().count();
    if chars == 0 {
        problems.push(NameProblem::Empty);
    }
    if chars > MAX_TOOL_NAME_CHARS {
        problems.push(NameProblem::TooLong { chars });
    }
    let mut bad: Vec<char> = Vec::new();
    for c in name.chars() {
        let allowed = c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if !allowed && !bad.contains(&c) {
            bad.push(c);
        }
    }
    if !bad.is_empty() {
        problems.push(NameProblem::Characters(bad));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The problems of `name`, rendered, joined with `; `.
    fn check(name: &str, expect: &str) {
        let rendered: Vec<String> = tool_name_problems(name)
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
        let problems = tool_name_problems(&name);
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
        check("", "is empty (the 1 to 64 character rule)");
    }
}
