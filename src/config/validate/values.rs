//! Durations and byte sizes as written in the config (`"30s"`, `"4 MiB"`),
//! read with the problem each bad one makes.

use std::time::Duration;

use crate::config::{defaults, problems::Problems, raw::RawSize};

/// A positive duration such as `"30s"` or `"500ms"`, at most
/// [`defaults::MAX_DURATION`], or `None` (reported).
pub(super) fn duration(path: &str, text: &str, problems: &mut Problems) -> Option<Duration> {
    match humantime::parse_duration(text) {
        Ok(duration) if duration.is_zero() => {
            problems.push(path, "must be longer than zero");
            None
        }
        Ok(duration) if duration > defaults::MAX_DURATION => {
            problems.push(
                path,
                format!(
                    "{text:?} is longer than the longest duration taken ({})",
                    humantime::format_duration(defaults::MAX_DURATION)
                ),
            );
            None
        }
        Ok(duration) => Some(duration),
        Err(error) => {
            problems.push(
                path,
                format!("{text:?} is not a duration like \"30m\", \"90s\" or \"500ms\": {error}"),
            );
            None
        }
    }
}

/// [`duration`] for an optional field with a default.
pub(super) fn duration_or(
    path: &str,
    text: Option<String>,
    default: Duration,
    problems: &mut Problems,
) -> Option<Duration> {
    match text {
        None => Some(default),
        Some(text) => duration(path, &text, problems),
    }
}

/// [`duration`] for an optional override (no default).
pub(super) fn optional_duration(
    path: &str,
    text: Option<String>,
    problems: &mut Problems,
    ok: &mut bool,
) -> Option<Duration> {
    let text = text?;
    let parsed = duration(path, &text, problems);
    *ok &= parsed.is_some();
    parsed
}

/// Bytes, from a number or a string such as `"512KiB"`, `"4MiB"`, `"1GiB"`
/// (`KB`/`MB`/`GB` mean the same powers of 1024: nobody means 10^6 here).
pub(super) fn byte_size(path: &str, raw: RawSize, problems: &mut Problems) -> Option<usize> {
    let bytes = match raw {
        RawSize::Bytes(bytes) => Some(bytes),
        RawSize::Text(text) => {
            let trimmed = text.trim();
            let split = trimmed
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(trimmed.len());
            let (number, unit) = trimmed.split_at(split);
            let multiplier: Option<u64> = match unit.trim().to_ascii_lowercase().as_str() {
                "" | "b" => Some(1),
                "k" | "kb" | "kib" => Some(1 << 10),
                "m" | "mb" | "mib" => Some(1 << 20),
                "g" | "gb" | "gib" => Some(1 << 30),
                _ => None,
            };
            match (number.parse::<u64>(), multiplier) {
                (Ok(number), Some(multiplier)) => number.checked_mul(multiplier),
                _ => {
                    problems.push(
                        path,
                        format!("{text:?} is not a size like 4194304, \"512KiB\" or \"4MiB\""),
                    );
                    return None;
                }
            }
        }
    };
    match bytes.and_then(|bytes| usize::try_from(bytes).ok()) {
        Some(0) => {
            problems.push(path, "must be at least 1 byte");
            None
        }
        Some(bytes) => Some(bytes),
        None => {
            problems.push(path, "is too large");
            None
        }
    }
}
