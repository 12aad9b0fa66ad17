//! Config loading tests: one `load_file` helper, then one tiny test per rule.
//! figment's `Jail` gives each test its own directory and environment.

// figment::Error is large, and Jail::expect_with fixes the closure type.
#![allow(clippy::result_large_err)]

use figment::Jail;

use std::time::Duration;

use super::*;
use crate::tool_filter::ToolFilter;

/// Loads `text` written to a file named `name` inside a jail, with `env` set.
fn load_file(name: &str, text: &str, env: &[(&str, &str)]) -> Result<Config, Vec<String>> {
    let mut outcome = None;
    Jail::expect_with(|jail| {
        jail.create_file(name, text)?;
        for (key, value) in env {
            jail.set_env(key, value);
        }
        outcome = Some(
            load(&ConfigSource::File(name.into()))
                .map_err(|error| error.problems.iter().map(ToString::to_string).collect()),
        );
        Ok(())
    });
    outcome.expect("jail ran")
}

fn parse(name: &str, text: &str) -> Result<Config, Vec<String>> {
    load_file(name, text, &[])
}

/// Asserts that every one of `expected` begins one of the problems `found`.
fn assert_reported(found: &[String], expected: &[&str]) {
    for needle in expected {
        assert!(
            found.iter().any(|problem| problem.starts_with(needle)),
            "missing {needle:?} in {found:#?}"
        );
    }
}

fn problems(name: &str, text: &str) -> Vec<String> {
    load_file(name, text, &[]).expect_err("config should be invalid")
}

/// The field path each problem names, in order.
fn problem_paths(found: &[String]) -> Vec<&str> {
    found
        .iter()
        .map(|problem| problem.split(": ").next().unwrap_or_default())
        .collect()
}

#[test]
fn embedded_default_is_valid_and_mounts_the_demo_twice() {
    let config = super::embedded_for_tests();
    assert_eq!(config.server.listen.to_string(), "127.0.0.1:8080");
    let mounts: Vec<_> = config
        .mounts
        .iter()
        .map(|m| (m.name.as_str(), m.isolation))
        .collect();
    assert_eq!(
        mounts,
        [
            ("demo", Isolation::Shared),
            ("private", Isolation::PerSession)
        ]
    );
    let UpstreamTransport::Stdio { command, args, .. } = &config.mounts[0].transport else {
        panic!("demo should be a stdio mount");
    };
    assert_eq!(
        command,
        &std::env::current_exe().unwrap().display().to_string()
    );
    assert_eq!(args, &["demo-server"]);
}

#[test]
fn defaults_apply_to_an_empty_file() {
    let config = load_file("junction.toml", "", &[]).unwrap();
    assert_eq!(config.server.path, "/mcp");
    assert_eq!(config.server.separator.as_str(), "__");
    assert_eq!(
        config.server.allowed_hosts,
        ["localhost", "127.0.0.1", "::1"]
    );
    assert_eq!(
        config.server.session_idle_timeout,
        defaults::SESSION_IDLE_TIMEOUT
    );
    assert_eq!(
        config.server.session_hibernate_after,
        Some(defaults::SESSION_HIBERNATE_AFTER)
    );
    assert!(config.mounts.is_empty());
}

#[test]
fn sleeping_sessions_can_be_turned_off_or_tuned() {
    let off = load_file(
        "junction.toml",
        "[server]\nsession_hibernate_after = \"off\"",
        &[],
    )
    .unwrap();
    assert_eq!(off.server.session_hibernate_after, None);
    let quick = load_file(
        "junction.toml",
        "[server]\nsession_hibernate_after = \"250ms\"",
        &[],
    )
    .unwrap();
    assert_eq!(
        quick.server.session_hibernate_after,
        Some(std::time::Duration::from_millis(250))
    );
    let found = problems(
        "junction.toml",
        "[server]\nsession_hibernate_after = \"0s\"",
    );
    assert_eq!(
        found,
        ["server.session_hibernate_after: must be longer than zero"]
    );
}

#[test]
fn full_toml_example_resolves() {
    let config = load_file(
        "junction.toml",
        r#"
        [server]
        listen = "0.0.0.0:9000"
        path = "/gateway"
        separator = "-"
        allowed_hosts = ["*"]
        session_idle_timeout = "90s"

        [mounts.zeta]
        command = "npx"
        args = ["-y", "server"]
        env = { DEBUG = "1" }
        cwd = "/srv"
        isolation = "per_session"

        [mounts.alpha]
        url = "http://127.0.0.1:9000/mcp"
        headers = { Authorization = "Bearer ${TEST_TOKEN}" }
        namespace = ""
        "#,
        &[("TEST_TOKEN", "abc")],
    )
    .unwrap();
    assert_eq!(config.server.listen.to_string(), "0.0.0.0:9000");
    assert_eq!(config.server.path, "/gateway");
    assert!(
        config.server.allowed_hosts.is_empty(),
        "* disables the check"
    );
    assert_eq!(config.server.session_idle_timeout.as_secs(), 90);
    // Document order, not alphabetical: it decides collisions.
    assert_eq!(config.mounts[0].name.as_str(), "zeta");
    assert_eq!(config.mounts[1].name.as_str(), "alpha");
    assert!(config.mounts[1].namespace.is_pass_through());
    assert_eq!(config.mounts[0].namespace.as_str(), "zeta");
    let UpstreamTransport::StreamableHttp { headers, url } = &config.mounts[1].transport else {
        panic!("alpha should be an HTTP mount");
    };
    assert_eq!(url.as_str(), "http://127.0.0.1:9000/mcp");
    assert_eq!(headers["Authorization"], "Bearer abc");
}

#[test]
fn yaml_and_json_load_the_same_shape() {
    let yaml = load_file(
        "junction.yaml",
        "server:\n  listen: 127.0.0.1:1\nmounts:\n  b:\n    command: x\n  a:\n    url: http://h/mcp\n",
        &[],
    )
    .unwrap();
    let json = load_file(
        "junction.json",
        r#"{"server": {"listen": "127.0.0.1:1"}, "mounts": {"b": {"command": "x"}, "a": {"url": "http://h/mcp"}}}"#,
        &[],
    )
    .unwrap();
    assert_eq!(yaml, json);
    assert_eq!(yaml.mounts[0].name.as_str(), "b");
}

#[test]
fn env_overrides_win_over_the_file() {
    let config = load_file(
        "junction.toml",
        "[server]\nlisten = \"127.0.0.1:1\"\n[mounts.a]\ncommand = \"x\"\n",
        &[
            ("JUNCTION_SERVER__LISTEN", "127.0.0.1:2"),
            ("JUNCTION_MOUNTS__A__ISOLATION", "per_session"),
            ("JUNCTION_MOUNTS__B__URL", "http://127.0.0.1:3/mcp"),
            // Unrelated JUNCTION_* variables are not config.
            ("JUNCTION_BIN", "/somewhere"),
        ],
    )
    .unwrap();
    assert_eq!(config.server.listen.to_string(), "127.0.0.1:2");
    assert_eq!(config.mounts[0].isolation, Isolation::PerSession);
    assert_eq!(config.mounts[1].name.as_str(), "b");
}

/// What a mount names itself keeps its case through an override (a
/// child's variable, a tool's timeout), and a mount name's `-` is written
/// `_` in a variable name.
#[test]
fn env_overrides_keep_the_case_of_what_a_mount_names() {
    let config = load_file(
        "junction.toml",
        "[mounts.my-server]\ncommand = \"x\"\nenv = { API_KEY = \"old\" }\n",
        &[
            ("JUNCTION_MOUNTS__MY_SERVER__ENV__API_KEY", "new"),
            (
                "JUNCTION_MOUNTS__MY_SERVER__TIMEOUTS__TOOLS__longRunningOperation",
                "10m",
            ),
            ("JUNCTION_MOUNTS__MY_SERVER__ISOLATION", "per_session"),
        ],
    )
    .unwrap();
    assert_eq!(config.mounts.len(), 1, "{:?}", config.mounts);
    let mount = &config.mounts[0];
    assert_eq!(mount.name.as_str(), "my-server");
    assert_eq!(mount.isolation, Isolation::PerSession);
    let UpstreamTransport::Stdio { env, .. } = &mount.transport else {
        panic!("a stdio mount");
    };
    assert_eq!(
        env.get("API_KEY").map(String::as_str),
        Some("new"),
        "{env:?}"
    );
    assert_eq!(env.len(), 1, "{env:?}");
    assert_eq!(
        mount.timeouts.tools.get("longRunningOperation"),
        Some(&std::time::Duration::from_secs(600))
    );
}

