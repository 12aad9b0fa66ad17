//! Whether a URI could be an expansion of an RFC 6570 URI template.
//!
//! Routing needs this for a URI no mount lists but a pass-through mount's
//! template describes: which pass-through mount it belongs to. It is a
//! plausibility check, not a parser of the RFC: literals must match
//! exactly, and each expression takes a run of the characters its operator
//! can produce (a simple `{x}` no `/`, `?` or `#`; `{+x}` anything; `{/x}`
//! starts with `/`; …), possibly empty (an undefined variable). It runs in
//! time linear in the URI per template part, whatever the URI: clients
//! choose it.

/// One piece of a template.
enum Part<'a> {
    Literal(&'a [u8]),
    /// An expression, by its operator (`None` for simple string expansion).
    Expression(Option<u8>),
}

/// Whether `uri` could be what `template` expands to. A malformed template
/// (an unclosed `{`) matches nothing.
pub fn could_expand_to(template: &str, uri: &str) -> bool {
    let Some(parts) = parse(template) else {
        return false;
    };
    let uri = uri.as_bytes();
    // Most templates start with a literal most URIs do not: no pass then.
    if let Some(Part::Literal(first)) = parts.first() {
        if !uri.starts_with(first) {
            return false;
        }
    }
    // reachable[i]: the parts so far can produce exactly `uri[..i]`.
    let mut reachable = vec![false; uri.len() + 1];
    reachable[0] = true;
    for part in parts {
        let mut next = vec![false; uri.len() + 1];
        match part {
            Part::Literal(literal) => {
                for start in 0..=uri.len() {
                    if reachable[start] && uri[start..].starts_with(literal) {
                        next[start + literal.len()] = true;
                    }
                }
            }
            Part::Expression(operator) => {
                // Every expansion of an expression extends, one allowed
                // character at a time, to the end of a run; runs from
                // later starts rejoin earlier ones, which are not walked
                // twice.
                let mut walked_to = 0;
                for start in 0..=uri.len() {
                    if !reachable[start] {
                        continue;
                    }
                    next[start] = true;
                    let first_ok = uri
                        .get(start)
                        .is_some_and(|byte| starts_expansion(operator, *byte));
                    if !first_ok {
                        continue;
                    }
                    // Up to `walked_to`, an earlier run (through this
                    // start) has marked every position already.
                    let mut end = start + 1;
                    if end > walked_to {
                        next[end] = true;
                    } else {
                        end = walked_to;
                    }
                    while end < uri.len() && continues_expansion(operator, uri[end]) {
                        end += 1;
                        next[end] = true;
                    }
                    walked_to = end;
                }
            }
        }
        reachable = next;
        if !reachable.contains(&true) {
            return false;
        }
    }
    reachable[uri.len()]
}

fn parse(template: &str) -> Option<Vec<Part<'_>>> {
    let mut parts = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        if open > 0 {
            parts.push(Part::Literal(&rest.as_bytes()[..open]));
        }
        let close = rest[open..].find('}')? + open;
        let operator = rest[open + 1..close]
            .bytes()
            .next()
            .filter(|byte| b"+#./;?&".contains(byte));
        parts.push(Part::Expression(operator));
        rest = &rest[close + 1..];
    }
    if !rest.is_empty() {
        parts.push(Part::Literal(rest.as_bytes()));
    }
    Some(parts)
}

/// Whether a non-empty expansion with `operator` can start with `byte`.
fn starts_expansion(operator: Option<u8>, byte: u8) -> bool {
    match operator {
        None | Some(b'+') => continues_expansion(operator, byte),
        Some(prefix) => byte == prefix,
    }
}

/// Whether an expansion with `operator` can go on with `byte`.
fn continues_expansion(operator: Option<u8>, byte: u8) -> bool {
    match operator {
        Some(b'+') | Some(b'#') => true,
        Some(b'?') | Some(b'&') => byte != b'#',
        Some(b'/') => !b"?#".contains(&byte),
        _ => !b"/?#".contains(&byte),
    }
}

#[cfg(test)]
mod tests {
    use super::could_expand_to;

    #[test]
    fn literals_and_simple_expressions() {
        assert!(could_expand_to("report://{id}", "report://7"));
        assert!(could_expand_to(
            "report://{id}/{part}",
            "report://7/summary"
        ));
        assert!(!could_expand_to("report://{id}", "report://7/summary"));
        assert!(!could_expand_to("report://{id}", "other://7"));
        assert!(could_expand_to("report://{id}.json", "report://a.b.json"));
        assert!(!could_expand_to("report://{id}.json", "report://a.xml"));
        assert!(could_expand_to("plain://fixed", "plain://fixed"));
        assert!(!could_expand_to("plain://fixed", "plain://fixed/more"));
    }

    #[test]
    fn operators() {
        assert!(could_expand_to("file:///{+path}", "file:///a/b/c.txt"));
        assert!(could_expand_to(
            "repo://{owner}{/path*}",
            "repo://me/src/lib.rs"
        ));
        assert!(could_expand_to(
            "search://q{?term,page}",
            "search://q?term=x&page=2"
        ));
        assert!(could_expand_to("search://q{?term,page}", "search://q"));
        assert!(!could_expand_to("search://q{?term}", "search://qx"));
        assert!(could_expand_to(
            "doc://{name}{#section}",
            "doc://intro#part-2"
        ));
    }

    #[test]
    fn malformed_templates_match_nothing() {
        assert!(!could_expand_to("report://{id", "report://{id"));
    }

    /// A long URI of one repeated character against expressions back to
    /// back: linear, not a search through every split.
    #[test]
    fn hostile_uris_stay_cheap() {
        let uri = format!("x://{}", "a".repeat(100_000));
        assert!(could_expand_to("x://{a}{b}{c}{d}{e}", &uri));
        assert!(!could_expand_to("x://{a}{b}{c}{d}{e}/", &uri));
    }
}
