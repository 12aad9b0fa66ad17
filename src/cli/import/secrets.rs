//! Secrets written into an imported file as they are: moved to the
//! environment rather than copied into the config.
//!
//! A client config often holds a token in plain text
//! (`"env": {"GITHUB_TOKEN": "ghp_…"}`, `"headers": {"Authorization":
//! "Bearer …"}`). The TOML `import` prints is meant to be kept, shared and
//! put in a ConfigMap, where anyone who can read it would read the token.
//! So a value under a secret-looking name that is written as is (no
//! `${…}` in it) becomes a reference to an environment variable, and the
//! report says which one to set; the value itself is printed nowhere.

use serde_json::Value;

use super::{vars::env_name, Issue};

/// Words (between `_`, `-` or case changes) that make an `env` or header
/// name, a flag or a query parameter a secret's.
const SECRET_WORDS: [&str; 14] = [
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "KEY",
    "APIKEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "AUTHORIZATION",
    "BEARER",
    "COOKIE",
    "PAT",
    "SIGNATURE",
];

/// Names that are a secret's whole (`--pass`, `--jwt`, `?sig=`,
/// `PGPASSWORD`).
const SECRET_NAMES: [&str; 4] = ["PASS", "JWT", "SIG", "PGPASSWORD"];

/// Words that make a name a secret's only as its last (`MYSQL_PASS`,
/// `EMAIL_PWD`, `SUPABASE_JWT`): elsewhere they name other things
/// (`--pass-environment`, `JWT_ISSUER`, `--sig-figs`), and `PWD` alone is
/// the working directory.
const SECRET_LAST_WORDS: [&str; 4] = ["PASS", "PWD", "JWT", "SIG"];

/// Whether `name` (an env variable's or a header's, a flag's, a query
/// parameter's) has a secret's words in it. See [`names_a_secret`].
pub fn looks_secret(name: &str) -> bool {
    let name = env_name(name);
    let words: Vec<&str> = name.split('_').collect();
    SECRET_NAMES.contains(&name.as_str())
        || words.iter().any(|word| SECRET_WORDS.contains(word))
        || (words.len() > 1
            && words
                .last()
                .is_some_and(|last| SECRET_LAST_WORDS.contains(last)))
}

/// Whether `name` names a secret: it [`looks_secret`], and does not name
/// where the secret is or of what kind ([`names_where_it_is`]).
pub fn names_a_secret(name: &str) -> bool {
    looks_secret(name) && !names_where_it_is(name)
}

/// Whether `name` names where a secret is, or of what kind or how it is
/// used, rather than the secret itself: `--token-file ~/.t`,
/// `--api-key-env OPENAI_API_KEY`, `--auth-type bearer`,
/// `GITHUB_TOKEN_PATH=…`, `AZURE_AUTH_METHOD`, `KEY_VAULT_NAME`,
/// `?authSource=admin`, `--auth-timeout 60`, `TOKEN_ENDPOINT`.
pub fn names_where_it_is(name: &str) -> bool {
    const PLACES: [&str; 28] = [
        "file",
        "path",
        "dir",
        "env",
        "var",
        "type",
        "mode",
        "method",
        "mechanism",
        "source",
        "url",
        "uri",
        "endpoint",
        "timeout",
        "ttl",
        "prefix",
        "name",
        "id",
        "sock",
        "store",
        "issuer",
        "audience",
        "algorithm",
        "scope",
        "limit",
        "count",
        "size",
        "length",
    ];
    let last = env_name(name);
    let last = last.rsplit('_').next().unwrap_or_default();
    PLACES.iter().any(|place| last.eq_ignore_ascii_case(place))
}

/// Whether `value` is a file's path, which a secret's name may hold
/// (`GOOGLE_APPLICATION_CREDENTIALS`, `--key ~/.ssh/id_ed25519`) and
/// which is no secret itself: `~/…`, `./…`, `../…`, `C:\…`, or `/…` with
/// two `/` or more and a `.`, `-` or `_` in it, which no base64 secret
/// has (an AWS secret key may begin with `/`).
pub fn looks_like_path(value: &str) -> bool {
    let bytes = value.as_bytes();
    let absolute = value.starts_with('/')
        && value.matches('/').count() >= 2
        && value.contains(['.', '-', '_'])
        && !value.contains(['+', '=']);
    absolute
        || value.starts_with("~/")
        || value.starts_with("./")
        || value.starts_with("../")
        || (bytes.len() > 2 && bytes[0].is_ascii_alphabetic() && &bytes[1..3] == b":\\")
}