/// An override is the text it was set to wherever the config takes text
/// (figment would read `8080` and `true` as data, `0123` as 123, a JSON
/// list as a list, `"007"` without its quotes, ` x ` trimmed), and stays
/// data where the config takes numbers and booleans.
#[test]
fn env_overrides_are_text_where_the_config_takes_text() {
    let config = load_file(
        "junction.toml",
        "[mounts.loc]\ncommand = \"x\"\n[mounts.web]\nurl = \"http://h/mcp\"\n",
        &[
            ("JUNCTION_MOUNTS__LOC__ENV__PORT", "8080"),
            ("JUNCTION_MOUNTS__LOC__ENV__PIN", "0123"),
            ("JUNCTION_MOUNTS__LOC__ENV__DEBUG", "true"),
            ("JUNCTION_MOUNTS__LOC__ENV__RATIO", "1.50"),
            ("JUNCTION_MOUNTS__LOC__ENV__QUOTED", "\"007\""),
            ("JUNCTION_MOUNTS__LOC__ENV__DIRS", "[\"/data\", \"/tmp\"]"),
            ("JUNCTION_MOUNTS__LOC__ENV__OPTIONS", "{ depth = 2 }"),
            ("JUNCTION_MOUNTS__LOC__ENV__SPACED", " x "),
            ("JUNCTION_MOUNTS__LOC__CWD", "2024"),
            ("JUNCTION_MOUNTS__WEB__HEADERS__X_Api_Key", "08675309"),
            ("JUNCTION_MOUNTS__WEB__MAX_UPSTREAM_SESSIONS", "3"),
            ("JUNCTION_LIMITS__MAX_SESSIONS", "12"),
            ("JUNCTION_ADMIN__ENABLED", "false"),
        ],
    )
    .unwrap();
    let UpstreamTransport::Stdio { env, cwd, .. } = &config.mounts[0].transport else {
        panic!("a stdio mount");
    };
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(
        env,
        [
            ("DEBUG", "true"),
            ("DIRS", "[\"/data\", \"/tmp\"]"),
            ("OPTIONS", "{ depth = 2 }"),
            ("PIN", "0123"),
            ("PORT", "8080"),
            ("QUOTED", "\"007\""),
            ("RATIO", "1.50"),
            ("SPACED", " x "),
        ]
    );
    assert_eq!(cwd.as_deref(), Some(std::path::Path::new("2024")));
    let UpstreamTransport::StreamableHttp { headers, .. } = &config.mounts[1].transport else {
        panic!("an HTTP mount");
    };
    assert_eq!(headers["X_Api_Key"], "08675309");
    assert_eq!(config.mounts[1].max_upstream_sessions, Some(3));
    assert_eq!(config.limits.max_sessions, 12);
    assert!(!config.admin.enabled);
}

/// In a file, integers and booleans written where the config takes text
/// are that text (YAML reads `8080` as a number); a fraction is refused
/// without quoting the value, which may be a secret.
#[test]
fn file_numbers_where_text_is_taken() {
    let config = parse(
        "junction.yaml",
        "mounts:\n  loc:\n    command: x\n    args: [--port, 8080, --verbose, true]\n    env: {PORT: 8080}\n    cwd: 2024\n",
    )
    .unwrap();
    let UpstreamTransport::Stdio { args, env, cwd, .. } = &config.mounts[0].transport else {
        panic!("a stdio mount");
    };
    assert_eq!(args, &["--port", "8080", "--verbose", "true"]);
    assert_eq!(env["PORT"], "8080");
    assert_eq!(cwd.as_deref(), Some(std::path::Path::new("2024")));
    // Names too (ops helper: these were refused as "expected a string"):
    // a host, tool patterns, forwarded headers, the service name.
    let config = parse(
        "junction.yaml",
        "server:\n  allowed_hosts: [localhost, 1234]\ntelemetry:\n  service_name: 2024\n\
         mounts:\n  web:\n    url: http://h/mcp\n    isolation: per_session\n\
         \x20   include_tools: [7, search]\n    exclude_tools: [8]\n\
         \x20   forward_headers: {X-Upstream: 42}\n  both:\n    url: http://h/mcp\n\
         \x20   isolation: per_session\n    forward_headers: [101]\n",
    )
    .unwrap();
    assert_eq!(config.server.allowed_hosts, ["localhost", "1234"]);
    assert_eq!(config.telemetry.service_name, "2024");
    let web = config
        .mounts
        .iter()
        .find(|m| m.name.as_str() == "web")
        .unwrap();
    assert!(web.tools.offers("7") && web.tools.offers("search"));
    assert!(!web.tools.offers("8") && !web.tools.offers("other"));
    assert_eq!(web.forward_headers["x-upstream"], "42");
    let both = config
        .mounts
        .iter()
        .find(|m| m.name.as_str() == "both")
        .unwrap();
    assert_eq!(both.forward_headers["101"], "101");
    let found = problems(
        "junction.toml",
        "[mounts.web]\nurl = \"http://h/mcp\"\nheaders = { X = 1234.5678 }\n",
    );
    assert_eq!(
        found,
        ["mounts.web.headers.X: a number with a fraction is not taken as text: write it in quotes"]
    );
}

/// The endpoint is one literal path: a path the router would read as a
/// pattern (or refuse at start-up), or one the gateway serves something
/// else on, is a config problem, not a panic or a lost endpoint later.
#[test]
fn the_endpoint_path_is_literal_and_not_reserved() {
    for (path, problem) in [
        ("/:mcp", "must not have a segment starting with `:` or `*`"),
        (
            "/mcp/*rest",
            "must not have a segment starting with `:` or `*`",
        ),
        ("/{x}", "must not contain whitespace, `{`, `}`, `?` or `#`"),
        (
            "/mcp?x=1",
            "must not contain whitespace, `{`, `}`, `?` or `#`",
        ),
        ("/metrics", "is reserved; use a path such as /mcp"),
        ("/status.json", "is reserved; use a path such as /mcp"),
        ("/healthz", "is reserved; use a path such as /mcp"),
    ] {
        let found = problems("junction.toml", &format!("[server]\npath = {path:?}\n"));
        assert_eq!(
            found,
            [format!("server.path: {path:?} {problem}")],
            "{path}"
        );
    }
    for path in ["/mcp", "/v1/mcp/", "/a:b", "/team-x/mcp"] {
        let config = parse("junction.toml", &format!("[server]\npath = {path:?}\n"));
        assert_eq!(config.map(|config| config.server.path), Ok(path.to_owned()));
    }
}

