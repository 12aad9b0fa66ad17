//! Unit tests of the translation: client JSON in, TOML and issues out. Each
//! test goes through [`translate`], the one entry point, and checks that
//! the TOML parses and holds what it should.

use serde_json::json;

use super::{mount_name::sanitize, translate, vars::env_name, Severity, Translation};

fn import(source: serde_json::Value) -> Translation {
    translate(&source.to_string(), "test.json").expect("valid input")
}

/// The output TOML parsed back, so tests compare values, not layout.
fn parsed(translation: &Translation) -> toml::Value {
    toml::from_str(&translation.toml)
        .unwrap_or_else(|error| panic!("output is not TOML: {error}\n{}", translation.toml))
}

/// Every issue as `path: label: message`, one per line.
fn report(translation: &Translation) -> String {
    translation
        .issues
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// A stdio mount's `args`, as text.
fn args_of(mount: &toml::Value) -> Vec<&str> {
    mount["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|arg| arg.as_str())
        .collect()
}

/// None of `secrets` shows in the TOML or the `report`.
fn assert_nowhere(translation: &Translation, report: &str, secrets: &[&str]) {
    let everything = format!("{}\n{report}", translation.toml);
    for secret in secrets {
        assert!(
            !everything.contains(secret),
            "{secret} shows in\n{everything}"
        );
    }
}

fn lost(translation: &Translation) -> usize {
    translation
        .issues
        .iter()
        .filter(|issue| issue.severity == Severity::Lost)
        .count()
}

#[test]
fn claude_desktop_stdio_servers_translate_fully() {
    let translation = import(json!({
        "mcpServers": {
            "filesystem": {
                "command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"]
            },
            "github": {
                "command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-github"],
                "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_example"}
            }
        },
        "globalShortcut": "Ctrl+Space"
    }));
    // All translated, but the token, written as is, is not copied: it
    // comes from the environment, which the report says to set.
    let report = report(&translation);
    assert_eq!(translation.issues.len(), 1, "{report}");
    assert!(
        report.contains("mcpServers.github.env.GITHUB_PERSONAL_ACCESS_TOKEN")
            && report.contains("set GITHUB_PERSONAL_ACCESS_TOKEN"),
        "{report}"
    );
    assert!(!report.contains("ghp_example") && !translation.toml.contains("ghp_example"));
    let config = parsed(&translation);
    let github = &config["mounts"]["github"];
    assert_eq!(github["command"].as_str(), Some("npx"));
    assert_eq!(
        github["env"]["GITHUB_PERSONAL_ACCESS_TOKEN"].as_str(),
        Some("${GITHUB_PERSONAL_ACCESS_TOKEN}")
    );
    assert_eq!(github["isolation"].as_str(), Some("shared"));
    assert_eq!(
        config["mounts"]["filesystem"]["args"][2].as_str(),
        Some("/Users/me/Desktop")
    );
    // Source order is kept.
    let filesystem_at = translation.toml.find("[mounts.filesystem]").unwrap();
    let github_at = translation.toml.find("[mounts.github]").unwrap();
    assert!(filesystem_at < github_at);
}

#[test]
fn claude_code_http_and_sse() {
    let translation = import(json!({
        "mcpServers": {
            "api": {
                "type": "http",
                "url": "https://api.example.com/mcp",
                "headers": {"Authorization": "Bearer ${API_TOKEN}"}
            },
            "old": {"type": "sse", "url": "https://old.example.com/sse"},
            "local": {"type": "stdio", "command": "./server", "env": {"KEY": "${KEY:-dev}"}}
        }
    }));
    let config = parsed(&translation);
    let api = &config["mounts"]["api"];
    assert_eq!(api["url"].as_str(), Some("https://api.example.com/mcp"));
    assert_eq!(
        api["headers"]["Authorization"].as_str(),
        Some("Bearer ${API_TOKEN}")
    );
    assert_eq!(
        config["mounts"]["old"]["url"].as_str(),
        Some("https://old.example.com/sse")
    );
    assert_eq!(config["mounts"]["old"]["transport"].as_str(), Some("sse"));
    assert!(
        api.get("transport").is_none(),
        "Streamable HTTP is the default"
    );
    assert_eq!(
        config["mounts"]["local"]["env"]["KEY"].as_str(),
        Some("${KEY}")
    );
    let report = report(&translation);
    assert!(
        report.contains("mcpServers.local.env.KEY: not translated: ${KEY:-…}")
            && !report.contains("dev"),
        "{report}"
    );
    assert_eq!((translation.imported, translation.skipped), (3, 0));
    assert_eq!(lost(&translation), 1);
}

