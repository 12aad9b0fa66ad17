//! `${VAR}` substitution inside string values, done once at load.
//!
//! This is how secrets reach headers and env without being written in the
//! file. `$${VAR}` stays a literal `${VAR}`. A variable that is not set is a
//! config problem at the field that named it, never an empty string: a
//! silently empty `Authorization` header is worse than refusing to start.

use serde_json::Value;

use super::problems::Problems;

/// Replaces every `${VAR}` in the string leaves of `value` using `lookup`.
/// Each string it changed is added to `written` as it was written, by its
/// path (`mounts.web.url`), so it can be shown without what the
/// environment put in.
pub fn expand_tree(
    value: &mut Value,
    path: &mut Vec<String>,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Problems,
    written: &mut Vec<(String, String)>,
) {
    match value {
        Value::String(text) => {
            if text.contains('$') {
                match expand_str(text, lookup) {
                    Ok(expanded) => {
                        if expanded != *text {
                            written.push((path.join("."), std::mem::replace(text, expanded)));
                        }
                    }
                    Err(message) => problems.push_unmade(path.join("."), message),
                }
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter_mut().enumerate() {
                path.push(index.to_string());
                expand_tree(item, path, lookup, problems, written);
                path.pop();
            }
        }
        Value::Object(fields) => {
            for (key, item) in fields.iter_mut() {
                path.push(key.clone());
                expand_tree(item, path, lookup, problems, written);
                path.pop();
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// Expands one string; the error names the first unset or malformed variable.
pub fn expand_str(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        if let Some(escaped) = after.strip_prefix("${") {
            // `$${X}` is the literal text `${X}`.
            out.push_str("${");
            rest = escaped;
        } else if let Some(body) = after.strip_prefix('{') {
            let Some(close) = body.find('}') else {
                // Not the text itself: it may hold a secret written as is.
                return Err("unclosed `${`".to_owned());
            };
            let name = &body[..close];
            if !is_variable_name(name) {
                return Err(malformed_reference(name));
            }
            match lookup(name) {
                Some(value) => out.push_str(&value),
                None => return Err(format!("environment variable {name} is not set")),
            }
            rest = &body[close + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// Why `${body}` is no reference, without `body` itself, which may hold
/// a secret written as is (a shell-style `${TOKEN:-sk-…}` fallback).
fn malformed_reference(body: &str) -> String {
    match body.split_once(":-") {
        Some((name, _)) if is_variable_name(name) => format!(
            "`${{{name}:-…}}`: variables have no defaults here; set {name} (the default is not shown)"
        ),
        _ => "a `${…}` whose name is not a variable name (letters, digits and `_`; the text is not shown)"
            .to_owned(),
    }
}

/// What `${…}` may name: a letter or `_`, then letters, digits and `_`
/// (a shell's variable names).
pub fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expected: Result<&str, &str>) {
        let lookup = |name: &str| match name {
            "TOKEN" => Some("s3cret".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        };
        assert_eq!(
            expand_str(input, &lookup),
            expected.map(str::to_owned).map_err(str::to_owned),
            "input {input:?}"
        );
    }

    #[test]
    fn plain_text_is_unchanged() {
        check("no variables", Ok("no variables"));
        check("cost $5", Ok("cost $5"));
    }

    #[test]
    fn variables_are_replaced() {
        check("Bearer ${TOKEN}", Ok("Bearer s3cret"));
        check("${TOKEN}${TOKEN}", Ok("s3crets3cret"));
        check("[${EMPTY}]", Ok("[]"));
    }

    #[test]
    fn escaped_variables_stay_literal() {
        check("$${TOKEN}", Ok("${TOKEN}"));
    }

    #[test]
    fn unset_and_malformed_variables_are_errors() {
        check("${MISSING}", Err("environment variable MISSING is not set"));
        check(
            "${1X}",
            Err("a `${…}` whose name is not a variable name (letters, digits and `_`; the text is not shown)"),
        );
        // A shell-style fallback may be the secret itself: never echoed.
        check(
            "Bearer ${TOKEN:-sk-live-abc}",
            Err("`${TOKEN:-…}`: variables have no defaults here; set TOKEN (the default is not shown)"),
        );
        check(
            "${sk-live-abc}",
            Err("a `${…}` whose name is not a variable name (letters, digits and `_`; the text is not shown)"),
        );
        check("${TOKEN", Err("unclosed `${`"));
    }
}
