//! The HTML status page: one self-contained document, no scripts, readable
//! on a phone. Every value from config or upstreams is HTML-escaped.

use std::fmt::Write;

use super::admin::Status;
use crate::gateway::MountPhase;

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn uptime(seconds: u64) -> String {
    let (days, hours, minutes) = (seconds / 86_400, seconds / 3_600 % 24, seconds / 60 % 60);
    match (days, hours) {
        (0, 0) => format!("{minutes}m {}s", seconds % 60),
        (0, _) => format!("{hours}h {minutes}m"),
        _ => format!("{days}d {hours}h"),
    }
}

pub fn render(status: &Status) -> String {
    let mut rows = String::new();
    for mount in &status.mounts {
        let (label, class) = match mount.health {
            MountPhase::Ready => ("ready", "ok"),
            MountPhase::Starting => ("starting", "wait"),
            MountPhase::Degraded => ("degraded", "wait"),
            MountPhase::Down => ("down", "bad"),
        };
        let error = mount
            .last_error
            .as_deref()
            .map(|e| format!("<div class=\"err\">{}</div>", escape(e)))
            .unwrap_or_default();
        let _ = write!(
            rows,
            "<tr><td><b>{name}</b><div class=\"dim\">ns {ns}</div></td>\
             <td>{transport}<div class=\"dim\">{isolation}</div></td>\
             <td><span class=\"pill {class}\">{label}</span>{error}</td>\
             <td>{tools} / {prompts} / {resources}{shadowed}</td>\
             <td>{sessions}</td><td>{restarts}</td></tr>",
            name = escape(&mount.name),
            ns = if mount.namespace.is_empty() {
                "(none)".to_owned()
            } else {
                escape(&mount.namespace)
            },
            transport = mount.transport,
            isolation = mount.isolation,
            tools = mount.tools,
            shadowed = match mount.tools_shadowed {
                0 => String::new(),
                n => format!("<div class=\"dim\">{n} tools shadowed by a name collision</div>"),
            },
            prompts = mount.prompts,
            resources = mount.resources + mount.resource_templates,
            sessions = mount.upstream_sessions,
            restarts = mount.restarts,
        );
    }
    let mut endpoints = String::new();
    for endpoint in &status.endpoints {
        let _ = write!(
            endpoints,
            "<div class=\"dim\">endpoint <b>{name}</b> at {path}: {mounts} · {sessions} client session(s)</div>",
            name = escape(&endpoint.name),
            path = escape(&endpoint.path),
            mounts = escape(&endpoint.mounts.join(", ")),
            sessions = endpoint.downstream_sessions,
        );
    }
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>Junction status</title><style>\
body{{font-family:system-ui,sans-serif;margin:1rem;color:#1d2430}}\
h1{{font-size:1.3rem;margin:0 0 .3rem}}.dim{{color:#667;font-size:.8rem}}\
table{{border-collapse:collapse;width:100%;margin-top:1rem}}\
th,td{{text-align:left;padding:.45rem;border-bottom:1px solid #dde;vertical-align:top}}\
th{{font-size:.75rem;text-transform:uppercase;color:#667}}\
.pill{{padding:.1rem .5rem;border-radius:1rem;font-size:.8rem}}\
.ok{{background:#d7f5dd}}.wait{{background:#fff1c2}}.bad{{background:#ffd6d6}}\
.err{{color:#a11;font-size:.8rem;margin-top:.2rem;word-break:break-word}}\
@media (max-width:600px){{th:nth-child(5),td:nth-child(5),th:nth-child(6),td:nth-child(6){{display:none}}}}\
</style></head><body>\
<h1>Junction {version}</h1>\
<div class=\"dim\">{ready} · up {uptime} · {sessions} client session(s) · \
<a href=\"/status.json\">status.json</a> · <a href=\"/metrics\">metrics</a></div>{endpoints}\
<table><thead><tr><th>Mount</th><th>Transport</th><th>Health</th>\
<th>Tools / prompts / resources</th><th>Upstream sessions</th><th>Restarts</th></tr></thead>\
<tbody>{rows}</tbody></table></body></html>",
        version = status.version,
        ready = match (status.draining, status.ready) {
            (true, _) => "draining",
            (false, true) => "ready",
            (false, false) => "starting",
        },
        uptime = uptime(status.uptime_seconds),
        sessions = status.downstream_sessions,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::admin::MountReport;

    #[test]
    fn values_are_escaped_and_every_mount_is_shown() {
        let status = Status {
            version: "1.2.3",
            uptime_seconds: 3_725,
            ready: true,
            draining: false,
            downstream_sessions: 2,
            endpoints: vec![crate::http::admin::EndpointReport {
                name: "ide".into(),
                path: "/mcp/ide".into(),
                sse_path: None,
                mounts: vec!["evil".into(), "<b>".into()],
                downstream_sessions: 1,
            }],
            mounts: vec![MountReport {
                name: "evil".into(),
                namespace: "".into(),
                transport: "stdio",
                isolation: "shared",
                health: MountPhase::Down,
                last_error: Some("<script>alert(1)</script>".into()),
                restarts: 3,
                upstream_sessions: 1,
                tools: 5,
                tools_hidden: 0,
                tools_shadowed: 2,
                prompts: 1,
                resources: 2,
                resource_templates: 1,
                tasks: 0,
            }],
        };
        let html = render(&status);
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(!html.contains("<script>"));
        assert!(html.contains("<b>evil</b>"));
        assert!(html.contains(">down<"));
        assert!(html.contains("1h 2m"));
        assert!(html.contains("5 / 1 / 3"));
        assert!(html.contains("2 tools shadowed"));
        assert!(
            html.contains("endpoint <b>ide</b> at /mcp/ide: evil, &lt;b&gt; · 1 client session(s)")
        );
    }
}