/// A bad entry of a list an environment variable set is told that
/// variable, as a bad value it set is. Paths are written one way
/// (`args.0`): serde_path_to_error's `args[0]` matched no variable's.
#[test]
fn a_bad_entry_of_a_list_set_by_a_variable_names_the_variable() {
    let found = load_file(
        "junction.toml",
        "[mounts.m]\ncommand = \"x\"\n",
        &[
            ("JUNCTION_MOUNTS__M__ARGS", r#"[["nested"], "fine"]"#),
            ("JUNCTION_MOUNTS__M__EXCLUDE_TOOLS", r#"["a", ""]"#),
            ("JUNCTION_ENDPOINTS__IDE__MOUNTS", r#"["m", "nope"]"#),
        ],
    )
    .expect_err("config should be invalid");
    assert_reported(
        &found,
        &[
            "mounts.m.args.0: ",
            "mounts.m.exclude_tools.1: ",
            "endpoints.ide.mounts.1: no mount named \"nope\"",
        ],
    );
    for variable in [
        "JUNCTION_MOUNTS__M__ARGS",
        "JUNCTION_MOUNTS__M__EXCLUDE_TOOLS",
        "JUNCTION_ENDPOINTS__IDE__MOUNTS",
    ] {
        assert!(
            found
                .iter()
                .any(|problem| problem
                    .ends_with(&format!("(set by environment variable {variable})"))),
            "{found:#?}"
        );
    }
}

/// serde stops at a field's first bad entry; every bad entry of a list or
/// table is reported, each at its own path, however deep.
#[test]
fn every_bad_entry_of_a_list_or_table_is_reported() {
    let found = problems(
        "junction.toml",
        r#"
        [server]
        allowed_hosts = [1.5, "a", [2]]
        [mounts.m]
        command = "x"
        args = ["ok", [1], {}]
        env = { A = [], B = {}, C = "fine" }
        timeouts = { tools = { t1 = 5, t2 = [] } }
        "#,
    );
    assert_eq!(
        problem_paths(&found),
        [
            "server.allowed_hosts.0",
            "server.allowed_hosts.2",
            "mounts.m.args.1",
            "mounts.m.args.2",
            "mounts.m.env.A",
            "mounts.m.env.B",
            "mounts.m.timeouts.tools.t1",
            "mounts.m.timeouts.tools.t2",
        ],
        "{found:#?}"
    );
}

/// A NUL byte cannot reach the operating system, and a variable's name
/// cannot be empty or hold `=`: each is a problem at its field, found when
/// the config is read (the mount failed at its first start, the field
/// unnamed, and `check` called the config valid).
#[test]
fn a_stdio_mount_that_cannot_be_spawned_is_reported_at_each_field() {
    let found = problems(
        "junction.toml",
        r#"
        [mounts.m]
        command = "x\u0000"
        args = ["fine", "a\u0000b"]
        env = { "" = "v", "A=B" = "v", OK = "a\u0000b", FINE = "v" }
        cwd = "/tmp\u0000"
        "#,
    );
    assert_eq!(
        problem_paths(&found),
        [
            "mounts.m.command",
            "mounts.m.args.1",
            "mounts.m.env.",
            "mounts.m.env.A=B",
            "mounts.m.env.OK",
            "mounts.m.cwd",
        ],
        "{found:#?}"
    );
}

/// `[endpoints.NAME]` serves some of the mounts at `{server.path}/NAME`;
/// an environment variable names one as it names a mount.
#[test]
fn endpoints_name_the_mounts_they_serve() {
    let config = load_file(
        "junction.toml",
        r#"
        [mounts.alpha]
        command = "x"
        [mounts.beta-two]
        command = "x"
        [endpoints.web]
        mounts = ["beta-two", "alpha"]
        "#,
        &[("JUNCTION_ENDPOINTS__ONLY_ALPHA__MOUNTS", r#"["alpha"]"#)],
    )
    .unwrap();
    let served: Vec<(&str, Vec<&str>)> = config
        .endpoints
        .iter()
        .map(|endpoint| {
            let mounts = endpoint.mounts.iter().map(MountName::as_str).collect();
            (endpoint.name.as_ref(), mounts)
        })
        .collect();
    assert_eq!(
        served,
        [
            ("only-alpha", vec!["alpha"]),
            ("web", vec!["beta-two", "alpha"])
        ]
    );
    let web = config.endpoint("web").expect("configured");
    assert!(web.serves(&MountName::new("alpha").unwrap()));
    assert!(config.endpoint("nope").is_none());
    assert_eq!(endpoint_path("/mcp", "web"), "/mcp/web");
    assert_eq!(endpoint_path("/v1/mcp/", "web"), "/v1/mcp/web");
}

#[test]
fn every_endpoint_problem_is_reported_with_its_path() {
    let found = problems(
        "junction.toml",
        r#"
        [server]
        sse_path = "/mcp/sse"
        [mounts.a]
        command = "x"
        [mounts.Bad_Mount]
        command = "x"
        [endpoints.Web]
        mounts = ["a"]
        [endpoints.typo]
        mount = ["a"]
        [endpoints.none]
        mounts = []
        [endpoints.unsaid]
        [endpoints.wrong]
        mounts = ["a", "b", "a", 3]
        [endpoints.sse]
        mounts = ["a"]
        [endpoints.bad-mount]
        mounts = ["Bad_Mount"]
        "#,
    );
    let expected = [
        "mounts.Bad_Mount: mount name \"Bad_Mount\" must match",
        "endpoints.Web: endpoint name \"Web\" must match ^[a-z][a-z0-9-]{0,31}$ (it is a path segment of the URL)",
        "endpoints.typo.mount: unknown field `mount`, expected `mounts`",
        "endpoints.none.mounts: empty: an endpoint serves at least one mount",
        "endpoints.unsaid.mounts: missing: the mounts this endpoint serves",
        "endpoints.wrong.mounts.1: no mount named \"b\" (mounts: a, Bad_Mount)",
        "endpoints.wrong.mounts.2: \"a\" is listed twice",
        "endpoints.wrong.mounts.3: no mount named \"3\"",
        "endpoints.sse: its path \"/mcp/sse\" is server.sse_path's; name the endpoint otherwise",
    ];
    assert_reported(&found, &expected);
    // The mount's own problem is said once, where the mount is.
    assert!(
        !found
            .iter()
            .any(|problem| problem.starts_with("endpoints.bad-mount")),
        "{found:#?}"
    );
    // A `mounts` of the wrong kind is that, not missing too.
    let text = problems(
        "junction.toml",
        "[mounts.a]\ncommand = \"x\"\n[endpoints.ide]\nmounts = \"a\"\n",
    );
    assert_eq!(problem_paths(&text), ["endpoints.ide.mounts"], "{text:#?}");
    let table = problems("junction.toml", "endpoints = 3\n");
    assert_eq!(
        table,
        ["endpoints: expected a table of endpoints, found a number"]
    );
}

#[test]
fn env_keys_become_config_paths() {
    for (key, path) in [
        ("SERVER__LISTEN", "server.listen"),
        ("MOUNTS__MY_SERVER__URL", "mounts.my-server.url"),
        (
            "MOUNTS__A__HEADERS__X_Api_Key",
            "mounts.a.headers.X_Api_Key",
        ),
        ("MOUNTS__A__TIMEOUTS__REQUEST", "mounts.a.timeouts.request"),
        (
            "MOUNTS__A__TIMEOUTS__TOOLS__Render",
            "mounts.a.timeouts.tools.Render",
        ),
        ("LIMITS__MAX_SESSIONS", "limits.max_sessions"),
    ] {
        assert_eq!(super::load::env_key_path(key), path, "{key}");
    }
}

#[test]
fn every_problem_is_reported_at_once_with_its_path() {
    let found = problems(
        "junction.toml",
        r#"
        bogus = 1
        [server]
        listen = "nowhere"
        path = "mcp"
        separator = "x"
        session_idle_timeout = "soon"
        [mounts.Bad_Name]
        command = "x"
        [mounts.tiny]
        url = "/relative"
        [mounts.both]
        command = "x"
        url = "http://h/mcp"
        [mounts.neither]
        isolation = "sometimes"
        [mounts.typo]
        comand = "x"
        [mounts.secret]
        url = "http://h/mcp"
        headers = { Authorization = "Bearer ${JUNCTION_TEST_UNSET_VARIABLE}" }
        [mounts.mixed]
        command = "x"
        headers = { A = "b" }
        [mounts.remote]
        url = "ftp://h/mcp"
        args = ["a"]
        "#,
    );
    let expected = [
        "server.listen: \"nowhere\" is not a socket address like 127.0.0.1:8080",
        "server.path: \"mcp\" must start with `/`",
        "server.separator: separator \"x\" must be 1 to 4 characters from `_`, `-`, `.`, `:`",
        "server.session_idle_timeout: \"soon\" is not a duration like \"30m\"",
        "bogus: unknown key (expected `server`, `mounts`, `endpoints`, `timeouts`, `supervision`, `limits`, `telemetry` or `admin`)",
        "mounts.Bad_Name: mount name \"Bad_Name\" must match ^[a-z][a-z0-9-]{0,31}$",
        "mounts.tiny.url: relative URL without a base",
        "mounts.both: set either `command` (stdio upstream) or `url` (Streamable HTTP or SSE upstream), not both",
        "mounts.neither.isolation: \"sometimes\" is not an isolation mode",
        "mounts.neither: missing `command` (stdio upstream) or `url` (Streamable HTTP or SSE upstream)",
        "mounts.typo.comand: unknown field `comand`",
        "mounts.secret.headers.Authorization: environment variable JUNCTION_TEST_UNSET_VARIABLE is not set",
        "mounts.mixed.headers: only HTTP upstreams (`url`) take headers",
        "mounts.remote.args: only stdio upstreams (`command`) take this field",
        "mounts.remote.url: scheme \"ftp\" is not http or https",
    ];
    assert_reported(&found, &expected);
}

/// `transport` picks the HTTP protocol of a `url` mount (Streamable HTTP
/// unless it says "sse"); a stdio mount may only say "stdio"; anything
/// else is reported with the choices, alongside the mount's other problems.
#[test]
fn an_http_mount_chooses_its_transport() {
    let config = parse(
        "junction.toml",
        r#"
        [mounts.modern]
        url = "http://h/mcp"
        [mounts.named]
        url = "http://h/mcp"
        transport = "streamable_http"
        [mounts.legacy]
        url = "http://h/sse"
        transport = "sse"
        headers = { Authorization = "Bearer x" }
        [mounts.local]
        command = "x"
        transport = "stdio"
        "#,
    )
    .unwrap();
    let kinds: Vec<&str> = config.mounts.iter().map(|m| m.transport.kind()).collect();
    assert_eq!(
        kinds,
        ["streamable_http", "streamable_http", "sse", "stdio"]
    );
    let UpstreamTransport::Sse { url, headers } = &config.mounts[2].transport else {
        panic!("{:?}", config.mounts[2].transport);
    };
    assert_eq!(url.as_str(), "http://h/sse");
    assert_eq!(headers["Authorization"], "Bearer x");

    let found = problems(
        "junction.toml",
        r#"
        [mounts.typo]
        url = "http://h/sse"
        transport = "SSE"
        [mounts.stdio-url]
        url = "http://h/mcp"
        transport = "stdio"
        [mounts.sse-command]
        command = "x"
        transport = "sse"
        [mounts.both-bad]
        url = "ftp://h/sse"
        transport = "websocket"
        [mounts.neither]
        transport = "grpc"
        "#,
    );
    assert_reported(
        &found,
        &[
            "mounts.typo.transport: \"SSE\" is not an HTTP transport (use \"streamable_http\" or \"sse\")",
            "mounts.stdio-url.transport: \"stdio\" is not an HTTP transport (use \"streamable_http\" or \"sse\") (stdio upstreams are given by `command`)",
            "mounts.sse-command.transport: a `command` upstream speaks stdio; \"streamable_http\" and \"sse\" need a `url`",
            "mounts.both-bad.transport: \"websocket\" is not an HTTP transport",
            "mounts.both-bad.url: scheme \"ftp\" is not http or https",
            "mounts.neither.transport: \"grpc\" is not a transport",
            "mounts.neither: missing `command`",
        ],
    );
}

/// A `${VAR}` that is not set is one problem, not two: checking the
/// placeholder left in its place ("relative URL without a base", "not a
/// duration") reported a second, false one at the same path. Other
/// problems still show.
#[test]
fn an_unset_variable_is_reported_once() {
    let found = problems(
        "junction.toml",
        r#"
        [server]
        listen = "${JUNCTION_TEST_UNSET_LISTEN}"
        [timeouts]
        request = "${JUNCTION_TEST_UNSET_REQUEST}"
        connect = "soon"
        [mounts.a]
        url = "${JUNCTION_TEST_UNSET_URL}"
        "#,
    );
    assert_eq!(found.len(), 4, "{found:#?}");
    for path in ["server.listen", "timeouts.request", "mounts.a.url"] {
        assert!(
            found
                .iter()
                .any(|p| p.starts_with(&format!("{path}: environment variable "))),
            "{path}: {found:#?}"
        );
    }
    assert!(
        found.iter().any(|p| p.starts_with("timeouts.connect:")),
        "{found:#?}"
    );
}

/// One bad field hides no other: within a table, within a mount, and a
/// problem elsewhere in `[server]` hides no namespace clash.
#[test]
fn one_bad_field_hides_no_other() {
    let found = problems(
        "junction.toml",
        r#"
        [server]
        listn = "x"
        path = "mcp"
        listen = "nowhere"
        [mounts.Web]
        url = "/rel"
        timeout = "5s"
        [mounts.a]
        command = "x"
        namespace = "dup"
        [mounts.b]
        command = "x"
        namespace = "dup"
        [mounts.c]
        command = "x"
        namespace = "dup"
        isolation = "weird"
        "#,
    );
    assert_reported(
        &found,
        &[
            "server.listn: unknown field `listn`",
            "server.path: \"mcp\" must start with `/`",
            "server.listen: \"nowhere\" is not a socket address",
            "mounts.Web.timeout: unknown field `timeout`",
            "mounts.Web: mount name \"Web\" must match",
            "mounts.Web.url: relative URL without a base",
            "mounts.b.namespace: namespace \"dup\" is already used by mount a",
            // With the mount's other problem, not once it is fixed.
            "mounts.c.isolation:",
            "mounts.c.namespace: namespace \"dup\" is already used by mount a",
        ],
    );
}

#[test]
fn type_errors_name_their_field() {
    let found = problems("junction.toml", "[mounts.a]\ncommand = \"x\"\nargs = 5\n");
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("mounts.a.args: invalid type")),
        "{found:?}"
    );
}

#[test]
fn namespaces_must_split_unambiguously() {
    let found = problems(
        "junction.toml",
        r#"
        [server]
        separator = "-"
        [mounts.a]
        command = "x"
        namespace = "my"
        [mounts.b]
        command = "x"
        namespace = "my-tools"
        [mounts.c]
        command = "x"
        namespace = "my"
        "#,
    );
    assert!(
        found
            .iter()
            .any(|p| p
                .starts_with("mounts.c.namespace: namespace \"my\" is already used by mount a")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p
                .starts_with("mounts.b.namespace: namespace \"my-tools\" followed by separator")),
        "{found:?}"
    );
}

/// An invalid separator hides no namespace used twice (black-box helper:
/// only the separator was reported).
#[test]
fn a_bad_separator_hides_no_duplicate_namespace() {
    let found = problems(
        "junction.toml",
        r#"
        [server]
        separator = "abcdef"
        [mounts.one]
        command = "x"
        namespace = "same"
        [mounts.two]
        command = "x"
        namespace = "same"
        "#,
    );
    assert_reported(
        &found,
        &[
            "server.separator:",
            "mounts.two.namespace: namespace \"same\" is already used by mount one",
        ],
    );
}

#[test]
fn origins_are_checked_and_star_disables_the_check() {
    let found = problems(
        "junction.toml",
        "[server]\nallowed_origins = [\"https://ok.example\", \"ftp://x\", \"http://h/path\", \"null\", \"https://h:8443:*\", \"https://h:443:*\", \"http://[::1]:*\", \"http://[::1]:3000:*\", \"http://h:80\"]\n",
    );
    let not_an_origin = |index: usize, origin: &str| {
        format!("server.allowed_origins.{index}: {origin:?} is not an origin like \"https://app.example.com\", \"http://localhost:*\" or \"null\"")
    };
    let both = |index: usize, origin: &str| {
        format!("server.allowed_origins.{index}: {origin:?} has both a port and `:*` (any port); keep one")
    };
    assert_eq!(
        found,
        [
            not_an_origin(1, "ftp://x"),
            not_an_origin(2, "http://h/path"),
            // rmcp would ignore these entries.
            both(4, "https://h:8443:*"),
            both(5, "https://h:443:*"),
            both(7, "http://[::1]:3000:*"),
        ]
    );
    let config = load_file(
        "junction.toml",
        "[server]\nallowed_origins = [\"*\"]\n",
        &[],
    )
    .unwrap();
    assert_eq!(config.server.allowed_origins, None);
}

#[test]
fn empty_host_list_and_unknown_format_are_rejected() {
    let found = problems("junction.toml", "[server]\nallowed_hosts = []\n");
    assert!(found[0].starts_with("server.allowed_hosts: must not be empty"));
    let found = problems("junction.ini", "");
    assert!(found[0].starts_with("unknown config format"), "{found:?}");
}

#[test]
fn error_lines_carry_the_source() {
    let mut rendered = String::new();
    Jail::expect_with(|jail| {
        jail.create_file("bad.toml", "[mounts.tiny]\nurl = \"x\"\n")?;
        rendered = load(&ConfigSource::File("bad.toml".into()))
            .unwrap_err()
            .to_string();
        Ok(())
    });
    assert_eq!(
        rendered,
        "bad.toml: mounts.tiny.url: relative URL without a base"
    );
}

#[test]
fn telemetry_and_admin_have_defaults_and_checks() {
    let config = load_file("junction.toml", "", &[]).unwrap();
    assert_eq!(
        config.telemetry.log_format,
        crate::telemetry::LogFormat::Text
    );
    assert_eq!(config.telemetry.otlp_endpoint, None);
    assert!(config.admin.enabled);
    assert_eq!(config.admin.listen, None);
    let found = problems(
        "junction.toml",
        "[telemetry]\nlog_format = \"xml\"\notlp_endpoint = \"collector\"\notlp_protocol = \"grpc\"\n[admin]\nlisten = \"nope\"\n",
    );
    for needle in [
        "telemetry.log_format: \"xml\" is not a log format",
        "telemetry.otlp_endpoint: relative URL without a base",
        "telemetry.otlp_protocol: \"grpc\" is not supported",
        "admin.listen: \"nope\" is not a socket address",
    ] {
        assert!(
            found.iter().any(|p| p.starts_with(needle)),
            "{needle}: {found:#?}"
        );
    }
}

/// A bare word that is not a level is refused: `EnvFilter` alone reads one
/// as a module enabled at `trace` with everything else off, so `warning`,
/// or `loud`, silenced the whole log, errors included. Filters with
/// modules and spans still pass.
#[test]
fn a_log_level_that_is_no_level_is_refused() {
    for bad in [
        "warning",
        "info,debgu",
        "Verbose",
        "errors",
        "inof",
        "loud",
        "junction",
        "info,rmcp",
        "junction::upstream",
    ] {
        let found = problems(
            "junction.toml",
            &format!("[telemetry]\nlog_level = {bad:?}\n"),
        );
        assert!(
            found
                .iter()
                .any(|p| p.starts_with("telemetry.log_level:") && p.contains("is not a level")),
            "{bad}: {found:#?}"
        );
    }
    for good in [
        "warn",
        "INFO",
        "info,junction=debug",
        "off",
        "junction::upstream=debug",
        "junction=trace",
        "info,rmcp=warn",
        "warn,hyper=debug",
        "info,junction::upstream=trace",
        "info,rmcp=warn,junction[mcp.request]=debug",
        "3",
    ] {
        let config = load_file(
            "junction.toml",
            &format!("[telemetry]\nlog_level = {good:?}\n"),
            &[],
        );
        assert!(config.is_ok(), "{good}: {config:?}");
    }
}

/// A key written twice in a JSON or YAML table is refused, as TOML
/// refuses it: serde kept the last, so a copied mount not renamed replaced
/// the first without a word. Every repeat is named.
#[test]
fn a_key_written_twice_in_json_or_yaml_is_refused() {
    let json = r#"{"mounts": {"a": {"url": "http://first/mcp"}, "a": {"url": "http://second/mcp"}},
        "limits": {"max_sessions": 5, "max_sessions": 7}}"#;
    let found = problems("junction.json", json);
    for path in ["mounts.a", "limits.max_sessions"] {
        assert!(
            found
                .iter()
                .any(|p| p.starts_with(&format!("{path}: written twice"))),
            "{path}: {found:#?}"
        );
    }
    let yaml = "mounts:\n  a:\n    url: http://first/mcp\n  a:\n    url: http://second/mcp\n";
    let found = problems("junction.yaml", yaml);
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("mounts.a: written twice")),
        "{found:#?}"
    );
}