#[test]
fn cursor_url_without_type_is_streamable_http() {
    let translation = import(json!({
        "mcpServers": {
            "remote": {"url": "http://localhost:3000/mcp"},
            "legacy": {"url": "http://localhost:3001/sse"},
            "home": {"command": "${userHome}/bin/server", "env": {"TOKEN": "${env:MY_TOKEN}"}}
        }
    }));
    let config = parsed(&translation);
    assert_eq!(
        config["mounts"]["remote"]["url"].as_str(),
        Some("http://localhost:3000/mcp")
    );
    assert_eq!(
        config["mounts"]["home"]["command"].as_str(),
        Some("${HOME}/bin/server")
    );
    assert_eq!(
        config["mounts"]["home"]["env"]["TOKEN"].as_str(),
        Some("${MY_TOKEN}")
    );
    // Cursor's files name no transport: a /sse URL is taken as the older
    // one, with a note; any other as Streamable HTTP.
    assert!(translation.is_complete(), "{}", report(&translation));
    assert!(report(&translation).contains("mcpServers.legacy.url: note: ends in /sse"));
    assert_eq!(
        config["mounts"]["legacy"]["transport"].as_str(),
        Some("sse")
    );
    assert!(config["mounts"]["remote"].get("transport").is_none());
}

#[test]
fn vscode_inputs_env_file_and_sse() {
    let source = r#"{
        // VS Code allows comments
        "inputs": [
            {"type": "promptString", "id": "github-token", "description": "GitHub token", "password": true}
        ],
        "servers": {
            "GitHub": {
                "type": "stdio",
                "command": "docker",
                "args": ["run", "-i", "--rm", "ghcr.io/github/github-mcp-server"],
                "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${input:github-token}"},
                "envFile": "${workspaceFolder}/.env",
            },
            "fetch": {"type": "http", "url": "https://fetch.example.com/mcp", "headers": {"X-Key": "${input:fetch-key}"}},
            "events": {"type": "sse", "url": "https://events.example.com/sse"},
            "tools": {"command": "node", "args": ["${workspaceFolder}/server.js"], "dev": {"watch": "src/**"}},
        },
    }"#;
    let translation = translate(source, "mcp.json").expect("valid input");
    let config = parsed(&translation);
    let github = &config["mounts"]["github"];
    assert_eq!(
        github["env"]["GITHUB_PERSONAL_ACCESS_TOKEN"].as_str(),
        Some("${GITHUB_TOKEN}")
    );
    assert!(github.get("envFile").is_none());
    assert_eq!(
        config["mounts"]["fetch"]["headers"]["X-Key"].as_str(),
        Some("${FETCH_KEY}")
    );
    assert_eq!(
        config["mounts"]["tools"]["args"][0].as_str(),
        Some("${WORKSPACE_FOLDER}/server.js")
    );
    assert_eq!(
        config["mounts"]["events"]["transport"].as_str(),
        Some("sse")
    );
    let report = report(&translation);
    for expected in [
        "servers.GitHub: note: renamed to mount \"github\"",
        "servers.GitHub.env.GITHUB_PERSONAL_ACCESS_TOKEN: not translated: ${input:github-token} (VS Code prompts for secret \"GitHub token\") became ${GITHUB_TOKEN}",
        "servers.GitHub.envFile: not translated: Junction does not read env files",
        "servers.fetch.headers.X-Key: not translated: ${input:fetch-key} (an input not defined under \"inputs\") became ${FETCH_KEY}",
        "servers.tools.args.0: not translated: ${workspaceFolder} is an editor variable",
        "servers.tools.dev: not translated: has no Junction equivalent",
    ] {
        assert!(report.contains(expected), "missing {expected:?} in\n{report}");
    }
    assert!(translation
        .toml
        .contains("# \"GitHub\" in the source\n[mounts.github]"));
    assert!(translation.toml.contains("VS Code"));
}

