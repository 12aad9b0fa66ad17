//! What of a client's identifiers and an upstream's address may appear
//! in logs, traces and error texts.
//!
//! A Streamable HTTP session id is all a client shows to act in its
//! session: whoever reads it from a log could answer that session's
//! elicitations or read its per-session state. Logs and spans therefore
//! carry a fingerprint instead, the first 16 hex digits of the id's
//! SHA-256: stable, so one session's lines still group together, and an
//! operator holding a client's id can compute it to find them; not
//! reversible, so the log does not hand the id out.
//!
//! An upstream's URL may carry a credential in its path or query (hosted
//! MCP servers often take their key there); error texts name URLs, so
//! those are cut to their origin ([`origins_only`]).
//!
//! What a peer chose (a request id, a URI, an upstream's error message) is
//! recorded cut to a bounded length ([`bounded`]): any length is allowed
//! on the wire, and one span too large makes the exporter drop its whole
//! batch.

use std::fmt::Write;

use sha2::{Digest, Sha256};

/// Hex digits kept of the SHA-256 (64 bits: no collisions among the
/// sessions of one gateway in practice).
const FINGERPRINT_DIGITS: usize = 16;

/// Longest value recorded in a span of a string a peer chose.
const SPAN_VALUE_LIMIT: usize = 512;

