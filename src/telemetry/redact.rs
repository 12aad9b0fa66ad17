//! What of a client's identifiers may appear in logs and traces.
//!
//! A Streamable HTTP session id is all a client shows to act in its
//! session: whoever reads it from a log could answer that session's
//! elicitations or read its per-session state. Logs and spans therefore
//! carry a fingerprint instead, the first 16 hex digits of the id's
//! SHA-256: stable, so one session's lines still group together, and an
//! operator holding a client's id can compute it to find them; not
//! reversible, so the log does not hand the id out.

use std::fmt::Write;

use sha2::{Digest, Sha256};

/// Hex digits kept of the SHA-256 (64 bits: no collisions among the
/// sessions of one gateway in practice).
const FINGERPRINT_DIGITS: usize = 16;

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

#[cfg(test)]
mod tests {
    use super::*;

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