#[test]
fn timeouts_supervision_and_limits_have_documented_defaults() {
    let config = parse("junction.toml", "[mounts.a]\ncommand = \"x\"\n").unwrap();
    assert_eq!(config.server.shutdown_grace, defaults::SHUTDOWN_GRACE);
    assert_eq!(
        config.server.request_read_timeout,
        defaults::REQUEST_READ_TIMEOUT
    );
    assert_eq!(config.timeouts.connect, defaults::CONNECT_TIMEOUT);
    assert_eq!(config.timeouts.initialize, defaults::INITIALIZE_TIMEOUT);
    assert_eq!(config.timeouts.request, defaults::REQUEST_TIMEOUT);
    assert_eq!(config.timeouts.request_ceiling, defaults::REQUEST_CEILING);
    assert_eq!(
        config.supervision.restart_backoff,
        defaults::RESTART_BACKOFF
    );
    assert_eq!(
        config.supervision.crash_loop_restarts,
        defaults::CRASH_LOOP_RESTARTS
    );
    assert_eq!(config.limits.max_sessions, defaults::MAX_SESSIONS);
    assert_eq!(config.limits.max_body_size, defaults::MAX_BODY_SIZE);
    assert_eq!(config.mounts[0].timeouts, MountTimeouts::default());
    assert_eq!(config.mounts[0].max_upstream_sessions, None);
}