/// Whether `value` holds a `${NAME}` reference, as the config's own
/// expansion reads it (`$${…}` is literal text), rather than a `$` that
/// is part of the text.
pub fn has_reference(value: &str) -> bool {
    let referred = std::cell::Cell::new(false);
    let _ = crate::config::expand_str(value, &|_| {
        referred.set(true);
        Some(String::new())
    });
    referred.get()
}

/// How the tokens of well-known providers begin, and how many characters
/// of a token's alphabet follow at least: such a value is a secret under
/// any name, or none (`--model sk-ant-…`, a bare argument).
const TOKEN_PREFIXES: [(&str, usize); 20] = [
    ("ghp_", 30),
    ("gho_", 30),
    ("ghu_", 30),
    ("ghs_", 30),
    ("ghr_", 30),
    ("github_pat_", 40),
    ("glpat-", 20),
    ("sk-", 20),
    ("sk_live_", 20),
    ("sk_test_", 20),
    ("rk_live_", 20),
    ("xoxb-", 20),
    ("xoxp-", 20),
    ("xoxa-", 20),
    ("xapp-", 20),
    ("hf_", 30),
    ("npm_", 30),
    ("pypi-", 50),
    ("shpat_", 30),
    ("AIza", 30),
];

/// Whether `value` is shaped like a secret, whatever it is called: a
/// well-known provider's token ([`TOKEN_PREFIXES`], the prefix followed
/// by a long enough run of a token's alphabet with digits and letters
/// mixed in, as a random string has them and a name such as
/// `pypi-query-mcp-server` does not; an AWS key id, `AKIA` and 16
/// capitals or digits; a JWT, `eyJ…` in three parts), or a connection
/// string with a password in it (`Server=db;User Id=sa;Password=…`: a
/// `Password`, `Pwd`, `AccountKey` or `SharedAccessSignature` entry).
pub fn value_looks_secret(value: &str) -> bool {
    let token_alphabet = |text: &str| {
        text.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '=' | '/' | '+'))
    };
    let random = |rest: &str, least: usize| {
        let digits = rest.chars().filter(char::is_ascii_digit).count();
        let letters = rest.chars().filter(char::is_ascii_alphabetic).count();
        rest.len() >= least && token_alphabet(rest) && digits >= 3 && letters >= 3
    };
    let provider_token = TOKEN_PREFIXES.iter().any(|(prefix, least)| {
        value
            .strip_prefix(prefix)
            .is_some_and(|rest| random(rest, *least))
    });
    let aws_key_id = ["AKIA", "ASIA"].iter().any(|prefix| {
        value.strip_prefix(prefix).is_some_and(|rest| {
            rest.len() == 16
                && rest
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        })
    });
    let jwt = value.starts_with("eyJ")
        && token_alphabet(value)
        && value.split('.').count() == 3
        && value.split('.').all(|part| part.len() >= 10);
    const CONNECTION_SECRETS: [&str; 4] =
        ["password", "pwd", "accountkey", "sharedaccesssignature"];
    let connection_password = value.contains(';')
        && value.split(';').any(|pair| {
            pair.split_once('=').is_some_and(|(name, secret)| {
                let name = name.trim().to_ascii_lowercase();
                !secret.trim().is_empty() && CONNECTION_SECRETS.contains(&name.as_str())
            })
        });
    provider_token || aws_key_id || jwt || connection_password || json_with_secret(value)
}

/// Whether `text`, under a secret's name in JSON, is no secret: empty, a
/// reference, a path, a number, or a word for none (`{"auth": "none"}`).
fn ordinary(text: &str) -> bool {
    const NONE: [&str; 6] = ["none", "true", "false", "null", "off", "disabled"];
    text.is_empty()
        || has_reference(text)
        || looks_like_path(text)
        || text.parse::<f64>().is_ok()
        || NONE.iter().any(|word| text.eq_ignore_ascii_case(word))
}

