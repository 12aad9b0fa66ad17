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
            _ if before.is_some_and(is_header_flag) => header_rewritten(index, word, rewrite),
            // Written with its space, a header's name says it is one
            // (`X-Api-Key`, `Authorization`), not any `Token: …` text.
            Some(_) | None
                if word.contains(": ")
                    && word
                        .split_once(':')
                        .is_some_and(|(name, _)| header_like(name)) =>
            {
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
        // JSON settings holding a secret (`--config '{"apiKey": …}'`) whole.
        if word.trim_start().starts_with('{') && value_looks_secret(word) {
            rewritten.push(rewrite.value(index, named_by(before, "json"), word));
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
        // A provider's token.
        None if value_looks_secret(word) => rewrite.value(index, named_by(before, "token"), word),
        None => {
            let flag = names_secret(word).then_some(word);
            return (url_rewritten(index, word, rewrite), flag);
        }
    };
    (replaced, None)
}

/// A script (`bash -c "…"`, any word with whitespace in it): each of its
/// words is taken as [`token_rewritten`] takes a word of its own. A word
/// ends at whitespace or the shell's `;`, `&` and `|` outside quotes (a
/// quoted value with spaces is one word); the quotes and parentheses
/// around a word stay where they are. So a secret in a script does not
/// take the rest of the script with it.
fn script_rewritten(index: usize, script: &str, rewrite: &mut dyn SecretRewrite) -> String {
    const AROUND: [char; 4] = ['(', ')', '"', '\''];
    let mut out = String::with_capacity(script.len());
    let mut before: Option<&str> = None;
    let mut secret_flag: Option<&str> = None;
    for (word, separator) in shell_words(script) {
        let core_end = word.trim_end_matches(AROUND).len();
        let core_start = core_end - word[..core_end].trim_start_matches(AROUND).len();
        let core = &word[core_start..core_end];
        out.push_str(&word[..core_start]);
        if core.is_empty() {
        } else if let Some(flag) = secret_flag.take().filter(|_| !core.starts_with('-')) {
            let name = flag.trim_start_matches('-');
            out.push_str(&secret_value(index, name, core, rewrite));
        } else if before.is_some_and(is_header_flag) && core.contains(':') {
            out.push_str(
                &header_rewritten(index, core, rewrite).unwrap_or_else(|| core.to_owned()),
            );
        } else if core_start > 0 && core.contains(char::is_whitespace) {
            // A quoted script in the script (`sh -c 'curl …'`).
            out.push_str(&script_rewritten(index, core, rewrite));
        } else {
            let (replaced, flag) = token_rewritten(index, core, before, rewrite);
            secret_flag = flag;
            out.push_str(&replaced);
        }
        out.push_str(&word[core_end..]);
        out.push_str(separator);
        before = Some(core);
    }
    out
}

/// `script` cut into its words, each with the separator after it
/// (whitespace, `;`, `&`, `|`), quotes respected: together they are the
/// script again.
fn shell_words(script: &str) -> Vec<(&str, &str)> {
    let is_separator = |c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|');
    let mut words = Vec::new();
    let mut quote: Option<char> = None;
    let mut word_start = 0;
    let mut chars = script.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        match quote {
            Some(open) if c == open => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if is_separator(c) => {
                let mut end = at + c.len_utf8();
                while let Some(&(next_at, next)) = chars.peek() {
                    if !is_separator(next) {
                        break;
                    }
                    end = next_at + next.len_utf8();
                    chars.next();
                }
                words.push((&script[word_start..at], &script[at..end]));
                word_start = end;
            }
            None => {}
        }
    }
    if word_start < script.len() {
        words.push((&script[word_start..], ""));
    }
    words
}

