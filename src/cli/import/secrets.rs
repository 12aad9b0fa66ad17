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

use super::{vars::env_name, Issue};

/// Words (between `_`, `-` or case changes) that make an `env` or header
/// name, a flag or a query parameter a secret's (`--bearer`, `--jwt`,
/// `--pass`, `?sig=`, `X-Amz-Signature`).
const SECRET_WORDS: [&str; 17] = [
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "KEY",
    "APIKEY",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "AUTHORIZATION",
    "BEARER",
    "COOKIE",
    "PAT",
    "JWT",
    "SIG",
    "SIGNATURE",
];

/// Whether `name` (an env variable's or a header's) names a secret.
pub fn looks_secret(name: &str) -> bool {
    env_name(name)
        .split('_')
        .any(|word| SECRET_WORDS.contains(&word))
}

/// How the tokens of well-known providers begin: such a value is a
/// secret under any name, or none (`--model sk-ant-…`, a bare argument).
const TOKEN_PREFIXES: [&str; 23] = [
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "glpat-",
    "sk-",
    "sk_live_",
    "sk_test_",
    "rk_live_",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xapp-",
    "hf_",
    "npm_",
    "pypi-",
    "shpat_",
    "AKIA",
    "ASIA",
    "AIza",
    "eyJ",
];

/// Whether `value` is shaped like a secret, whatever it is called: a
/// well-known provider's token ([`TOKEN_PREFIXES`], 20 characters or
/// more of a token's alphabet; a JWT, `eyJ…`, with its three parts), or
/// a connection string with a password in it
/// (`Server=db;User Id=sa;Password=…`, `…;Pwd=…`).
pub fn value_looks_secret(value: &str) -> bool {
    let token_alphabet = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '=' | '/' | '+'));
    let provider_token = value.len() >= 20
        && token_alphabet
        && TOKEN_PREFIXES
            .iter()
            .any(|prefix| value.starts_with(prefix))
        && (!value.starts_with("eyJ") || value.matches('.').count() == 2);
    let connection_password = value.contains(';')
        && value.split(';').any(|pair| {
            pair.split_once('=').is_some_and(|(name, secret)| {
                let name = name.trim();
                !secret.trim().is_empty()
                    && (name.eq_ignore_ascii_case("pwd") || looks_secret(name))
            })
        });
    provider_token || connection_password
}

/// The variables an import has named for secrets it moved out, so that
/// two different secrets never share one (`?apiKey=` and `?api_key=` of
/// one URL, a URL's key and a header of the same name).
#[derive(Default)]
pub struct Variables(std::collections::HashSet<String>);

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
    if value.is_empty()
        || value.contains("${")
        || !(looks_secret(name) || value_looks_secret(&value))
    {
        return value;
    }
    // An env variable keeps its name (two servers' `GITHUB_TOKEN` are
    // likely the one token); a header gets one after its server.
    let variable = match field {
        "env" => {
            let variable = env_name(name);
            variables.claim(&variable);
            variable
        }
        _ => variables.unique(env_name(&format!("{server}_{name}"))),
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
/// secret written in it as is
/// moved to the environment: the password of its user info (the mount's
/// `Authorization`, from `${SERVER_URL_PASSWORD}`), a user alone (often a
/// token: `${SERVER_URL_USER}`) and each query value
/// under a secret-looking name (`?api_key=…`), reported in `issues`. A
/// path segment that may be a key is left (nothing names it a secret):
/// `junction check` masks it when it shows the URL.
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
            Some((user, password)) if !password.is_empty() && !password.contains("${") => {
                format!("{user}:{}", variable_for("url_password"))
            }
            // A user alone is often a token (`https://TOKEN@host`), not
            // in a connection string (`postgresql://postgres@db`).
            None if !user_info.is_empty() && !user_info.contains("${") && is_http(&url) => {
                variable_for("url_user")
            }
            _ => user_info.to_owned(),
        });
    let query = parts.query.map(|query| {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, value))
                    if !value.is_empty() && !value.contains("${") && looks_secret(name) =>
                {
                    format!("{name}={}", variable_for(name))
                }
                _ => pair.to_owned(),
            })
            .collect();
        pairs.join("&")
    });
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
    parts.with(user_info.as_deref(), parts.path, query.as_deref())
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
}

impl crate::cli::secret_args::SecretRewrite for ArgsKeptOut<'_> {
    fn value(&mut self, index: usize, name: &str, value: &str) -> String {
        let path = format!("{}.args.{index}", self.path);
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
        let path = format!("{}.args.{index}", self.path);
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
        ] {
            assert!(!looks_secret(plain), "{plain}");
        }
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