/// Whether `value` is a JSON object (a server's settings or headers passed
/// as one string: `{"Authorization": "Bearer …"}`, `{"braveApiKey": …}`)
/// with a secret in it: a text under a secret's name, or shaped like one.
fn json_with_secret(value: &str) -> bool {
    fn holds(value: &Value) -> bool {
        match value {
            Value::Object(members) => members.iter().any(|(name, member)| match member {
                Value::String(text) => {
                    (names_a_secret(name) && !ordinary(text)) || value_looks_secret(text)
                }
                other => holds(other),
            }),
            Value::Array(items) => items.iter().any(holds),
            _ => false,
        }
    }
    value.trim_start().starts_with('{')
        && serde_json::from_str::<Value>(value).is_ok_and(|parsed| holds(&parsed))
}

/// The variables an import has named for secrets it moved out, so that
/// two different secrets never share one (`?apiKey=` and `?api_key=` of
/// one URL, a URL's key and a header of the same name).
#[derive(Default)]
pub struct Variables(
    std::collections::HashSet<String>,
    /// The value each `env` secret's variable stands for, by variable.
    std::collections::HashMap<String, String>,
);

impl Variables {
    /// `wanted`, or `wanted_2`, `wanted_3`… if that is named already.
    /// Variables with every `env` name of every server in `entries` taken
    /// (an `env` secret keeps its name, and may come after an argument's
    /// or a header's secret of another server that would want it).
    pub fn claiming_env_names(entries: &[super::source::Entry]) -> Self {
        let mut variables = Self::default();
        let env_maps = entries
            .iter()
            .filter_map(|entry| entry.value.get("env")?.as_object());
        for name in env_maps.flat_map(|env| env.keys()) {
            variables.claim(&env_name(name));
        }
        variables
    }

    /// `name` is taken as it is (an `env` variable keeps its name, shared
    /// with other servers' of that name): a later [`Self::unique`] steps
    /// around it.
    fn claim(&mut self, name: &str) {
        self.0.insert(name.to_owned());
    }

    /// The variable for `env` secret `name` of server `server`: its own
    /// name, shared by the servers whose secret of that name is the same
    /// value; one after the server for a different value (two servers'
    /// `API_KEY`s are often two keys).
    fn for_env_secret(&mut self, server: &str, name: &str, value: &str) -> String {
        let variable = env_name(name);
        self.claim(&variable);
        match self.1.get(&variable) {
            None => {
                self.1.insert(variable.clone(), value.to_owned());
                variable
            }
            Some(held) if held == value => variable,
            Some(_) => self.for_value(env_name(&format!("{server}_{name}")), value),
        }
    }

    /// `wanted`, or `wanted_2`, `wanted_3`… if that is named already for
    /// another value: the same secret written twice (an `env` entry and
    /// the same token in an argument) is one variable.
    fn for_value(&mut self, wanted: String, value: &str) -> String {
        let candidates =
            std::iter::once(wanted.clone()).chain((2..).map(|n| format!("{wanted}_{n}")));
        for name in candidates {
            match self.1.get(&name) {
                Some(held) if held == value => return name,
                Some(_) => continue,
                None if self.0.insert(name.clone()) => {
                    self.1.insert(name.clone(), value.to_owned());
                    return name;
                }
                None => continue,
            }
        }
        unreachable!("an unused suffix")
    }

    fn unique(&mut self, wanted: String) -> String {
        if self.0.insert(wanted.clone()) {
            return wanted;
        }
        (2..)
            .map(|n| format!("{wanted}_{n}"))
            .find(|name| self.0.insert(name.clone()))
            .expect("an unused suffix")
    }
}

/// `value` of `name` in `field` (`env` or `headers`) of server `server`
/// at `path`: as it is, or, for a secret written as is, a reference to the
/// environment variable it should come from, reported in `issues`.
pub fn kept_out(
    server: &str,
    field: &str,
    name: &str,
    value: String,
    path: &str,
    issues: &mut Vec<Issue>,
    variables: &mut Variables,
) -> String {
    let by_name = names_a_secret(name) && !looks_like_path(&value);
    if value.is_empty() || has_reference(&value) || !(by_name || value_looks_secret(&value)) {
        return value;
    }
    // An env variable keeps its name (two servers' `GITHUB_TOKEN` are
    // likely the one token), unless another server's of that name holds
    // another value; a header gets one after its server.
    let variable = match field {
        "env" => variables.for_env_secret(server, name, &value),
        _ => variables.for_value(env_name(&format!("{server}_{name}")), &value),
    };
    issues.push(Issue::lost(
        path,
        format!(
            "a secret written as is was not copied into the config; it became ${{{variable}}}: set {variable} (to the value in the source file) before starting junction"
        ),
    ));
    format!("${{{variable}}}")
}

