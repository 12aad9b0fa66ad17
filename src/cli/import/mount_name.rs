//! Turning a client's server key (`"GitHub Tools"`, `"brave_search"`) into a
//! Junction mount name, `^[a-z][a-z0-9-]{0,31}$`.
//!
//! Lowercase; every run of other characters becomes one `-`; a leading
//! digit gets an `mcp-` prefix; cut to 32 characters. Names already taken
//! get `-2`, `-3`, …, so two keys that sanitize alike stay two mounts. The
//! caller reports renames; the mount name is also the default namespace, so
//! a rename changes the names clients see.

use crate::naming::is_valid_mount_name;

/// Longest mount name Junction accepts.
const MAX_LEN: usize = 32;

/// Used when nothing of the key survives.
const FALLBACK: &str = "server";

/// A valid mount name for `key`, not in `taken`.
pub fn sanitize(key: &str, taken: &[String]) -> String {
    let mut base = String::new();
    for c in key.chars() {
        if c.is_ascii_alphanumeric() {
            base.push(c.to_ascii_lowercase());
        } else if !base.ends_with('-') {
            base.push('-');
        }
    }
    let mut base = base.trim_matches('-').to_owned();
    if base.is_empty() {
        base = FALLBACK.to_owned();
    } else if base.starts_with(|c: char| c.is_ascii_digit()) {
        base = format!("mcp-{base}");
    }
    let base = cut(&base, MAX_LEN);
    if !taken.iter().any(|name| name == &base) {
        return base;
    }
    (2..)
        .map(|n| {
            let suffix = format!("-{n}");
            format!("{}{suffix}", cut(&base, MAX_LEN - suffix.len()))
        })
        .find(|candidate| !taken.iter().any(|name| name == candidate))
        .expect("some suffix is free")
}

/// The first `len` characters (all ASCII here), without a trailing `-`.
fn cut(name: &str, len: usize) -> String {
    let cut = &name[..name.len().min(len)];
    let cut = cut.trim_end_matches('-').to_owned();
    debug_assert!(is_valid_mount_name(&cut), "{cut:?}");
    cut
}