#[test]
fn mount_timeouts_override_the_gateway_defaults_per_tool() {
    let config = parse(
        "junction.toml",
        r#"
        [timeouts]
        request = "20s"
        request_ceiling = "10m"
        [limits]
        max_body_size = "512KiB"
        max_sessions = 50
        [supervision]
        restart_backoff = "50ms"
        crash_loop_restarts = 2
        [mounts.slow]
        command = "x"
        max_upstream_sessions = 3
        timeouts = { request = "2m", tools = { render = "9m" } }
        "#,
    )
    .unwrap();
    assert_eq!(config.limits.max_body_size, 512 * 1024);
    assert_eq!(config.limits.max_sessions, 50);
    assert_eq!(
        config.supervision.restart_backoff,
        Duration::from_millis(50)
    );
    assert_eq!(config.supervision.crash_loop_restarts, 2);
    let mount = &config.mounts[0];
    assert_eq!(mount.max_upstream_sessions, Some(3));
    let effective = config.timeouts.for_mount(&mount.timeouts);
    assert_eq!(effective.request, Duration::from_secs(120));
    assert_eq!(effective.request_ceiling, Duration::from_secs(600));
    assert_eq!(effective.initialize, defaults::INITIALIZE_TIMEOUT);
    assert_eq!(mount.timeouts.tools["render"], Duration::from_secs(540));
}

