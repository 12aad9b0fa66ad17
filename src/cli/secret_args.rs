//! Where a stdio server's command line carries secrets, for `check` to
//! mask them and `import` to move them to the environment.
//!
//! Client configs pass tokens as arguments as often as in `env`:
//! `--api-key=sk-…`, `--token tok-…`, a header as `mcp-remote` takes it
//! (`--header "Authorization: Bearer …"`), a setting for `docker run -e`
//! (`GITHUB_TOKEN=ghp_…`), a URL with a password or a key in its query.
//! One walk over the words finds them all ([`rewrite_secrets`]); what
//! replaces each is the caller's.

/// What replaces the secrets found in a command line.
pub trait SecretRewrite {
    /// The replacement for `value`, the secret of word `index` named
    /// `name` (a flag without its dashes, a header's or a setting's name).
    fn value(&mut self, index: usize, name: &str, value: &str) -> String;

    /// The replacement for `url`, word `index` or the value of a
    /// `--flag=URL` in it, with its secrets replaced.
    fn url(&mut self, index: usize, url: &str) -> String;
}

/// `words` with each likely secret replaced by `rewrite`: the value of a
/// flag whose name says secret (`--api-key=sk-…`, `--token tok-…`), of a
/// header or `NAME=value` setting whose name does, and the secrets of a
/// URL ([`looks_like_url`]); and, whatever names it, a value shaped like
/// a secret (a provider's token, a connection string with a password:
/// `import::secrets::value_looks_secret`).
pub fn rewrite_secrets(words: &[&str], rewrite: &mut dyn SecretRewrite) -> Vec<String> {
    let looks_secret =
        |name: &str| super::import::secrets::looks_secret(name) && !names_where_it_is(name);
    let value_looks_secret = super::import::secrets::value_looks_secret;
    // `--no-auth` says there is none: what follows is another argument.
    let names_secret = |flag: &str| {
        let name = flag.trim_start_matches('-');
        flag.starts_with('-') && !name.starts_with("no-") && looks_secret(name)
    };
    let plain_name = |name: &str| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    // `Name: value` (a header), if the name says secret or the value is
    // shaped like one.
    let header = |word: &str| {
        let (name, value) = word.split_once(':')?;
        (plain_name(name) && (looks_secret(name) || value_looks_secret(value.trim())))
            .then(|| (name.to_owned(), value.trim().to_owned()))
    };
    // `NAME=value` (an environment setting: `docker run -e`, `env`), if
    // the name says secret.
    let setting = |word: &str| {
        let (name, value) = word.split_once('=')?;
        (plain_name(name)
            && !name.starts_with('-')
            && (looks_secret(name) || value_looks_secret(value)))
        .then(|| (name.to_owned(), value.to_owned()))
    };
    let mut rewritten = Vec::with_capacity(words.len());
    let mut value_of_secret_flag: Option<&str> = None;
    for (index, word) in words.iter().enumerate() {
        let word = *word;
        if let Some(flag) = value_of_secret_flag
            .take()
            .filter(|_| !word.starts_with('-'))
        {
            rewritten.push(rewrite.value(index, flag.trim_start_matches('-'), word));
            continue;
        }
        if let Some((name, value)) = header(word) {
            rewritten.push(format!("{name}: {}", rewrite.value(index, &name, &value)));
            continue;
        }
        let replaced = match word.split_once('=') {
            Some((flag, value))
                if names_secret(flag) || (flag.starts_with('-') && value_looks_secret(value)) =>
            {
                let name = flag.trim_start_matches('-');
                format!("{flag}={}", rewrite.value(index, name, value))
            }
            // A connection string (`Server=db;Password=…`) whole.
            Some(_) if value_looks_secret(word) => rewrite.value(index, "connection_string", word),
            Some((flag, value)) if flag.starts_with('-') && header(value).is_some() => {
                let (name, secret) = header(value).unwrap_or_default();
                format!("{flag}={name}: {}", rewrite.value(index, &name, &secret))
            }
            Some((flag, value)) if flag.starts_with('-') && setting(value).is_some() => {
                let (name, secret) = setting(value).unwrap_or_default();
                format!("{flag}={name}={}", rewrite.value(index, &name, &secret))
            }
            Some(_) if setting(word).is_some() => {
                let (name, secret) = setting(word).unwrap_or_default();
                format!("{name}={}", rewrite.value(index, &name, &secret))
            }
            Some(_) => url_rewritten(index, word, rewrite),
            // A provider's token, named after the flag before it, if any.
            None if value_looks_secret(word) => {
                let before = index.checked_sub(1).map(|before| words[before]);
                let name = match before {
                    Some(flag) if flag.starts_with('-') && !flag.contains('=') => {
                        flag.trim_start_matches('-')
                    }
                    _ => "token",
                };
                rewrite.value(index, name, word)
            }
            None => {
                value_of_secret_flag = names_secret(word).then_some(word);
                url_rewritten(index, word, rewrite)
            }
        };
        rewritten.push(replaced);
    }
    rewritten
}