/// `url` of server `server` at `path` (its `url`, or an argument), with a
/// secret written in it as is moved to the environment: the password of
/// its user info (the mount's `Authorization`, from
/// `${SERVER_URL_PASSWORD}`), a user alone that looks like a token
/// (`${SERVER_URL_USER}`), each query value under a secret-looking name
/// (`?api_key=…`) or shaped like a secret, and each path segment that
/// looks like a key (`/s/<key>/mcp`, as `check` masks it), reported in
/// `issues`.
pub fn url_kept_out(
    server: &str,
    url: String,
    path: &str,
    issues: &mut Vec<Issue>,
    variables: &mut Variables,
) -> String {
    use crate::cli::url_text::UrlText;
    let parts = UrlText::split(&url);
    let mut moved = Vec::new();
    let mut variable_for = |name: &str| {
        let variable = variables.unique(env_name(&format!("{server}_{name}")));
        moved.push(variable.clone());
        format!("${{{variable}}}")
    };
    let user_info = parts
        .user_info
        .map(|user_info| match user_info.split_once(':') {
            Some((user, password)) if !password.is_empty() && !has_reference(password) => {
                format!("{user}:{}", variable_for("url_password"))
            }
            // A user alone is often a token (`https://TOKEN@host`), not
            // in a connection string (`postgresql://postgres@db`), nor a
            // name (`https://contoso@dev.azure.com`): one shaped like a
            // token, or like a key as a path segment would be.
            None if is_http(&url)
                && !has_reference(user_info)
                && (value_looks_secret(user_info)
                    || crate::cli::url_text::looks_like_a_key(user_info)) =>
            {
                variable_for("url_user")
            }
            _ => user_info.to_owned(),
        });
    let query = parts.query.map(|query| {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, value))
                    if !value.is_empty()
                        && !has_reference(value)
                        && (names_a_secret(name) || value_looks_secret(value)) =>
                {
                    format!("{name}={}", variable_for(name))
                }
                _ => pair.to_owned(),
            })
            .collect();
        pairs.join("&")
    });
    // A segment of the path that looks like a key (hosted servers take
    // theirs there: `/s/<key>/mcp`), as `check` masks it.
    let segments: Vec<String> = parts
        .path
        .split('/')
        .map(
            |segment| match crate::cli::url_text::looks_like_a_key(segment) {
                true => variable_for("url_path_key"),
                false => segment.to_owned(),
            },
        )
        .collect();
    let url_path = segments.join("/");
    if moved.is_empty() {
        return url;
    }
    issues.push(Issue::lost(
        path,
        format!(
            "a secret written in the URL was not copied into the config; set {} (to the value in the source file, percent-encoded as it is written in the URL) before starting junction",
            moved.join(", ")
        ),
    ));
    parts.with(user_info.as_deref(), &url_path, query.as_deref())
}

/// Whether `url` is an `http` or `https` URL (as written).
fn is_http(url: &str) -> bool {
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")
}

/// Moves the secrets of server `server`'s command line at `path` to the
/// environment ([`crate::cli::secret_args`]), as [`kept_out`] and
/// [`url_kept_out`] do, reporting each in `issues`.
pub struct ArgsKeptOut<'a> {
    pub server: &'a str,
    pub path: &'a str,
    pub issues: &'a mut Vec<Issue>,
    pub variables: &'a mut Variables,
    /// Whether the words are the `command` (one word) rather than `args`.
    pub command: bool,
}

impl ArgsKeptOut<'_> {
    /// Where word `index` is, for the report.
    fn at(&self, index: usize) -> String {
        match self.command {
            true => format!("{}.command", self.path),
            false => format!("{}.args.{index}", self.path),
        }
    }
}