#[test]
fn bad_timeouts_and_limits_are_all_reported() {
    let found = problems(
        "junction.toml",
        r#"
        [server]
        shutdown_grace = "0s"
        request_read_timeout = "a while"
        session_idle_timeout = "500000000000years"
        [timeouts]
        connect = "fast"
        request = "2h"
        [supervision]
        crash_loop_restarts = 0
        restart_backoff = "1m"
        restart_backoff_max = "1s"
        [limits]
        max_sessions = 0
        max_body_size = "lots"
        [mounts.m]
        command = "x"
        max_upstream_sessions = 0
        timeouts = { initialize = "-1", tools = { t = "2h" }, bogus = "1s" }
        "#,
    );
    let expected = [
        "server.shutdown_grace: must be longer than zero",
        "server.request_read_timeout: \"a while\" is not a duration",
        "server.session_idle_timeout: \"500000000000years\" is longer than the longest duration taken (1year)",
        "timeouts.connect: \"fast\" is not a duration",
        "timeouts.request: is longer than request_ceiling (1h)",
        "supervision.crash_loop_restarts: must be at least 1",
        "supervision.restart_backoff: is longer than restart_backoff_max (1s)",
        "limits.max_sessions: must be at least 1",
        "limits.max_body_size: \"lots\" is not a size",
        "mounts.m.timeouts.bogus: unknown field `bogus`",
    ];
    assert_reported(&found, &expected);
}

#[test]
fn sizes_take_numbers_and_binary_units() {
    for (text, bytes) in [
        ("1024", 1024),
        ("\"4MiB\"", 4 << 20),
        ("\"2 kb\"", 2048),
        ("\"1G\"", 1 << 30),
    ] {
        let config = parse(
            "junction.toml",
            &format!("[limits]\nmax_body_size = {text}\n"),
        )
        .unwrap();
        assert_eq!(config.limits.max_body_size, bytes, "{text}");
    }
}

#[test]
fn a_tool_timeout_may_not_exceed_the_ceiling() {
    let found = problems(
        "junction.toml",
        "[mounts.n]\ncommand = \"x\"\ntimeouts = { request_ceiling = \"5m\", tools = { t = \"6m\" } }\n",
    );
    assert_eq!(
        found,
        ["mounts.n.timeouts.tools.t: is longer than request_ceiling (5m)"]
    );
}

/// A value of the wrong kind is reported by its kind alone: serde quotes
/// what it could not take, and `${VAR}` may have put a secret in it.
#[test]
fn a_value_of_the_wrong_kind_is_not_echoed() {
    let found = load_file(
        "junction.toml",
        "[mounts.a]\ncommand = \"x\"\nargs = \"--token ${TOKEN}\"\n\n[mounts.b]\nurl = \"https://example.com/mcp\"\nheaders = \"Bearer ${TOKEN}\"\n\n[limits]\nmax_sessions = \"${TOKEN}\"\n",
        &[("TOKEN", "s3cret")],
    )
    .expect_err("wrong kinds");
    assert_reported(
        &found,
        &[
            "mounts.a.args: invalid type: text, expected a sequence",
            "mounts.b.headers: invalid type: text, expected a map",
            "limits.max_sessions",
        ],
    );
    assert!(
        found.iter().all(|problem| !problem.contains("s3cret")),
        "{found:#?}"
    );
}

/// A field of the wrong kind as a whole is reported once, and a mount
/// whose `command` or `url` cannot be read is not also told it has none:
/// `command = [1, 2]` gave the same problem twice, then "missing `command`".
#[test]
fn an_unreadable_command_or_url_is_reported_once() {
    for (text, expected) in [
        (
            "[mounts.a]\ncommand = [1, 2]\n",
            "mounts.a.command: invalid type: sequence, expected a string",
        ),
        (
            "[mounts.a]\nurl = [\"https://example.com/mcp\"]\n",
            "mounts.a.url: invalid type: sequence, expected a string",
        ),
        (
            "[mounts.a]\ncommand = { run = \"x\" }\n",
            "mounts.a.command: invalid type: map, expected a string",
        ),
    ] {
        assert_eq!(problems("junction.toml", text), [expected], "{text}");
    }
    // Members are still reported one by one where the field's kind fits.
    assert_eq!(
        problems(
            "junction.toml",
            "[mounts.a]\ncommand = \"x\"\nargs = [\"ok\", [], {}]\n"
        ),
        [
            "mounts.a.args.1: invalid type: sequence, expected a string",
            "mounts.a.args.2: invalid type: map, expected a string",
        ]
    );
    // And a mount with neither is still told so.
    assert_eq!(
        problems("junction.toml", "[mounts.a]\nnamespace = \"a\"\n"),
        ["mounts.a: missing `command` (stdio upstream) or `url` (Streamable HTTP or SSE upstream)"]
    );
}

/// A YAML section whose keys are all commented out is null: no section,
/// not a config error.
#[test]
fn an_empty_yaml_section_is_no_section() {
    let config = parse(
        "junction.yaml",
        "server:\n  # listen: 0.0.0.0:9000\nlimits:\ntimeouts:\nsupervision:\ntelemetry:\nadmin:\nmounts:\n",
    )
    .unwrap();
    assert_eq!(config.limits.max_sessions, defaults::MAX_SESSIONS);
    assert!(config.mounts.is_empty());
}

/// `mounts` of the wrong kind is reported by its kind alone.
#[test]
fn mounts_of_the_wrong_kind_are_not_echoed() {
    let found = load_file(
        "junction.toml",
        "mounts = \"${TOKEN}\"\n",
        &[("TOKEN", "s3cret")],
    )
    .expect_err("mounts as text");
    assert_reported(&found, &["mounts: expected a table of mounts, found text"]);
}

/// The admin endpoints on an address of their own cannot share the MCP
/// listener's: the second bind would fail at start.
#[test]
fn admin_listen_is_not_server_listen() {
    let found = problems(
        "junction.toml",
        "[server]\nlisten = \"127.0.0.1:8080\"\n\n[admin]\nlisten = \"127.0.0.1:8080\"\n",
    );
    assert_reported(&found, &["admin.listen: is server.listen too"]);
    // Port 0 is a fresh port for each.
    parse(
        "junction.toml",
        "[server]\nlisten = \"127.0.0.1:0\"\n\n[admin]\nlisten = \"127.0.0.1:0\"\n",
    )
    .expect("two fresh ports");
}

#[test]
fn tool_patterns_choose_what_a_mount_offers() {
    let config = parse(
        "junction.yaml",
        "mounts:\n  gh:\n    command: x\n    include_tools: [\"get_*\", list_issues]\n    exclude_tools: [get_secret]\n  all:\n    command: x\n",
    )
    .unwrap();
    let gh = &config.mounts[0].tools;
    assert!(gh.offers("get_issue"));
    assert!(gh.offers("list_issues"));
    assert!(!gh.offers("get_secret"));
    assert!(!gh.offers("delete_issue"));
    assert!(config.mounts[1].tools.offers_everything());
    assert_eq!(
        *gh,
        ToolFilter::new(
            Some(vec!["get_*".into(), "list_issues".into()]),
            vec!["get_secret".into()],
        )
    );
}

#[test]
fn tool_patterns_come_from_the_environment_as_lists() {
    let config = load_file(
        "junction.toml",
        "[mounts.a]\ncommand = \"x\"\n",
        &[
            ("JUNCTION_MOUNTS__A__INCLUDE_TOOLS", "[\"get_*\", \"echo\"]"),
            ("JUNCTION_MOUNTS__A__EXCLUDE_TOOLS", "[\"get_secret\"]"),
        ],
    )
    .unwrap();
    let tools = &config.mounts[0].tools;
    assert!(tools.offers("echo") && tools.offers("get_x"));
    assert!(!tools.offers("get_secret") && !tools.offers("add"));
}

/// Every bad pattern is reported, with its place, next to the mount's
/// other problems.
#[test]
fn bad_tool_patterns_are_reported_with_their_place() {
    let found = problems(
        "junction.toml",
        "[mounts.a]\ncommand = \"x\"\ninclude_tools = [\"ok\", \"\"]\nexclude_tools = [\"\"]\nisolation = \"sometimes\"\n\
         [mounts.b]\ncommand = \"x\"\ninclude_tools = \"get_*\"\n\
         [mounts.c]\ncommand = \"x\"\nexclude_tools = [\"a\", [3]]\n",
    );
    assert_reported(
        &found,
        &[
            "mounts.a.include_tools.1: an empty pattern matches no tool",
            "mounts.a.exclude_tools.0: an empty pattern matches no tool",
            "mounts.a.isolation:",
            "mounts.b.include_tools:",
            "mounts.c.exclude_tools.1:",
        ],
    );
    assert_eq!(found.len(), 5, "{found:#?}");
}