#[test]
fn vscode_settings_shape_is_read() {
    let translation = import(json!({
        "editor.fontSize": 14,
        "mcp": {
            "inputs": [{"type": "promptString", "id": "tz", "description": "Time zone", "password": true}],
            "servers": {"time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "${input:tz}"}}}
        }
    }));
    assert_eq!(
        parsed(&translation)["mounts"]["time"]["command"].as_str(),
        Some("uvx")
    );
    // Its inputs are read where settings.json keeps them, under `mcp`.
    let report = report(&translation);
    assert!(
        report.contains("(VS Code prompts for secret \"Time zone\")"),
        "{report}"
    );
}

#[test]
fn disabled_servers_are_commented_out() {
    let translation = import(json!({
        "mcpServers": {"off": {"command": "x", "disabled": true}}
    }));
    assert!(translation.is_complete());
    assert!(parsed(&translation).get("mounts").is_none());
    assert!(
        translation
            .toml
            .contains("# [mounts.off]\n# command = \"x\""),
        "{}",
        translation.toml
    );
}

#[test]
fn broken_entries_are_skipped_and_reported() {
    let translation = import(json!({
        "mcpServers": {
            "nothing": {},
            "list": ["x"],
            "bad-args": {"command": "x", "args": [{"a": 1}]},
            "ftp": {"url": "ftp://example.com/mcp"},
            "noscheme": {"url": "localhost:3000/mcp"},
            "fine": {"command": "x", "args": [1, true], "env": {"N": 5, "O": {"x": 1}}}
        }
    }));
    let report = report(&translation);
    for expected in [
        "mcpServers.nothing: not translated: not imported: has neither `command`",
        "mcpServers.list: not translated: not imported: expected an object",
        "mcpServers.bad-args: not translated: not imported: args.0 must be a string",
        "mcpServers.ftp: not translated: not imported: url \"ftp://example.com/mcp\" has scheme \"ftp\"",
        "mcpServers.noscheme: not translated: not imported:",
        "mcpServers.fine.env.O: not translated: expected a string, found an object; dropped",
    ] {
        assert!(report.contains(expected), "missing {expected:?} in\n{report}");
    }
    let config = parsed(&translation);
    let fine = &config["mounts"]["fine"];
    assert_eq!(fine["args"][0].as_str(), Some("1"));
    assert_eq!(fine["args"][1].as_str(), Some("true"));
    assert_eq!(fine["env"]["N"].as_str(), Some("5"));
    assert_eq!((translation.imported, translation.skipped), (1, 5));
}

#[test]
fn odd_strings_round_trip() {
    let awkward = "quote \" backslash \\ tab \t newline \n cr \r ctl \u{1}\u{7f}\u{85} é ✓ \u{2028} 'single' '''";
    let translation = import(json!({
        "mcpServers": {"s": {"command": awkward, "env": {"WEIRD NAME": awkward, "a.b": "x"}}}
    }));
    let config = parsed(&translation);
    assert_eq!(config["mounts"]["s"]["command"].as_str(), Some(awkward));
    assert_eq!(
        config["mounts"]["s"]["env"]["WEIRD NAME"].as_str(),
        Some(awkward)
    );
    assert_eq!(config["mounts"]["s"]["env"]["a.b"].as_str(), Some("x"));
}

#[test]
fn dollars_that_are_not_references_stay_literal() {
    let translation = import(json!({
        "mcpServers": {"s": {"command": "x", "args": ["$HOME", "cost: 5$", "${unclosed", "${a b}"]}}
    }));
    let config = parsed(&translation);
    let args = &config["mounts"]["s"]["args"];
    assert_eq!(args[0].as_str(), Some("$HOME"));
    assert_eq!(args[1].as_str(), Some("cost: 5$"));
    // `$${` is Junction's literal `${`.
    assert_eq!(args[2].as_str(), Some("$${unclosed"));
    assert_eq!(args[3].as_str(), Some("$${a b}"));
    assert!(report(&translation).contains("${a b} has no Junction equivalent"));
}

/// What Junction's config would refuse is reported (and set aside), not
/// written out with exit 0 for `junction check` to refuse next: a
/// variable name starting with a digit, a header value with a newline.
#[test]
fn what_the_config_refuses_is_reported_not_written() {
    let translation = import(json!({
        "mcpServers": {
            "vault": {"command": "x", "args": ["${1PASSWORD_TOKEN}", "${env:2FA}"]},
            "web": {"url": "https://h/mcp", "headers": {"X-Note": "abc\ndef", "X-Ok": "fine"}}
        }
    }));
    assert_eq!(lost(&translation), 3, "{}", report(&translation));
    let report = report(&translation);
    assert!(
        report.contains(
            "mcpServers.web.headers.X-Note: not translated: value is not a valid HTTP header value; dropped"
        ),
        "{report}"
    );
    assert!(!report.contains("abc"), "the value is echoed: {report}");
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("junction.toml");
    std::fs::write(&path, &translation.toml).expect("write the config");
    let config = crate::config::load(&crate::config::ConfigSource::File(path))
        .unwrap_or_else(|error| panic!("{error}\n{}", translation.toml));
    let crate::config::UpstreamTransport::StreamableHttp { headers, .. } =
        &config.mounts[1].transport
    else {
        panic!("an HTTP mount");
    };
    assert_eq!(headers.keys().collect::<Vec<_>>(), ["X-Ok"]);
}

#[test]
fn invalid_files_are_rejected_whole() {
    for (text, expected) in [
        ("{", "not valid JSON"),
        ("[]", "expected a JSON object at the top level"),
        ("{\"other\": 1}", "no servers found"),
        (
            "{\"mcpServers\": []}",
            "mcpServers: expected an object of servers by name, found an array",
        ),
    ] {
        let error = translate(text, "x.json").expect_err(text);
        assert!(error.0.contains(expected), "{text}: {error}");
    }
}

#[test]
fn empty_server_list_is_a_valid_empty_config() {
    let translation = import(json!({"mcpServers": {}}));
    assert!(translation.is_complete());
    assert!(parsed(&translation).get("mounts").is_none());
}

#[test]
fn mount_names_are_sanitized_and_unique() {
    let check = |key: &str, taken: &[&str], expect: &str| {
        let taken: Vec<String> = taken.iter().map(|name| name.to_string()).collect();
        assert_eq!(sanitize(key, &taken), expect, "key {key:?}");
    };
    check("github", &[], "github");
    check("GitHub Tools", &[], "github-tools");
    check("brave_search", &[], "brave-search");
    check("@scope/server.name", &[], "scope-server-name");
    check("1password", &[], "mcp-1password");
    check("___", &[], "server");
    check("ünïcode", &[], "n-code");
    check(&"x".repeat(40), &[], &"x".repeat(32));
    check("a_b", &["a-b"], "a-b-2");
    check("a_b", &["a-b", "a-b-2"], "a-b-3");
    check(
        &"y".repeat(40),
        &[&"y".repeat(32)],
        &format!("{}-2", "y".repeat(30)),
    );
}

/// Two keys that sanitize to one name: the key that is that name already
/// keeps it (its tools stay `my-server__…`), wherever it is in the file;
/// the other takes a suffix.
#[test]
fn duplicate_sanitized_names_get_suffixes() {
    for servers in [
        json!({"my_server": {"command": "a"}, "my-server": {"command": "b"}}),
        json!({"my-server": {"command": "b"}, "my_server": {"command": "a"}}),
    ] {
        let translation = import(json!({ "mcpServers": servers }));
        let config = parsed(&translation);
        assert_eq!(config["mounts"]["my-server"]["command"].as_str(), Some("b"));
        assert_eq!(
            config["mounts"]["my-server-2"]["command"].as_str(),
            Some("a")
        );
    }
    let translation = import(json!({
        "mcpServers": {"a_b": {"command": "x"}, "a-b": {"command": "y"}, "a.b": {"command": "z"}}
    }));
    let config = parsed(&translation);
    assert_eq!(config["mounts"]["a-b"]["command"].as_str(), Some("y"));
    assert_eq!(config["mounts"]["a-b-2"]["command"].as_str(), Some("x"));
    assert_eq!(config["mounts"]["a-b-3"]["command"].as_str(), Some("z"));
}

#[test]
fn env_names_for_inputs() {
    assert_eq!(env_name("github-token"), "GITHUB_TOKEN");
    assert_eq!(env_name("apiKey"), "API_KEY");
    assert_eq!(env_name("workspaceFolder"), "WORKSPACE_FOLDER");
    assert_eq!(env_name("2fa"), "INPUT_2FA");
    assert_eq!(env_name("--"), "INPUT");
}

#[test]
fn newlines_in_keys_cannot_break_out_of_comments() {
    let translation = import(json!({
        "mcpServers": {
            "a\n[mounts.evil]\ncommand = \"x\"": {"type": "websocket", "url": "ws://h/mcp"},
            "b\nc": {"command": "y"}
        }
    }));
    let config = parsed(&translation);
    let mounts = config["mounts"].as_table().expect("mounts table");
    assert_eq!(mounts.keys().collect::<Vec<_>>(), ["b-c"]);
}

#[test]
fn a_secret_written_in_a_url_is_not_copied() {
    let translation = import(json!({
        "mcpServers": {
            "r2": {"url": "https://al%40ice:S3CRET%3A1@example.com/mcp?api_key=SECRETKEY&region=eu"},
            "kept": {"url": "https://bob:${PW}@example.com/mcp?token=${T}"},
            "ws": {"url": "ws://user:SECRETWS@example.com/mcp"},
            "bad": {"url": "http://user:SECRETBAD@exa mple.com/mcp"}
        }
    }));
    let config = parsed(&translation);
    assert_eq!(
        config["mounts"]["r2"]["url"].as_str(),
        Some("https://al%40ice:${R2_URL_PASSWORD}@example.com/mcp?api_key=${R2_API_KEY}&region=eu")
    );
    assert_eq!(
        config["mounts"]["kept"]["url"].as_str(),
        Some("https://bob:${PW}@example.com/mcp?token=${T}")
    );
    let report = report(&translation);
    assert!(
        report.contains("mcpServers.r2.url: not translated: a secret written in the URL was not copied into the config; set R2_URL_PASSWORD, R2_API_KEY"),
        "{report}"
    );
    assert_nowhere(
        &translation,
        &report,
        &["S3CRET", "SECRETKEY", "SECRETWS", "SECRETBAD"],
    );
}

#[test]
fn two_secrets_never_share_a_variable() {
    let translation = import(json!({
        "mcpServers": {
            "dup": {"url": "https://example.com/mcp?apiKey=aaa&api_key=bbb"},
            "both": {"url": "https://example.com/mcp?api_key=ccc", "headers": {"Api-Key": "ddd"}},
            "my.dotted": {"url": "https://u:p1@example.com/mcp"},
            "other.dotted": {"url": "https://u:p2@example.com/mcp"},
            "token": {"url": "https://ghp_SECRETa1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6@example.com/mcp"},
            "named": {"url": "https://contoso@dev.azure.com/contoso"}
        }
    }));
    let config = parsed(&translation);
    let mounts = &config["mounts"];
    assert_eq!(
        mounts["dup"]["url"].as_str(),
        Some("https://example.com/mcp?apiKey=${DUP_API_KEY}&api_key=${DUP_API_KEY_2}")
    );
    assert_eq!(
        mounts["both"]["url"].as_str(),
        Some("https://example.com/mcp?api_key=${BOTH_API_KEY}")
    );
    assert_eq!(
        mounts["both"]["headers"]["Api-Key"].as_str(),
        Some("${BOTH_API_KEY_2}")
    );
    assert_eq!(
        mounts["my-dotted"]["url"].as_str(),
        Some("https://u:${MY_DOTTED_URL_PASSWORD}@example.com/mcp")
    );
    assert_eq!(
        mounts["other-dotted"]["url"].as_str(),
        Some("https://u:${OTHER_DOTTED_URL_PASSWORD}@example.com/mcp")
    );
    assert_eq!(
        mounts["token"]["url"].as_str(),
        Some("https://${TOKEN_URL_USER}@example.com/mcp")
    );
    // A user that is a name stays (black-box helper: the Azure DevOps
    // form).
    assert_eq!(
        mounts["named"]["url"].as_str(),
        Some("https://contoso@dev.azure.com/contoso")
    );
    assert!(
        !translation.toml.contains("ghp_SECRET"),
        "{}",
        translation.toml
    );
}

/// A URL with a password in `env` under a name that says nothing of
/// secrets (`DATABASE_URL`) keeps the password out, as the same URL as
/// an argument did (black-box helper: it was copied as written).
#[test]
fn a_password_in_a_url_in_env_is_not_copied() {
    let translation = import(json!({
        "mcpServers": {
            "db": {
                "command": "server-postgres",
                "env": {
                    "DATABASE_URL": "postgres://app:ENVPW1@db/prod",
                    "PLAIN_URL": "https://example.com/mcp",
                }
            }
        }
    }));
    let config = parsed(&translation);
    let env = &config["mounts"]["db"]["env"];
    assert_eq!(
        env["DATABASE_URL"].as_str(),
        Some("postgres://app:${DATABASE_URL_PASSWORD}@db/prod")
    );
    assert_eq!(env["PLAIN_URL"].as_str(), Some("https://example.com/mcp"));
    let report = report(&translation);
    assert!(
        report.contains("mcpServers.db.env.DATABASE_URL: ")
            && report.contains("DATABASE_URL_PASSWORD"),
        "{report}"
    );
    assert_nowhere(&translation, &report, &["ENVPW1"]);
}

/// Tokens passed as arguments (black-box helper: `--api-key argkey`,
/// `--token=…`, which `check` already masked, were copied as written)
/// are moved to the environment as those in `env` are; a `${VAR}` and
/// the other arguments stay.
#[test]
fn a_secret_written_in_the_arguments_is_not_copied() {
    let translation = import(json!({
        "mcpServers": {
            "gh": {
                "command": "npx",
                "args": [
                    "-y", "server-github",
                    "--api-key", "ARGKEY1",
                    "--token=ARGTOK2",
                    "--header", "Authorization: Bearer ARGBEARER3",
                    "-e", "GITHUB_TOKEN=ARGENV4",
                    "postgresql://app:ARGPW5@db/prod",
                    "--password=${DB_PASSWORD}",
                    "--port", "8080"
                ]
            }
        }
    }));
    let config = parsed(&translation);
    let args = args_of(&config["mounts"]["gh"]);
    assert_eq!(
        args,
        [
            "-y",
            "server-github",
            "--api-key",
            "${GH_API_KEY}",
            "--token=${GH_TOKEN}",
            "--header",
            "Authorization: ${GH_AUTHORIZATION}",
            "-e",
            "GITHUB_TOKEN=${GH_GITHUB_TOKEN}",
            "postgresql://app:${GH_URL_PASSWORD}@db/prod",
            "--password=${DB_PASSWORD}",
            "--port",
            "8080",
        ]
    );
    let report = report(&translation);
    for (index, variable) in [
        (3, "GH_API_KEY"),
        (4, "GH_TOKEN"),
        (6, "GH_AUTHORIZATION"),
        (8, "GH_GITHUB_TOKEN"),
        (9, "GH_URL_PASSWORD"),
    ] {
        let at = format!("mcpServers.gh.args.{index}: ");
        let told = report
            .lines()
            .any(|line| line.starts_with(&at) && line.contains(variable));
        assert!(told, "{variable} at {at}\n{report}");
    }
    assert_nowhere(
        &translation,
        &report,
        &["ARGKEY1", "ARGTOK2", "ARGBEARER3", "ARGENV4", "ARGPW5"],
    );
}

/// An argument's secret never shares a variable with an `env` one (review:
/// server `github`'s `--token` and its `GITHUB_TOKEN` were both
/// `${GITHUB_TOKEN}`); a connection string's user and the argument after
/// `--no-auth` are no secrets.
#[test]
fn argument_secrets_get_their_own_variables_and_non_secrets_stay() {
    let translation = import(json!({
        "mcpServers": {
            "github": {
                "command": "npx",
                "args": ["--token", "ghp_ARG", "--no-auth", "/data",
                         "postgresql://postgres@localhost/db"],
                "env": {"GITHUB_TOKEN": "ghp_ENV"}
            }
        }
    }));
    let config = parsed(&translation);
    let github = &config["mounts"]["github"];
    assert_eq!(
        github["env"]["GITHUB_TOKEN"].as_str(),
        Some("${GITHUB_TOKEN}")
    );
    let args = args_of(github);
    assert_eq!(
        args,
        [
            "--token",
            "${GITHUB_TOKEN_2}",
            "--no-auth",
            "/data",
            "postgresql://postgres@localhost/db"
        ]
    );
}

/// Across servers too: an argument's secret of one server never takes the
/// variable another server's `env` secret keeps its name for (review).
#[test]
fn an_argument_secret_steps_around_a_later_servers_env_name() {
    let translation = import(json!({
        "mcpServers": {
            "github": {"command": "x", "args": ["--token", "ghp_A"]},
            "other": {"command": "y", "env": {"GITHUB_TOKEN": "ghp_B"}}
        }
    }));
    let config = parsed(&translation);
    let mounts = &config["mounts"];
    assert_eq!(
        mounts["github"]["args"][1].as_str(),
        Some("${GITHUB_TOKEN_2}")
    );
    assert_eq!(
        mounts["other"]["env"]["GITHUB_TOKEN"].as_str(),
        Some("${GITHUB_TOKEN}")
    );
}

/// Secrets the first cut copied as written (security helper): the values
/// of `--bearer`, `--jwt` and `--pass`; a provider's token or a connection
/// string's password under a name that says nothing of secrets; the query
/// parameters `sig`, `jwt` and `X-Amz-Signature`. A URL's password and an
/// `env` key of the same name never share a variable.
#[test]
fn secrets_known_by_their_flag_shape_or_query_name_are_not_copied() {
    let translation = import(json!({
        "mcpServers": {
            "tool": {
                "command": "x",
                "args": ["--bearer", "BEARER1", "--jwt=JWT2", "--pass", "PASS3",
                         "--model", "sk-ant-api03-SHAPE4AAAAAAAAAAAA", "--port", "8080"],
                "env": {
                    "MODEL_CONFIG": "xoxb-1234567890-SHAPE5BBBBBB",
                    "DB": "Server=db;User Id=sa;Password=CONN6;",
                    "DATABASE_URL": "postgres://app:URLPW7@db/prod",
                    "DATABASE_URL_PASSWORD": "ENVPW8",
                    "REGION": "eu-west-1"
                }
            },
            "remote": {
                "url": "https://h/mcp?sig=SIG9&jwt=JWT10&X-Amz-Signature=AMZ11&region=eu&access=ghp_SHAPE12a1B2c3D4e5F6g7H8i9J0k1L2m3"
            }
        }
    }));
    let config = parsed(&translation);
    let tool = &config["mounts"]["tool"];
    assert_eq!(
        args_of(tool),
        [
            "--bearer",
            "${TOOL_BEARER}",
            "--jwt=${TOOL_JWT}",
            "--pass",
            "${TOOL_PASS}",
            "--model",
            "${TOOL_MODEL}",
            "--port",
            "8080"
        ]
    );
    let env = &tool["env"];
    assert_eq!(env["MODEL_CONFIG"].as_str(), Some("${MODEL_CONFIG}"));
    assert_eq!(env["DB"].as_str(), Some("${DB}"));
    assert_eq!(env["REGION"].as_str(), Some("eu-west-1"));
    assert_eq!(
        env["DATABASE_URL_PASSWORD"].as_str(),
        Some("${DATABASE_URL_PASSWORD}")
    );
    assert_eq!(
        env["DATABASE_URL"].as_str(),
        Some("postgres://app:${DATABASE_URL_PASSWORD_2}@db/prod")
    );
    let url = config["mounts"]["remote"]["url"].as_str().unwrap();
    assert_eq!(
        url,
        "https://h/mcp?sig=${REMOTE_SIG}&jwt=${REMOTE_JWT}&X-Amz-Signature=${REMOTE_X_AMZ_SIGNATURE}&region=eu&access=${REMOTE_ACCESS}"
    );
    let report = report(&translation);
    assert_nowhere(
        &translation,
        &report,
        &[
            "BEARER1", "JWT2", "PASS3", "SHAPE4", "SHAPE5", "CONN6", "URLPW7", "ENVPW8", "SIG9",
            "JWT10", "AMZ11", "SHAPE12",
        ],
    );
}

/// What only looks like a secret's name or a token's beginning is copied
/// as written (review: each of these was made a variable).
#[test]
fn names_and_values_that_only_resemble_secrets_are_copied() {
    let translation = import(json!({
        "mcpServers": {
            "fetch": {
                "command": "mcp-proxy",
                "args": ["--pass-environment", "uvx", "mcp-server-fetch"],
                "env": {
                    "JWT_ISSUER": "https://issuer.example.com",
                    "JWT_ALGORITHM": "RS256",
                    "HF_HOME": "hf_cache_directory_for_models"
                }
            },
            "pypi": {"command": "uvx", "args": ["pypi-query-mcp-server"]},
            "script": {"command": "bash", "args": ["-c", "cd /srv; AUTH_MODE=oauth node index.js"]}
        }
    }));
    let config = parsed(&translation);
    let mounts = &config["mounts"];
    assert_eq!(
        args_of(&mounts["fetch"]),
        ["--pass-environment", "uvx", "mcp-server-fetch"]
    );
    let env = &mounts["fetch"]["env"];
    assert_eq!(
        env["JWT_ISSUER"].as_str(),
        Some("https://issuer.example.com")
    );
    assert_eq!(env["JWT_ALGORITHM"].as_str(), Some("RS256"));
    assert_eq!(
        env["HF_HOME"].as_str(),
        Some("hf_cache_directory_for_models")
    );
    assert_eq!(args_of(&mounts["pypi"]), ["pypi-query-mcp-server"]);
    assert_eq!(
        args_of(&mounts["script"]),
        ["-c", "cd /srv; AUTH_MODE=oauth node index.js"]
    );
    assert_eq!(lost(&translation), 0, "{}", report(&translation));
}

/// What a black-box pass over real servers' configs found (each case is
/// one it reported): a secret in a script is moved without the rest of
/// the script; `a:b` words that are no headers stay; password names the
/// words missed, JSON settings holding a token, and a password holding
/// `${` are moved; two servers' different `API_KEY`s get two variables;
/// names that say where a secret is or how it is used, and paths, stay.
#[test]
fn real_configs_keep_their_commands_and_lose_their_secrets() {
    let translation = import(json!({
        "mcpServers": {
            "gh": {"command": "bash", "args": ["-c",
                "GITHUB_PERSONAL_ACCESS_TOKEN=ghp_SCRIPT1a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P npx -y @modelcontextprotocol/server-github"]},
            "gh2": {"command": "sh", "args": ["-c",
                "export GITHUB_TOKEN=\"ghp_SCRIPT2a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P\" && exec github-mcp-server stdio"]},
            "vol": {"command": "docker", "args": ["run", "-v", "mcp-auth:/root/.mcp-auth",
                "-v", "gcloud-credentials:/root/.config/gcloud", "keycloak-auth:latest",
                "--auth-timeout", "60", "--auth-method", "oidc", "--token-ttl", "1h",
                "--key=/Users/me/.ssh/id_ed25519", "--config", "{\"braveApiKey\":\"BSAJSON3xYz\"}"]},
            "db": {"command": "x", "env": {
                "PGPASSWORD": "PGPW4", "MYSQL_PASS": "MYPW5", "SMTP_PASS": "SMTP6", "EMAIL_PWD": "EPW7",
                "DB_PASSWORD": "q7${KpDOLLAR8",
                "API_KEY": "KEYONE9",
                "OPENAPI_MCP_HEADERS": "{\"Authorization\": \"Bearer ntn_JSON10\", \"Notion-Version\": \"2022-06-28\"}",
                "MONGODB_URI": "mongodb+srv://cluster.example.net/db?authSource=admin&authMechanism=SCRAM-SHA-256",
                "GOOGLE_APPLICATION_CREDENTIALS": "/Users/me/keys/sa.json",
                "SSH_KEY_PATH": "~/.ssh/id_rsa", "PASSWORD_STORE_DIR": "~/.password-store",
                "SSH_AUTH_SOCK": "/run/ssh.sock", "AZURE_AUTH_METHOD": "interactive",
                "KEY_VAULT_NAME": "contoso-kv", "REDIS_KEY_PREFIX": "mcp:cache:",
                "TOKEN_ENDPOINT": "https://login.example.com/token"
            }},
            "other": {"command": "y", "env": {"API_KEY": "KEYTWO11"}},
            "cmd": {"command": "GITHUB_TOKEN=ghp_COMMAND12a1B2c3D4e5F6g7H8i9J0k1L2m3N4 npx", "args": ["-y", "server"]},
            "zap": {"url": "https://actions.zapier.com/mcp/sk-ak-PATH13a1B2c3D4e5F6/sse"}
        }
    }));
    let config = parsed(&translation);
    let mounts = &config["mounts"];
    assert_eq!(
        args_of(&mounts["gh"]),
        ["-c", "GITHUB_PERSONAL_ACCESS_TOKEN=${GH_GITHUB_PERSONAL_ACCESS_TOKEN} npx -y @modelcontextprotocol/server-github"]
    );
    assert_eq!(
        args_of(&mounts["gh2"]),
        [
            "-c",
            "export GITHUB_TOKEN=\"${GH2_GITHUB_TOKEN}\" && exec github-mcp-server stdio"
        ]
    );
    let vol = args_of(&mounts["vol"]);
    assert_eq!(
        &vol[..13],
        [
            "run",
            "-v",
            "mcp-auth:/root/.mcp-auth",
            "-v",
            "gcloud-credentials:/root/.config/gcloud",
            "keycloak-auth:latest",
            "--auth-timeout",
            "60",
            "--auth-method",
            "oidc",
            "--token-ttl",
            "1h",
            "--key=/Users/me/.ssh/id_ed25519"
        ]
    );
    assert_eq!(vol[14], "${VOL_CONFIG}");
    let env = &mounts["db"]["env"];
    for (name, value) in [
        ("PGPASSWORD", "${PGPASSWORD}"),
        ("MYSQL_PASS", "${MYSQL_PASS}"),
        ("SMTP_PASS", "${SMTP_PASS}"),
        ("EMAIL_PWD", "${EMAIL_PWD}"),
        ("DB_PASSWORD", "${DB_PASSWORD}"),
        ("API_KEY", "${API_KEY}"),
        ("OPENAPI_MCP_HEADERS", "${OPENAPI_MCP_HEADERS}"),
        (
            "MONGODB_URI",
            "mongodb+srv://cluster.example.net/db?authSource=admin&authMechanism=SCRAM-SHA-256",
        ),
        ("GOOGLE_APPLICATION_CREDENTIALS", "/Users/me/keys/sa.json"),
        ("SSH_KEY_PATH", "~/.ssh/id_rsa"),
        ("PASSWORD_STORE_DIR", "~/.password-store"),
        ("SSH_AUTH_SOCK", "/run/ssh.sock"),
        ("AZURE_AUTH_METHOD", "interactive"),
        ("KEY_VAULT_NAME", "contoso-kv"),
        ("REDIS_KEY_PREFIX", "mcp:cache:"),
        ("TOKEN_ENDPOINT", "https://login.example.com/token"),
    ] {
        assert_eq!(env[name].as_str(), Some(value), "{name}");
    }
    assert_eq!(
        mounts["other"]["env"]["API_KEY"].as_str(),
        Some("${OTHER_API_KEY}"),
        "another server's API_KEY holds another key"
    );
    let report = report(&translation);
    assert_nowhere(
        &translation,
        &report,
        &[
            "SCRIPT1",
            "SCRIPT2",
            "BSAJSON3",
            "PGPW4",
            "MYPW5",
            "SMTP6",
            "EPW7",
            "DOLLAR8",
            "KEYONE9",
            "JSON10",
            "KEYTWO11",
            "COMMAND12",
            "PATH13",
        ],
    );
    assert_eq!(
        mounts["cmd"]["command"].as_str(),
        Some("GITHUB_TOKEN=${CMD_GITHUB_TOKEN} npx")
    );
    assert!(report.contains("mcpServers.cmd.command: "), "{report}");
    assert_eq!(
        mounts["zap"]["url"].as_str(),
        Some("https://actions.zapier.com/mcp/${ZAP_URL_PATH_KEY}/sse")
    );
}
