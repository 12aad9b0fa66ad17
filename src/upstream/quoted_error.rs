//! What of an upstream's error answer an error message quotes.
//!
//! Servers say why they refused in the body of a 4xx ("unknown session",
//! "invalid token"), so a few hundred bytes of it are quoted in the
//! error, which reaches the client, `/readyz`'s `last_error` and the log.
//! Some echo what they were sent ("invalid credentials: Bearer …"): the
//! mount's own header values (its API key, on a shared mount, shown to
//! every client) and a session's forwarded ones. Those values are put as
//! `***` wherever they stand in the quote, and the quote is cut short.

use std::borrow::Cow;

use reqwest::header::HeaderValue;

/// The most of an error answer's body quoted.
pub const QUOTED_BODY: usize = 200;

/// A header value shorter than this is not looked for (`1`, `yes`): it
/// would blank out ordinary words and is no credential.
const SHORTEST_SECRET: usize = 6;

/// `text` cut to [`QUOTED_BODY`] bytes, with each of `values` (and the
/// credentials part of one written `Scheme credentials`) put as `***`.
pub fn quoted<'a>(text: &str, values: impl IntoIterator<Item = &'a HeaderValue>) -> String {
    cut(&hidden(text, values))
}

/// `text` with each of `values` (and the credentials part of one written
/// `Scheme credentials`) put as `***`.
pub fn hidden<'a>(text: &str, values: impl IntoIterator<Item = &'a HeaderValue>) -> String {
    let mut text: Cow<str> = Cow::Borrowed(text);
    for value in values {
        let Ok(value) = value.to_str() else { continue };
        let credentials = value
            .split_once(' ')
            .map(|(_, credentials)| credentials.trim());
        for secret in [Some(value.trim()), credentials].into_iter().flatten() {
            if secret.len() >= SHORTEST_SECRET && text.contains(secret) {
                text = Cow::Owned(text.replace(secret, "***"));
            }
        }
    }
    text.into_owned()
}

fn cut(text: &str) -> String {
    if text.len() <= QUOTED_BODY {
        return text.to_owned();
    }
    let mut end = QUOTED_BODY;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_echoed_are_hidden_and_the_quote_cut() {
        let auth = HeaderValue::from_static("Bearer SECRET_TOKEN_72");
        let key = HeaderValue::from_static("k-123456");
        let short = HeaderValue::from_static("yes");
        let body = format!(
            "invalid credentials: Bearer SECRET_TOKEN_72 (token SECRET_TOKEN_72, key k-123456, yes) {}",
            "x".repeat(400)
        );
        let quoted = quoted(&body, [&auth, &key, &short]);
        assert!(
            quoted.starts_with("invalid credentials: *** (token ***, key ***, yes) xxx"),
            "{quoted}"
        );
        assert!(!quoted.contains("SECRET"), "{quoted}");
        assert!(quoted.ends_with('…') && quoted.len() <= QUOTED_BODY + '…'.len_utf8());
        assert_eq!(
            super::quoted("é".repeat(150).as_str(), []).chars().count(),
            101
        );
    }
}