/// `value` cut to [`SPAN_VALUE_LIMIT`] bytes, at a character boundary.
pub fn bounded(value: &str) -> &str {
    if value.len() <= SPAN_VALUE_LIMIT {
        return value;
    }
    let mut end = SPAN_VALUE_LIMIT;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

/// The fingerprint of session id `id`; empty for an empty id (a request
/// outside any session).
pub fn session_fingerprint(id: &str) -> String {
    if id.is_empty() {
        return String::new();
    }
    let digest = Sha256::digest(id.as_bytes());
    let mut hex = String::with_capacity(FINGERPRINT_DIGITS);
    for byte in digest.iter().take(FINGERPRINT_DIGITS / 2) {
        // Into the one buffer: this runs for every request.
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

/// Ids shorter than this after "session " are words, not ids ("session
/// store load failed").
const SHORTEST_ID: usize = 8;

/// Whether the token after "session " is an id: long enough and with a
/// digit in it (rmcp's are UUIDs), not a word ("session restored").
fn is_an_id(token: &str) -> bool {
    token.len() >= SHORTEST_ID && token.bytes().any(|b| b.is_ascii_digit())
}

/// `text` with each session id after "session " (or rmcp's "Session not
/// found: ") replaced by its fingerprint, or `None` if it names none.
pub fn fingerprint_session_ids(text: &str) -> Option<String> {
    const MARKS: [&str; 3] = ["Session not found: ", "session ", "Session "];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut found = false;
    while let Some((at, mark)) = MARKS
        .iter()
        .filter_map(|mark| rest.find(mark).map(|at| (at, mark.len())))
        .min_by_key(|&(at, len)| (at, std::cmp::Reverse(len)))
    {
        let (before, after) = rest.split_at(at + mark);
        out.push_str(before);
        let id_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .unwrap_or(after.len());
        if is_an_id(&after[..id_len]) {
            out.push_str(&session_fingerprint(&after[..id_len]));
            found = true;
        } else {
            out.push_str(&after[..id_len]);
        }
        rest = &after[id_len..];
    }
    out.push_str(rest);
    found.then_some(out)
}

/// `text` with its session ids fingerprinted (see [`fingerprint_session_ids`]).
pub fn without_session_ids(text: String) -> String {
    fingerprint_session_ids(&text).unwrap_or(text)
}

/// Every `http://` or `https://` URL in `text` cut to its origin, with
/// `/…` where there was more: an upstream's URL may carry a credential in
/// its path or query (hosted MCP servers often take the key there), and
/// reqwest removes only a password.
pub fn origins_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = ["http://", "https://"]
        .iter()
        .filter_map(|scheme| rest.find(scheme))
        .min()
    {
        out.push_str(&rest[..start]);
        let candidate = &rest[start..];
        // A URL may hold `,`, `)` or `'` (serialized as they are), so it
        // runs to what it cannot hold; punctuation closing it is the text's.
        let end = candidate
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '<' | '>' | '`'))
            .unwrap_or(candidate.len());
        let end = candidate[..end]
            .trim_end_matches([')', ']', ',', '.', ':', ';', '\''])
            .len();
        match reqwest::Url::parse(&candidate[..end]) {
            Ok(url) => {
                out.push_str(url.scheme());
                out.push_str("://");
                out.push_str(url.host_str().unwrap_or_default());
                if let Some(port) = url.port() {
                    out.push_str(&format!(":{port}"));
                }
                if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
                    out.push_str("/…");
                }
            }
            // Not a URL after all: nothing of it past the scheme is shown.
            Err(_) => {
                let scheme_end = candidate.find("//").map_or(0, |at| at + 2);
                out.push_str(&candidate[..scheme_end.min(end)]);
                if end > scheme_end {
                    out.push('…');
                }
            }
        }
        rest = &candidate[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_values_are_cut_at_a_character_boundary() {
        assert_eq!(bounded("short"), "short");
        let long = format!("a{}", "é".repeat(SPAN_VALUE_LIMIT));
        let cut = bounded(&long);
        assert!(cut.len() <= SPAN_VALUE_LIMIT && cut.len() >= SPAN_VALUE_LIMIT - 1);
        assert!(long.starts_with(cut));
    }

    #[test]
    fn urls_in_error_texts_keep_only_their_origin() {
        let text = "error sending request for url (https://mcp.example.com/v1/SECRET/mcp?api_key=TOKEN): connection refused";
        assert_eq!(
            origins_only(text),
            "error sending request for url (https://mcp.example.com/…): connection refused"
        );
        assert_eq!(
            origins_only("http://127.0.0.1:9000/ and http://u:p@h:1/x?q=1, then"),
            "http://127.0.0.1:9000 and http://h:1/…, then"
        );
        // `,`, `)` and `'` may stand in a URL as they are.
        assert_eq!(
            origins_only("for url (https://h/mcp?t=a,b)&api_key=SECRET'x): refused"),
            "for url (https://h/…): refused"
        );
        assert_eq!(
            origins_only("at https://h/v1/it's(SECRET),more. Then"),
            "at https://h/…. Then"
        );
        assert_eq!(origins_only("https://[::1/SECRET x"), "https://… x");
        assert_eq!(origins_only("no url here"), "no url here");
        assert_eq!(origins_only("http:// broken"), "http:// broken");
    }

    #[test]
    fn ids_in_messages_are_fingerprinted_and_words_are_not() {
        let id = "0b5a7e52-5f47-4bd6-9d1e-2f3c1f0e9a11";
        let message = format!("Failed to close session {id}: gone");
        let rewritten = fingerprint_session_ids(&message).expect("an id");
        assert_eq!(
            rewritten,
            format!("Failed to close session {}: gone", session_fingerprint(id))
        );
        assert_eq!(fingerprint_session_ids("session store load failed"), None);
        assert_eq!(
            fingerprint_session_ids("session restored from external store"),
            None
        );
        assert_eq!(fingerprint_session_ids("no session here"), None);
        let twice = format!("session {id} and session {id}");
        let rewritten = fingerprint_session_ids(&twice).expect("ids");
        assert!(!rewritten.contains(id), "{rewritten}");
        let not_found = format!("Session not found: {id}");
        assert_eq!(
            fingerprint_session_ids(&not_found),
            Some(format!("Session not found: {}", session_fingerprint(id)))
        );
    }

    #[test]
    fn fingerprint_is_a_stable_prefix_of_the_sha256() {
        // SHA-256("abc") = ba7816bf8f01cfea414140de5dae2223…
        assert_eq!(session_fingerprint("abc"), "ba7816bf8f01cfea");
        assert_eq!(session_fingerprint(""), "");
        let id = "0b5a7e52-5f47-4bd6-9d1e-2f3c1f0e9a11";
        assert_eq!(session_fingerprint(id), session_fingerprint(id));
        assert!(!session_fingerprint(id).contains("0b5a7e52"));
    }
}