/// What a secret found by its shape is called: after the flag before it
/// (`--config {…}`), if it is one, else `otherwise`.
fn named_by<'a>(before: Option<&'a str>, otherwise: &'a str) -> &'a str {
    match before {
        Some(flag) if flag.starts_with('-') && !flag.contains('=') => flag.trim_start_matches('-'),
        _ => otherwise,
    }
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
    let opening = value.len() - value.trim_start_matches(['"', '\'']).len();
    let (opening, value) = value.split_at(opening);
    let closing = value.len() - value.trim_end_matches(['"', '\'']).len();
    let (value, closing) = value.split_at(value.len() - closing);
    // `$NAME`, `$(…)`: the shell's (or the program's) to fill in.
    let shells = value.starts_with("$(")
        || value.strip_prefix('$').is_some_and(|name| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
    if value.is_empty()
        || shells
        || has_reference(value)
        || (looks_like_path(value) && !value_looks_secret(value))
    {
        return format!("{opening}{value}{closing}");
    }
    format!("{opening}{}{closing}", rewrite.value(index, name, value))
}

/// Whether `name` is a header's, as written beside its value: with a
/// `-` in it (`X-Api-Key`), or one of the few without.
fn header_like(name: &str) -> bool {
    const SINGLE_WORD: [&str; 3] = ["authorization", "cookie", "apikey"];
    plain_name(name)
        && (name.contains('-')
            || SINGLE_WORD
                .iter()
                .any(|known| name.eq_ignore_ascii_case(known)))
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
    // A password holding a `/` makes no URL to `url`, and is still one's.
    let scheme = word.split_once("://").map_or("", |(scheme, _)| scheme);
    let scheme_like = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'));
    scheme_like
        && !word.contains(char::is_whitespace)
        && (url::Url::parse(word).is_ok()
            || super::url_text::UrlText::split(word)
                .user_info
                .is_some_and(|user_info| user_info.contains(':')))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cases`, each word with what it becomes, rewritten together (the
    /// words before a word count: a flag names the secret after it).
    fn assert_rewritten(cases: &[(&str, &str)]) {
        let words: Vec<&str> = cases.iter().map(|(word, _)| *word).collect();
        let expected: Vec<&str> = cases.iter().map(|(_, becomes)| *becomes).collect();
        assert_eq!(rewrite_secrets(&words, &mut Marked), expected);
    }

    /// A word that stays as it is.
    fn kept(word: &str) -> (&str, &str) {
        (word, word)
    }

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
        assert_rewritten(&[
            kept("server"),
            ("--api-key=sk-1", "--api-key=<1 api-key sk-1>"),
            kept("--token"),
            ("tok-2", "<3 token tok-2>"),
            kept("--verbose"),
            kept("--auth-token"),
            kept("--port"),
            kept("8080"),
            kept("--header"),
            (
                "Authorization: Bearer sk-3",
                "Authorization: <9 Authorization Bearer sk-3>",
            ),
            (
                "--header=X-Api-Key: k-4",
                "--header=X-Api-Key: <10 X-Api-Key k-4>",
            ),
            kept("-e"),
            ("GITHUB_TOKEN=ghp_5", "GITHUB_TOKEN=<12 GITHUB_TOKEN ghp_5>"),
            ("--env=API_KEY=sk-6", "--env=API_KEY=<13 API_KEY sk-6>"),
            kept("MODE=fast"),
            (
                "--url=https://u:pw@h/mcp",
                "--url=<15 url https://u:pw@h/mcp>",
            ),
            ("https://h/mcp", "<16 url https://h/mcp>"),
            ("sh -c 'curl https://h'", "sh -c 'curl <17 url https://h>'"),
            kept("--token-file"),
            kept("/home/me/.token"),
            kept("--api-key-env=OPENAI_API_KEY"),
            kept("GITHUB_TOKEN_PATH=/run/secret"),
            kept("--bearer"),
            ("b-7", "<23 bearer b-7>"),
            kept("--model"),
            (
                "sk-ant-api03-A1b2C3d4E5f6G7h8",
                "<25 model sk-ant-api03-A1b2C3d4E5f6G7h8>",
            ),
            (
                "--model=sk-ant-api03-B1b2C3d4E5f6G7h8",
                "--model=<26 model sk-ant-api03-B1b2C3d4E5f6G7h8>",
            ),
            (
                "ghp_C1c2D3d4E5e6F7f8G9g0H1h2I3i4J5j6K7k8",
                "<27 token ghp_C1c2D3d4E5e6F7f8G9g0H1h2I3i4J5j6K7k8>",
            ),
            (
                "CONFIG=xoxb-1234567890-DDDDDDDDDD",
                "CONFIG=<28 CONFIG xoxb-1234567890-DDDDDDDDDD>",
            ),
            (
                "Server=db;User Id=sa;Password=pw-8;",
                "<29 connection_string Server=db;User Id=sa;Password=pw-8;>",
            ),
            kept("--header"),
            (
                "X-Custom: glpat-9a8B7c6D5e4F3g2H1i0J",
                "X-Custom: <31 X-Custom glpat-9a8B7c6D5e4F3g2H1i0J>",
            ),
            kept("--skip"),
            kept("sk-short"),
            kept("--pass-environment"),
            kept("pypi-query-mcp-server"),
            kept("--sig-figs"),
            kept("3"),
            kept("--filter=name=x;order=asc"),
            kept("cd /srv; AUTH_MODE=oauth node index.js"),
        ]);
    }

    /// Scripts and shell forms a second black-box pass tried: operators
    /// glued to a value, `$(…)` and `$NAME`, a quoted value with spaces, a
    /// header in a script, JSON with spaces, text that only resembles a
    /// header, a password with `/` in a URL, a secret starting with `/`.
    #[test]
    fn shell_forms_keep_their_shape_and_lose_their_secrets() {
        assert_rewritten(&[
            ("TOKEN=ghp_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8L9;npx srv", "TOKEN=<0 TOKEN ghp_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8L9>;npx srv"),
            ("export API_KEY=abcDEF123ghiJKL456mno&&npx srv", "export API_KEY=<1 API_KEY abcDEF123ghiJKL456mno>&&npx srv"),
            kept("GITHUB_PERSONAL_ACCESS_TOKEN=$(gh auth token) npx -y x"),
            kept("sentry --access-token $(cat ~/.sentry-token) run"),
            kept("OPENAI_API_KEY=$MY_OPENAI_KEY"),
            ("DB_PASSWORD='p@ss w0rd 9x' node x", "DB_PASSWORD='<5 DB_PASSWORD p@ss w0rd 9x>' node x"),
            ("curl -s -H 'X-Api-Key: 9f8e7d6c5b4a39281706f5e4d3c2b1a0' https://h | sh && npx srv", "curl -s -H 'X-Api-Key: <6 X-Api-Key 9f8e7d6c5b4a39281706f5e4d3c2b1a0>' <6 url https://h> | sh && npx srv"),
            kept("--config"),
            (r#"{"apiKey": "ghp_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8L9", "region": "eu"}"#, "<8 config {\"apiKey\": \"ghp_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8L9\", \"region\": \"eu\"}>"),
            kept("--system-prompt"),
            kept("Token: count words before answering"),
            ("postgresql://app:Ab3/vGr3GwnPFYhv+x@db:5432/app", "<11 url postgresql://app:Ab3/vGr3GwnPFYhv+x@db:5432/app>"),
            ("AWS_SECRET_ACCESS_KEY=/nhFyJfm5di4PzJ59FHz5r1pY4OjE2jBMptUsGr7", "AWS_SECRET_ACCESS_KEY=<12 AWS_SECRET_ACCESS_KEY /nhFyJfm5di4PzJ59FHz5r1pY4OjE2jBMptUsGr7>"),
            kept("--password"),
            ("/Zq8pLm3Nx7RtKw", "<14 password /Zq8pLm3Nx7RtKw>"),
        ]);
    }
}
