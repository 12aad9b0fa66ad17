//! `[timeouts]`, `[supervision]` and `[limits]`, and each mount's own
//! timeouts, checked against the gateway-wide ceiling.

use std::{collections::BTreeMap, time::Duration};

use super::values::{byte_size, duration_or, optional_duration};
use crate::config::{
    defaults,
    problems::Problems,
    raw::{Count, RawLimits, RawMountTimeouts, RawSupervision, RawTimeouts},
    Limits, MountTimeouts, Supervision, Timeouts,
};

/// `[timeouts]`, if valid; and, for checking the mounts' own against, the
/// same with each invalid value taken as its default, if its
/// `request_ceiling` is valid (a bad `connect` must not hide that a mount's
/// `request` is past the ceiling: every problem is reported at once).
pub(super) fn resolve_timeouts(
    raw: RawTimeouts,
    problems: &mut Problems,
) -> (Option<Timeouts>, Option<Timeouts>) {
    let connect = duration_or(
        "timeouts.connect",
        raw.connect,
        defaults::CONNECT_TIMEOUT,
        problems,
    );
    let initialize = duration_or(
        "timeouts.initialize",
        raw.initialize,
        defaults::INITIALIZE_TIMEOUT,
        problems,
    );
    let request = duration_or(
        "timeouts.request",
        raw.request,
        defaults::REQUEST_TIMEOUT,
        problems,
    );
    let request_ceiling = duration_or(
        "timeouts.request_ceiling",
        raw.request_ceiling,
        defaults::REQUEST_CEILING,
        problems,
    );
    let to_check_against = request_ceiling.map(|request_ceiling| Timeouts {
        connect: connect.unwrap_or(defaults::CONNECT_TIMEOUT),
        initialize: initialize.unwrap_or(defaults::INITIALIZE_TIMEOUT),
        request: request.unwrap_or(defaults::REQUEST_TIMEOUT),
        request_ceiling,
    });
    if let (Some(request), Some(ceiling)) = (request, request_ceiling) {
        if request > ceiling {
            problems.push(
                "timeouts.request",
                format!(
                    "is longer than request_ceiling ({})",
                    humantime::format_duration(ceiling)
                ),
            );
            return (None, to_check_against);
        }
    }
    let valid = (|| {
        Some(Timeouts {
            connect: connect?,
            initialize: initialize?,
            request: request?,
            request_ceiling: request_ceiling?,
        })
    })();
    (valid, to_check_against)
}

/// No request timeout of a mount (its own or a tool's) may exceed the
/// ceiling that applies to it.
pub(super) fn check_ceiling(
    path: &str,
    timeouts: &Timeouts,
    mount: &MountTimeouts,
    problems: &mut Problems,
) {
    let ceiling = timeouts.request_ceiling;
    let too_long = |duration: &Duration| *duration > ceiling;
    let ceiling_text = humantime::format_duration(ceiling);
    if mount.request.as_ref().is_some_and(too_long) {
        problems.push(
            format!("{path}.request"),
            format!("is longer than request_ceiling ({ceiling_text})"),
        );
    }
    for (tool, duration) in &mount.tools {
        if too_long(duration) {
            problems.push(
                format!("{path}.tools.{tool}"),
                format!("is longer than request_ceiling ({ceiling_text})"),
            );
        }
    }
}

pub(super) fn resolve_mount_timeouts(
    path: &str,
    raw: Option<RawMountTimeouts>,
    problems: &mut Problems,
    ok: &mut bool,
) -> MountTimeouts {
    let Some(raw) = raw else {
        return MountTimeouts::default();
    };
    let field = |name: &str| format!("{path}.timeouts.{name}");
    let mut tools = BTreeMap::new();
    for (tool, text) in raw.tools.unwrap_or_default() {
        if let Some(duration) =
            optional_duration(&field(&format!("tools.{tool}")), Some(text), problems, ok)
        {
            tools.insert(tool, duration);
        }
    }
    MountTimeouts {
        connect: optional_duration(&field("connect"), raw.connect, problems, ok),
        initialize: optional_duration(&field("initialize"), raw.initialize, problems, ok),
        request: optional_duration(&field("request"), raw.request, problems, ok),
        request_ceiling: optional_duration(
            &field("request_ceiling"),
            raw.request_ceiling,
            problems,
            ok,
        ),
        tools,
    }
}

pub(super) fn resolve_supervision(
    raw: RawSupervision,
    problems: &mut Problems,
) -> Option<Supervision> {
    let restart_backoff = duration_or(
        "supervision.restart_backoff",
        raw.restart_backoff,
        defaults::RESTART_BACKOFF,
        problems,
    );
    let restart_backoff_max = duration_or(
        "supervision.restart_backoff_max",
        raw.restart_backoff_max,
        defaults::RESTART_BACKOFF_MAX,
        problems,
    );
    let down_retry = duration_or(
        "supervision.down_retry",
        raw.down_retry,
        defaults::DOWN_RETRY,
        problems,
    );
    let crash_loop_restarts = raw
        .crash_loop_restarts
        .map_or(defaults::CRASH_LOOP_RESTARTS, Count::u32);
    let mut ok = true;
    if crash_loop_restarts == 0 {
        problems.push("supervision.crash_loop_restarts", "must be at least 1");
        ok = false;
    }
    if let (Some(first), Some(max)) = (restart_backoff, restart_backoff_max) {
        if first > max {
            problems.push(
                "supervision.restart_backoff",
                format!(
                    "is longer than restart_backoff_max ({})",
                    humantime::format_duration(max)
                ),
            );
            ok = false;
        }
    }
    let supervision = Supervision {
        restart_backoff: restart_backoff?,
        restart_backoff_max: restart_backoff_max?,
        crash_loop_restarts,
        down_retry: down_retry?,
    };
    ok.then_some(supervision)
}

pub(super) fn resolve_limits(raw: RawLimits, problems: &mut Problems) -> Option<Limits> {
    let mut ok = true;
    let mut count = |name: &str, value: Option<Count>, default: usize| match value.map(Count::usize)
    {
        Some(0) => {
            problems.push(format!("limits.{name}"), "must be at least 1");
            ok = false;
            default
        }
        Some(value) => value,
        None => default,
    };
    let max_sessions = count("max_sessions", raw.max_sessions, defaults::MAX_SESSIONS);
    let max_concurrent_requests = count(
        "max_concurrent_requests",
        raw.max_concurrent_requests,
        defaults::MAX_CONCURRENT_REQUESTS,
    );
    let max_upstream_sessions = count(
        "max_upstream_sessions",
        raw.max_upstream_sessions,
        defaults::MAX_UPSTREAM_SESSIONS,
    );
    let max_body_size = match raw.max_body_size {
        None => Some(defaults::MAX_BODY_SIZE),
        Some(size) => byte_size("limits.max_body_size", size, problems),
    };
    let limits = Limits {
        max_sessions,
        max_concurrent_requests,
        max_body_size: max_body_size?,
        max_upstream_sessions,
    };
    ok.then_some(limits)
}
