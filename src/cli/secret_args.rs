//! Where a stdio server's command line carries secrets, for `check` to
//! mask them and `import` to move them to the environment.
//!
//! Client configs pass tokens as arguments as often as in `env`:
//! `--api-key=sk-…`, `--token tok-…`, a header as `mcp-remote` takes it
//! (`--header "Authorization: Bearer …"`), a setting for `docker run -e`
//! (`GITHUB_TOKEN=ghp_…`), a URL with a password or a key in its query.
//! One walk over the words finds them all ([`rewrite_secrets`]); what
//! replaces each is the caller's.

use super::import::secrets::{has_reference, looks_like_path, names_a_secret, value_looks_secret};

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
    let mut rewritten = Vec::with_capacity(words.len());
    let mut value_of_secret_flag: Option<&str> = None;
    for (index, word) in words.iter().enumerate() {
        let word = *word;
        let before = index.checked_sub(1).map(|before| words[before]);
        if let Some(flag) = value_of_secret_flag
            .take()
            .filter(|_| !word.starts_with('-'))
        {
            rewritten.push(secret_value(
                index,
                flag.trim_start_matches('-'),
                word,
                rewrite,
            ));
            continue;
        }
        // `Name: value` after `--header` (`-H`) or in `--header=…`, or
        // written with its space: not any `a:b` (a Docker volume
        // `mcp-auth:/root`, an image's tag).
        let header = match word.split_once('=') {
            Some((flag, value)) if flag.starts_with('-') && is_header_flag(flag) => {
                header_rewritten(index, value, rewrite).map(|header| format!("{flag}={header}"))
            }
            _ if before.is_some_and(is_header_flag) || word.contains(": ") => {
                header_rewritten(index, word, rewrite)
            }
            _ => None,
        };
        if let Some(header) = header {
            rewritten.push(header);
            continue;
        }
        // A connection string (`Server=db;User Id=sa;Password=…`) whole.
        if word.contains(';') && value_looks_secret(word) {
            rewritten.push(rewrite.value(index, "connection_string", word));
            continue;
        }
        if word.contains(char::is_whitespace) {
            rewritten.push(script_rewritten(index, word, rewrite));
            continue;
        }
        let (replaced, flag) = token_rewritten(index, word, before, rewrite);
        value_of_secret_flag = flag;
        rewritten.push(replaced);
    }
    rewritten
}

/// One word with no whitespace in it, on its own or in a script
/// ([`script_rewritten`]); `before` is the word before it. Also returns
/// the word if it is a flag whose value (the next word) is a secret.
fn token_rewritten<'a>(
    index: usize,
    word: &'a str,
    before: Option<&str>,
    rewrite: &mut dyn SecretRewrite,
) -> (String, Option<&'a str>) {
    let replaced = match word.split_once('=') {
        Some((flag, value)) if flag.starts_with('-') && is_header_flag(flag) => {
            match header_rewritten(index, value, rewrite) {
                Some(header) => format!("{flag}={header}"),
                None => word.to_owned(),
            }
        }
        Some((flag, value))
            if names_secret(flag) || (flag.starts_with('-') && value_looks_secret(value)) =>
        {
            let name = flag.trim_start_matches('-');
            format!("{flag}={}", secret_value(index, name, value, rewrite))
        }
        Some((flag, value)) if flag.starts_with('-') && setting(value).is_some() => {
            let (name, secret) = setting(value).unwrap_or_default();
            format!(
                "{flag}={name}={}",
                secret_value(index, name, secret, rewrite)
            )
        }
        Some(_) if setting(word).is_some() => {
            let (name, secret) = setting(word).unwrap_or_default();
            format!("{name}={}", secret_value(index, name, secret, rewrite))
        }
        Some(_) => url_rewritten(index, word, rewrite),
        // A provider's token, named after the flag before it, if any.
        None if value_looks_secret(word) => {
            let name = match before {
                Some(flag) if flag.starts_with('-') && !flag.contains('=') => {
                    flag.trim_start_matches('-')
                }
                _ => "token",
            };
            rewrite.value(index, name, word)
        }
        None => {
            let flag = names_secret(word).then_some(word);
            return (url_rewritten(index, word, rewrite), flag);
        }
    };
    (replaced, None)
}

