//! A message whose text is not valid Unicode, made readable.
//!
//! JavaScript strings are UTF-16 and may hold half of a surrogate pair
//! (`"😀 hello".slice(0, 1)`), which `JSON.stringify` writes as the escape
//! `"\ud83d"`; Python writes one for a file name decoded with
//! `surrogateescape`, and a server may write bytes that are not UTF-8.
//! The SDKs' own parsers take such text, so a client talking to the server
//! directly works, but serde (and so rmcp) refuses the whole message: on a
//! stdio or legacy SSE upstream rmcp skipped the line, and its request
//! waited out its timeout with nothing logged. [`repaired`] puts U+FFFD
//! (the replacement character) where the text is broken, as a lossy UTF-8
//! decode does, and leaves everything else as written.

/// `message` with each byte sequence that is not UTF-8, and each `\u`
/// escape of a surrogate that is not half of a pair, replaced by U+FFFD;
/// `None` if there is none. Cheap for a message that needs nothing
/// ([`may_need_repair`] first).
pub fn repaired(message: &[u8]) -> Option<String> {
    if !may_need_repair(message) {
        return None;
    }
    let text = String::from_utf8_lossy(message);
    let mut changed = matches!(text, std::borrow::Cow::Owned(_));
    let mut out = String::with_capacity(text.len());
    let mut rest: &str = &text;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(unit) = escaped_unit(rest) else {
            // Another escape (`\\`, `\"`, `\n`...): kept whole, so that
            // an escaped backslash before a `u` is not read as `\u`.
            let escape_len = rest[1..].chars().next().map_or(1, |c| 1 + c.len_utf8());
            out.push_str(&rest[..escape_len]);
            rest = &rest[escape_len..];
            continue;
        };
        let pair_low = (0xD800..0xDC00)
            .contains(&unit)
            .then(|| escaped_unit(&rest[6..]))
            .flatten()
            .filter(|low| (0xDC00..0xE000).contains(low));
        if pair_low.is_some() {
            out.push_str(&rest[..12]);
            rest = &rest[12..];
        } else if (0xD800..0xE000).contains(&unit) {
            out.push_str("\\ufffd");
            rest = &rest[6..];
            changed = true;
        } else {
            out.push_str(&rest[..6]);
            rest = &rest[6..];
        }
    }
    out.push_str(rest);
    changed.then_some(out)
}

/// The UTF-16 code unit of the `\uXXXX` escape `text` starts with, if it
/// does.
fn escaped_unit(text: &str) -> Option<u32> {
    let hex = text.strip_prefix("\\u")?.get(..4)?;
    if !hex.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(hex, 16).ok()
}

/// Whether `message` may need [`repaired`]: it holds a `\u` escape of a
/// surrogate, or bytes that are not UTF-8. Cheap enough for every line.
pub fn may_need_repair(message: &[u8]) -> bool {
    memchr::memmem::find(message, b"\\ud").is_some()
        || memchr::memmem::find(message, b"\\uD").is_some()
        || std::str::from_utf8(message).is_err()
}

/// `text` [`repaired`] in place where it needs it.
pub fn repair_text(text: &mut String) {
    if let Some(fixed) = repaired(text.as_bytes()) {
        tracing::debug!("an upstream message with text that is not valid Unicode: U+FFFD put in place of the broken text");
        *text = fixed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &[u8], expected: Option<&str>) {
        assert_eq!(repaired(input).as_deref(), expected, "{input:?}");
        if let Some(repaired) = repaired(input) {
            serde_json::from_str::<serde_json::Value>(&repaired)
                .unwrap_or_else(|error| panic!("{repaired} does not parse: {error}"));
        }
    }

    #[test]
    fn broken_text_gets_the_replacement_character() {
        // Half a pair, either half, alone.
        check(br#"{"t":"\ud83d hello"}"#, Some(r#"{"t":"\ufffd hello"}"#));
        check(br#"{"t":"x\uDE00"}"#, Some(r#"{"t":"x\ufffd"}"#));
        check(
            br#"{"t":"\ud83d\ud83d\ude00"}"#,
            Some(r#"{"t":"\ufffd\ud83d\ude00"}"#),
        );
        check(br#"{"t":"\ud83d"}"#, Some(r#"{"t":"\ufffd"}"#));
        // Bytes that are not UTF-8.
        check(b"{\"t\":\"caf\xe9\"}", Some("{\"t\":\"caf\u{fffd}\"}"));
    }

    #[test]
    fn valid_text_is_left_alone() {
        check(br#"{"t":"\ud83d\ude00 and \u00e9"}"#, None);
        check("{\"t\":\"😀 é\"}".as_bytes(), None);
        // An escaped backslash, then `ud83d`: no escape.
        check(br#"{"t":"C:\\ud83d"}"#, None);
        check(br#"{"t":"\\\ud83d"}"#, Some(r#"{"t":"\\\ufffd"}"#));
        // Cut short: not an escape this can read, left for the parser.
        check(br#"{"t":"\ud8"}"#, None);
    }

    #[test]
    fn only_suspect_lines_are_looked_at() {
        assert!(may_need_repair(br#"{"t":"\ud83d"}"#));
        assert!(may_need_repair(b"{\"t\":\"\xff\"}"));
        assert!(!may_need_repair(br#"{"t":"\u00e9 plain"}"#));
    }
}