impl crate::cli::secret_args::SecretRewrite for ArgsKeptOut<'_> {
    fn value(&mut self, index: usize, name: &str, value: &str) -> String {
        let path = self.at(index);
        kept_out(
            self.server,
            "args",
            name,
            value.to_owned(),
            &path,
            self.issues,
            self.variables,
        )
    }

    fn url(&mut self, index: usize, url: &str) -> String {
        let path = self.at(index);
        url_kept_out(
            self.server,
            url.to_owned(),
            &path,
            self.issues,
            self.variables,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names_are_told_from_others() {
        for secret in [
            "GITHUB_PERSONAL_ACCESS_TOKEN",
            "Authorization",
            "X-Api-Key",
            "OPENAI_API_KEY",
            "DB_PASSWORD",
            "aws_secret_access_key",
            "Cookie",
        ] {
            assert!(looks_secret(secret), "{secret}");
        }
        for plain in [
            "NODE_ENV",
            "HOME",
            "Accept",
            "LOG_LEVEL",
            "KEYBOARD_LAYOUT",
            "GIT_AUTHOR_NAME",
            "pass-environment",
            "JWT_ISSUER",
            "sig-figs",
        ] {
            assert!(!looks_secret(plain), "{plain}");
        }
        for exact in ["pass", "jwt", "sig", "X-Amz-Signature", "bearer"] {
            assert!(looks_secret(exact), "{exact}");
        }
    }

    /// Provider tokens and connection strings with a password are found
    /// by their shape; names, paths and scripts that share a prefix or a
    /// `;` are not (review: `pypi-query-mcp-server`, `hf_cache_…`, a
    /// shell script with `NAME=…;`).
    #[test]
    fn secret_values_are_told_from_others_by_their_shape() {
        for secret in [
            "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
            "sk-ant-api03-AbC123dEf456GhI789jKl012",
            "sk-proj-9fK2mQ7xL4pR8tW1zY6vB3nH5jD0",
            "xoxb-1234567890-0987654321-AbCdEfGhIjKl",
            "AKIAIOSFODNN7EXAMPLE",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "Server=db;User Id=sa;Password=hunter2;",
            "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=k1;",
        ] {
            assert!(value_looks_secret(secret), "{secret}");
        }
        for plain in [
            "pypi-query-mcp-server",
            "hf_cache_directory_for_models",
            "npm_config_cache",
            "ASIA_PACIFIC_SOUTHEAST_1",
            "sk-short",
            "export GITHUB_TOKEN=$(cat /run/secrets/gh); exec server",
            "cd /srv; AUTH_MODE=oauth node index.js",
            "key=name;order=asc",
            "eyJ-not-a-jwt",
            r#"{"token_limit": "4096", "model": "m"}"#,
            r#"{"auth": "none", "retries": 3}"#,
        ] {
            assert!(!value_looks_secret(plain), "{plain}");
        }
        assert!(value_looks_secret(
            r#"{"headers": {"Authorization": "Bearer abc123def"}}"#
        ));
        assert!(looks_like_path("/run/ssh.sock") && looks_like_path("~/.ssh/id"));
        assert!(!looks_like_path("/nhFyJfm5di4PzJ59FHz5r1pY4OjE2jBMptUsGr7"));
        assert!(!looks_like_path("/Zq8pLm3Nx7RtKw"));
    }

    #[test]
    fn a_secret_written_as_is_becomes_a_reference() {
        let mut issues = Vec::new();
        let kept = |name: &str, value: &str, issues: &mut Vec<Issue>| {
            kept_out(
                "github",
                "env",
                name,
                value.to_owned(),
                "p",
                issues,
                &mut Variables::default(),
            )
        };
        assert_eq!(
            kept("GITHUB_TOKEN", "ghp_abc", &mut issues),
            "${GITHUB_TOKEN}"
        );
        assert_eq!(kept("GITHUB_TOKEN", "${GH}", &mut issues), "${GH}");
        assert_eq!(kept("NODE_ENV", "production", &mut issues), "production");
        assert_eq!(issues.len(), 1);
        assert!(
            !issues[0].message.contains("ghp_abc"),
            "{}",
            issues[0].message
        );
        let header = kept_out(
            "remote",
            "headers",
            "Authorization",
            "Bearer x".into(),
            "p",
            &mut issues,
            &mut Variables::default(),
        );
        assert_eq!(header, "${REMOTE_AUTHORIZATION}");
    }
}