/// Whether `name` names where a secret is, or of what kind, rather than
/// the secret itself: `--token-file ~/.t`, `--api-key-env OPENAI_API_KEY`,
/// `--auth-type bearer`, `GITHUB_TOKEN_PATH=…`.
fn names_where_it_is(name: &str) -> bool {
    const PLACES: [&str; 7] = ["file", "path", "dir", "env", "var", "type", "mode"];
    name.rsplit(['-', '_'])
        .next()
        .is_some_and(|last| PLACES.iter().any(|place| last.eq_ignore_ascii_case(place)))
}

/// `word` with the secrets of a URL in it replaced: a connection string
/// (`postgresql://app:pw@db/prod`) is a URL, and so is the value of a
/// `--flag=URL`; a script (`sh -c`) that holds a URL is not one.
fn url_rewritten(index: usize, word: &str, rewrite: &mut dyn SecretRewrite) -> String {
    if looks_like_url(word) {
        return rewrite.url(index, word);
    }
    match word.split_once('=') {
        Some((flag, value)) if flag.starts_with('-') && looks_like_url(value) => {
            format!("{flag}={}", rewrite.url(index, value))
        }
        _ => word.to_owned(),
    }
}

/// Whether `word` is a URL, whole.
fn looks_like_url(word: &str) -> bool {
    word.contains("://") && !word.contains(char::is_whitespace) && url::Url::parse(word).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Marks what it is given, to show what was found where.
    struct Marked;
    impl SecretRewrite for Marked {
        fn value(&mut self, index: usize, name: &str, value: &str) -> String {
            format!("<{index} {name} {value}>")
        }
        fn url(&mut self, index: usize, url: &str) -> String {
            format!("<{index} url {url}>")
        }
    }

    #[test]
    fn every_kind_of_secret_is_found_with_its_name_and_place() {
        let words = [
            "server",
            "--api-key=sk-1",
            "--token",
            "tok-2",
            "--verbose",
            "--auth-token",
            "--port",
            "8080",
            "--header",
            "Authorization: Bearer sk-3",
            "--header=X-Api-Key: k-4",
            "-e",
            "GITHUB_TOKEN=ghp_5",
            "--env=API_KEY=sk-6",
            "MODE=fast",
            "--url=https://u:pw@h/mcp",
            "https://h/mcp",
            "sh -c 'curl https://h'",
            "--token-file",
            "/home/me/.token",
            "--api-key-env=OPENAI_API_KEY",
            "GITHUB_TOKEN_PATH=/run/secret",
            "--bearer",
            "b-7",
            "--model",
            "sk-ant-api03-A1b2C3d4E5f6G7h8",
            "--model=sk-ant-api03-B1b2C3d4E5f6G7h8",
            "ghp_C1c2D3d4E5e6F7f8G9g0H1h2I3i4J5j6K7k8",
            "CONFIG=xoxb-1234567890-DDDDDDDDDD",
            "Server=db;User Id=sa;Password=pw-8;",
            "--header",
            "X-Custom: glpat-9a8B7c6D5e4F3g2H1i0J",
            "--skip",
            "sk-short",
            "--pass-environment",
            "pypi-query-mcp-server",
            "--sig-figs",
            "3",
            "--filter=name=x;order=asc",
            "cd /srv; AUTH_MODE=oauth node index.js",
        ];
        assert_eq!(
            rewrite_secrets(&words, &mut Marked),
            [
                "server",
                "--api-key=<1 api-key sk-1>",
                "--token",
                "<3 token tok-2>",
                "--verbose",
                "--auth-token",
                "--port",
                "8080",
                "--header",
                "Authorization: <9 Authorization Bearer sk-3>",
                "--header=X-Api-Key: <10 X-Api-Key k-4>",
                "-e",
                "GITHUB_TOKEN=<12 GITHUB_TOKEN ghp_5>",
                "--env=API_KEY=<13 API_KEY sk-6>",
                "MODE=fast",
                "--url=<15 url https://u:pw@h/mcp>",
                "<16 url https://h/mcp>",
                "sh -c 'curl https://h'",
                "--token-file",
                "/home/me/.token",
                "--api-key-env=OPENAI_API_KEY",
                "GITHUB_TOKEN_PATH=/run/secret",
                "--bearer",
                "<23 bearer b-7>",
                "--model",
                "<25 model sk-ant-api03-A1b2C3d4E5f6G7h8>",
                "--model=<26 model sk-ant-api03-B1b2C3d4E5f6G7h8>",
                "<27 token ghp_C1c2D3d4E5e6F7f8G9g0H1h2I3i4J5j6K7k8>",
                "CONFIG=<28 CONFIG xoxb-1234567890-DDDDDDDDDD>",
                "<29 connection_string Server=db;User Id=sa;Password=pw-8;>",
                "--header",
                "X-Custom: <31 X-Custom glpat-9a8B7c6D5e4F3g2H1i0J>",
                "--skip",
                "sk-short",
                "--pass-environment",
                "pypi-query-mcp-server",
                "--sig-figs",
                "3",
                "--filter=name=x;order=asc",
                "cd /srv; AUTH_MODE=oauth node index.js",
            ]
        );
    }
}