/// A mount may offer no tool (kept for its prompts and resources).
#[test]
fn an_empty_include_list_is_a_mount_without_tools() {
    let config = parse(
        "junction.toml",
        "[mounts.a]\ncommand = \"x\"\ninclude_tools = []\n",
    )
    .unwrap();
    assert!(!config.mounts[0].tools.offers("anything"));
}

#[test]
fn forwarded_headers_are_named_as_sent_or_renamed() {
    let config = parse(
        "junction.toml",
        "[mounts.a]\nurl = \"http://127.0.0.1:1/mcp\"\nisolation = \"per_session\"\n\
         forward_headers = [\"Authorization\", \"X-Api-Key\"]\n\
         [mounts.b]\nurl = \"http://127.0.0.1:1/sse\"\ntransport = \"sse\"\nisolation = \"per_session\"\n\
         forward_headers = { Authorization = \"X-B-Token\" }\n\
         [mounts.c]\nurl = \"http://127.0.0.1:1/mcp\"\n",
    )
    .unwrap();
    let forwarded = |index: usize| {
        config.mounts[index]
            .forward_headers
            .iter()
            .map(|(upstream, client)| (upstream.as_str(), client.as_str()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        forwarded(0),
        [
            ("authorization", "authorization"),
            ("x-api-key", "x-api-key")
        ]
    );
    assert_eq!(forwarded(1), [("authorization", "x-b-token")]);
    assert!(forwarded(2).is_empty());
}

#[test]
fn forwarded_headers_come_from_the_environment_as_a_list() {
    let config = load_file(
        "junction.toml",
        "[mounts.a]\nurl = \"http://127.0.0.1:1/mcp\"\nisolation = \"per_session\"\n",
        &[("JUNCTION_MOUNTS__A__FORWARD_HEADERS", "[\"Authorization\"]")],
    )
    .unwrap();
    assert_eq!(
        config.mounts[0].forward_headers.get("authorization"),
        Some(&"authorization".to_owned())
    );
}

/// A client's headers go only to its own upstream sessions: never to a
/// shared mount (every client's), never to a stdio one, never in place of
/// what the transport itself sends. Every problem at once, with its place.
#[test]
fn forwarded_headers_are_refused_where_they_would_leak_or_break() {
    let found = problems(
        "junction.toml",
        "[mounts.shared]\nurl = \"http://127.0.0.1:1/mcp\"\nforward_headers = [\"Authorization\"]\n\
         [mounts.local]\ncommand = \"x\"\nisolation = \"per_session\"\nforward_headers = [\"Authorization\"]\n\
         [mounts.odd]\nurl = \"http://127.0.0.1:1/mcp\"\nisolation = \"per_session\"\n\
         forward_headers = [\"Mcp-Session-Id\", \"bad header\", \"X-A\", \"x-a\"]\n\
         [mounts.renamed]\nurl = \"http://127.0.0.1:1/mcp\"\nisolation = \"per_session\"\n\
         forward_headers = { Host = \"X-Host\", Authorization = \"Cookie\", X-Trace = \"traceparent\" }\n\
         [mounts.proxied]\nurl = \"http://127.0.0.1:1/mcp\"\nisolation = \"per_session\"\n\
         forward_headers = [\"Proxy-Authorization\", \"Mcp-Method\", \"Accept-Encoding\"]\n\
         [mounts.bare]\nurl = \"http://127.0.0.1:1/mcp\"\nisolation = \"per_session\"\n\
         forward_headers = \"Authorization\"\n",
    );
    assert_reported(
        &found,
        &[
            "mounts.shared.forward_headers: only a `per_session` mount may forward",
            "mounts.local.forward_headers: only HTTP upstreams (`url`) take this field",
            "mounts.odd.forward_headers.0: \"Mcp-Session-Id\" is the gateway's own",
            "mounts.odd.forward_headers.1: \"bad header\" is not a valid HTTP header name",
            "mounts.odd.forward_headers.3: \"x-a\" is forwarded twice",
            "mounts.renamed.forward_headers.Host: \"Host\" is the gateway's own",
            "mounts.renamed.forward_headers.X-Trace: \"traceparent\" is the gateway's own",
            "mounts.proxied.forward_headers.0: \"Proxy-Authorization\" is the gateway's own",
            "mounts.proxied.forward_headers.1: \"Mcp-Method\" is the gateway's own",
            "mounts.proxied.forward_headers.2: \"Accept-Encoding\" is the gateway's own",
            "mounts.bare.forward_headers:",
        ],
    );
    assert!(
        found
            .iter()
            .any(|problem| problem.contains("a list of header names, or a table")),
        "{found:#?}"
    );
    assert_eq!(found.len(), 11, "{found:#?}");
}

#[test]
fn the_older_transport_has_a_path_of_its_own_or_none() {
    let sse_path = |text: &str| parse("junction.toml", text).unwrap().server.sse_path;
    assert_eq!(sse_path("").as_deref(), Some("/sse"), "served by default");
    assert_eq!(
        sse_path("[server]\nsse_path = \"/legacy\"\n").as_deref(),
        Some("/legacy")
    );
    assert_eq!(sse_path("[server]\nsse_path = \"\"\n"), None, "turned off");
    assert_eq!(
        sse_path("[server]\npath = \"/sse\"\n"),
        None,
        "an endpoint at /sse keeps it"
    );
    let found = problems(
        "junction.toml",
        "[server]\npath = \"/mcp\"\nsse_path = \"/mcp\"\n",
    );
    assert_reported(&found, &["server.sse_path: \"/mcp\" is server.path;"]);
    // Endpoints would be one route under both (`/mcp/NAME`).
    let found = problems(
        "junction.toml",
        "[server]\npath = \"/mcp/\"\nsse_path = \"/mcp\"\n",
    );
    assert_reported(
        &found,
        &["server.sse_path: \"/mcp\" is server.path but for a trailing `/`;"],
    );
    assert_eq!(
        sse_path("[server]\npath = \"/sse/\"\n"),
        None,
        "an endpoint at /sse/ keeps /sse"
    );
    let found = problems("junction.toml", "[server]\nsse_path = \"sse\"\n");
    assert_reported(&found, &["server.sse_path: \"sse\" must start with `/`"]);
    let found = problems("junction.toml", "[server]\nsse_path = \"/healthz\"\n");
    assert_reported(&found, &["server.sse_path: \"/healthz\" is reserved"]);
}

/// A byte order mark, which Windows editors write, is no problem in any
/// format (the JSON reader refused the file).
#[test]
fn a_file_with_a_byte_order_mark_loads() {
    for (name, text) in [
        (
            "junction.json",
            "\u{feff}{\"limits\": {\"max_sessions\": 5}}",
        ),
        ("junction.toml", "\u{feff}[limits]\nmax_sessions = 5\n"),
        ("junction.yaml", "\u{feff}limits:\n  max_sessions: 5\n"),
    ] {
        let config =
            load_file(name, text, &[]).unwrap_or_else(|problems| panic!("{name}: {problems:?}"));
        assert_eq!(config.limits.max_sessions, 5, "{name}");
    }
}

/// `./junction.toml` that is there but no file (a dangling symlink) is the
/// config: loading it says what is wrong, where the embedded default was
/// served unseen.
#[test]
fn a_local_config_that_is_no_file_is_still_the_config() {
    Jail::expect_with(|jail| {
        std::os::unix::fs::symlink(jail.directory().join("gone.toml"), "junction.toml")
            .expect("a dangling symlink");
        let source = ConfigSource::resolve(None);
        assert_eq!(source, ConfigSource::File("junction.toml".into()));
        assert!(load(&source).is_err());
        Ok(())
    });
}

/// Every problem at once: a bad global `timeouts.connect` does not hide a
/// mount's `request` past the ceiling (it was reported only once the
/// first was fixed).
#[test]
fn a_bad_global_timeout_hides_no_mounts_problem() {
    let found = problems(
        "junction.toml",
        "[timeouts]\nconnect = \"forever\"\n\n[mounts.a]\nurl = \"http://127.0.0.1:1/mcp\"\ntimeouts = { request = \"3h\" }\n",
    );
    assert!(
        found.iter().any(|p| p.starts_with("timeouts.connect:")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("mounts.a.timeouts.request: is longer than request_ceiling")),
        "{found:#?}"
    );
}

/// What a value should have been is said in the config's words, not the
/// names of the gateway's own types (`struct RawMount`, `untagged enum
/// RawSize`).
#[test]
fn a_wrong_kind_of_value_is_named_in_the_configs_words() {
    let found = problems(
        "junction.toml",
        "[limits]\nmax_body_size = true\n\n[mounts]\na = \"x\"\n",
    );
    let text = found.join("\n");
    assert!(!text.contains("Raw"), "{text}");
    assert!(text.contains("a size: a number of bytes"), "{text}");
    assert!(text.contains("a mount table"), "{text}");
}

#[test]
fn a_urls_user_and_password_become_the_mounts_authorization() {
    let config = parse(
        "junction.toml",
        r#"
        [mounts.modern]
        url = "http://sh%40red:pa%3Ass@h/mcp"
        [mounts.legacy]
        url = "https://user@h/sse"
        transport = "sse"
        "#,
    )
    .unwrap();
    let UpstreamTransport::StreamableHttp { url, headers } = &config.mounts[0].transport else {
        panic!("{:?}", config.mounts[0].transport);
    };
    assert_eq!(url.as_str(), "http://h/mcp");
    // base64 of "sh@red:pa:ss": decoded, as reqwest sent them.
    assert_eq!(headers["Authorization"], "Basic c2hAcmVkOnBhOnNz");
    let UpstreamTransport::Sse { url, headers } = &config.mounts[1].transport else {
        panic!("{:?}", config.mounts[1].transport);
    };
    assert_eq!(url.as_str(), "https://h/sse");
    assert_eq!(headers["Authorization"], "Basic dXNlcjo=");

    let found = problems(
        "junction.toml",
        r#"
        [mounts.both]
        url = "http://user:SECRET@h/mcp"
        headers = { authorization = "Bearer x" }
        "#,
    );
    assert_reported(
        &found,
        &["mounts.both.url: carries a user name and password while `headers` sets Authorization"],
    );
    assert!(
        !found.iter().any(|problem| problem.contains("SECRET")),
        "{found:?}"
    );
}

/// A host name where an IP address belongs (`localhost:8080`, as in many
/// other tools' flags) is refused with the addresses to write instead
/// (ops helper: it was only "not a socket address").
#[test]
fn a_listen_address_with_a_host_name_says_what_to_write() {
    let found = problems(
        "junction.toml",
        "[server]\nlisten = \"localhost:8080\"\n[admin]\nlisten = \"gateway.internal:9090\"\n",
    );
    assert_eq!(
        found,
        [
            "admin.listen: \"gateway.internal:9090\" names a host; write an IP address and a port: 127.0.0.1:9090 for this machine alone, 0.0.0.0:9090 for every interface",
            "server.listen: \"localhost:8080\" names a host; write an IP address and a port: 127.0.0.1:8080 for this machine alone, 0.0.0.0:8080 for every interface",
        ]
    );
    assert_eq!(
        crate::config::listen_address("[::1]:0", 8080).map(|address| address.port()),
        Ok(0)
    );
    // Review: these are no host names.
    assert_eq!(
        crate::config::listen_address("::1:8080", 8080),
        Err("\"::1:8080\": an IPv6 address takes brackets before its port: [::1]:8080".to_owned())
    );
    assert_eq!(
        crate::config::listen_address("300.1.1.1:80", 8080),
        Err("\"300.1.1.1:80\" is not a socket address like 127.0.0.1:8080".to_owned())
    );
}

/// `fit_tool_names` is off unless asked for, by the file or the
/// environment; `tool_name_max_chars` must leave a fitted name room for
/// its hash, and no more than the spec's 128, and a wrong one is reported
/// with the separator's problem, not after it.
#[test]
fn tool_names_are_fitted_only_when_asked_within_sane_lengths() {
    let plain = load_file("junction.toml", "", &[]).unwrap();
    assert_eq!(plain.server.naming().fit_tool_names_to, None);
    let fitted = load_file(
        "junction.toml",
        "[server]\nfit_tool_names = true\ntool_name_max_chars = 45\n",
        &[],
    )
    .unwrap();
    assert_eq!(fitted.server.naming().fit_tool_names_to, Some(45));
    let by_env = load_file(
        "junction.toml",
        "",
        &[("JUNCTION_SERVER__FIT_TOOL_NAMES", "true")],
    )
    .unwrap();
    assert_eq!(by_env.server.naming().fit_tool_names_to, Some(64));
    for (limit, problem) in [
        ("15", "server.tool_name_max_chars: 15 is not between 16 and 128 (the spec's longest tool name)"),
        ("129", "server.tool_name_max_chars: 129 is not between 16 and 128 (the spec's longest tool name)"),
    ] {
        let found = problems(
            "junction.toml",
            &format!("[server]\nseparator = \"x\"\ntool_name_max_chars = {limit}\n"),
        );
        assert_reported(&found, &[problem, "server.separator:"]);
    }
    let found = problems("junction.toml", "[server]\nfit_tool_names = \"yes\"\n");
    assert_reported(&found, &["server.fit_tool_names:"]);
}

/// A count that is not one is told so in words, not as Rust's integer
/// types (`expected usize`), and a whole number written as a float (YAML
/// reads `1e3` so) is that count; a number that is not finite is
/// reported, wherever it is.
#[test]
fn counts_are_told_wrong_in_words_and_whole_floats_count() {
    for (written, problem) in [
        (
            "[limits]\nmax_sessions = \"many\"\n",
            "limits.max_sessions: invalid type: text, expected a whole number",
        ),
        (
            "[limits]\nmax_sessions = -1\n",
            "limits.max_sessions: -1 is below 0",
        ),
        (
            "[supervision]\ncrash_loop_restarts = 2.5\n",
            "supervision.crash_loop_restarts: 2.5 is not a whole number",
        ),
        (
            "[server]\ntool_name_max_chars = \"wide\"\n",
            "server.tool_name_max_chars: invalid type: text, expected a whole number",
        ),
        (
            "[mounts.a]\ncommand = \"x\"\nmax_upstream_sessions = -3\n",
            "mounts.a.max_upstream_sessions: -3 is below 0",
        ),
    ] {
        let found = problems("junction.toml", written);
        assert_eq!(found, [problem.to_owned()], "{written}");
    }
    let yaml = load_file("junction.yaml", "limits:\n  max_sessions: 1e3\n", &[]).unwrap();
    assert_eq!(yaml.limits.max_sessions, 1000);
    // YAML's `.inf` and `.nan` were `null` once in JSON: unset, silently.
    let found = load_file(
        "junction.yaml",
        "limits:\n  max_sessions: .inf\nsupervision:\n  crash_loop_restarts: .nan\n",
        &[],
    )
    .expect_err("not finite");
    assert_reported(
        &found,
        &[
            "limits.max_sessions: inf is not a finite number",
            "supervision.crash_loop_restarts: NaN is not a finite number",
        ],
    );
    // An override is never such a number: figment reads `inf` as text.
    let text = load_file(
        "junction.toml",
        "[mounts.a]\ncommand = \"x\"\n",
        &[("JUNCTION_MOUNTS__A__ENV__LIMIT", "inf")],
    )
    .unwrap();
    let UpstreamTransport::Stdio { env, .. } = &text.mounts[0].transport else {
        panic!("a stdio mount");
    };
    assert_eq!(env["LIMIT"], "inf");
}