/// A script (`bash -c "…"`, any word with whitespace in it): each of its
/// words is taken as [`token_rewritten`] takes a word of its own, with
/// the quotes and the shell's `;`, `&`, `|` and parentheses around it left
/// where they are, so that a secret in it does not take the rest of the
/// script with it.
fn script_rewritten(index: usize, script: &str, rewrite: &mut dyn SecretRewrite) -> String {
    const AROUND: [char; 7] = [';', '&', '|', '(', ')', '"', '\''];
    let mut out = String::with_capacity(script.len());
    let mut before: Option<&str> = None;
    let mut secret_flag: Option<&str> = None;
    let mut rest = script;
    while !rest.is_empty() {
        let blank = rest.len() - rest.trim_start().len();
        out.push_str(&rest[..blank]);
        rest = &rest[blank..];
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let (word, after) = rest.split_at(end);
        rest = after;
        let core_end = word.trim_end_matches(AROUND).len();
        let core_start = core_end - word[..core_end].trim_start_matches(AROUND).len();
        let core = &word[core_start..core_end];
        out.push_str(&word[..core_start]);
        if core.is_empty() {
        } else if let Some(flag) = secret_flag.take().filter(|_| !core.starts_with('-')) {
            out.push_str(&secret_value(
                index,
                flag.trim_start_matches('-'),
                core,
                rewrite,
            ));
        } else {
            let (replaced, flag) = token_rewritten(index, core, before, rewrite);
            secret_flag = flag;
            out.push_str(&replaced);
        }
        out.push_str(&word[core_end..]);
        before = Some(core);
    }
    out
}

/// `Name: value` (a header) with its value replaced if the name says
/// secret or the value is shaped like one; `None` if it is no such
/// header. The separator is kept as written (`Name:value` too).
fn header_rewritten(index: usize, word: &str, rewrite: &mut dyn SecretRewrite) -> Option<String> {
    let (name, value) = word.split_once(':')?;
    let spaced = &value[..value.len() - value.trim_start().len()];
    let value = value.trim();
    let secret = plain_name(name)
        && !value.is_empty()
        && !has_reference(value)
        && (names_a_secret(name) || value_looks_secret(value));
    secret.then(|| format!("{name}:{spaced}{}", rewrite.value(index, name, value)))
}

/// A secret `value` under `name`, replaced, unless it is a file's path or
/// a reference already (`--key ~/.ssh/id`, `TOKEN=${TOKEN}`). A quote
/// opening it (`TOKEN="…` in a script) stays.
fn secret_value(index: usize, name: &str, value: &str, rewrite: &mut dyn SecretRewrite) -> String {
    let quote = value.len() - value.trim_start_matches(['"', '\'']).len();
    let (quote, value) = value.split_at(quote);
    if value.is_empty()
        || has_reference(value)
        || (looks_like_path(value) && !value_looks_secret(value))
    {
        return format!("{quote}{value}");
    }
    format!("{quote}{}", rewrite.value(index, name, value))
}

/// Whether `flag` passes a header (`--header`, `-H`, `--headers`).
fn is_header_flag(flag: &str) -> bool {
    let name = flag.trim_start_matches('-').to_ascii_lowercase();
    flag == "-H"
        || (flag.starts_with("--") && (name.ends_with("header") || name.ends_with("headers")))
}

/// Whether flag `flag` names a secret (`--api-key`); `--no-auth` says
/// there is none: what follows is another argument.
fn names_secret(flag: &str) -> bool {
    let name = flag.trim_start_matches('-');
    flag.starts_with('-') && !name.starts_with("no-") && names_a_secret(name)
}

fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// `NAME=value` (an environment setting: `docker run -e`, `env`), if the
/// name says secret or the value is shaped like one.
fn setting(word: &str) -> Option<(&str, &str)> {
    let (name, value) = word.split_once('=')?;
    (plain_name(name)
        && !name.starts_with('-')
        && (names_a_secret(name) || value_looks_secret(value)))
    .then_some((name, value))
}

/// `word` with the secrets of a URL in it replaced: a connection string
/// (`postgresql://app:pw@db/prod`) is a URL, and so is the value of a
/// `--flag=URL` (a script's URLs are taken word by word: [`script_rewritten`]).
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
                "sh -c 'curl <17 url https://h>'",
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
