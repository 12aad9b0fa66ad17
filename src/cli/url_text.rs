//! A URL as written, split where secrets travel, without parsing it: with
//! a `${VAR}` in it, it is no URL until the config is loaded. `check`
//! masks the parts that may hold a secret; `import` moves a secret written
//! in them into the environment.

/// The parts of a URL as written.
pub struct UrlText<'a> {
    /// Up to and including `://` (empty without one).
    pub scheme: &'a str,
    /// Between `://` and the last `@` before the path, if there is one.
    pub user_info: Option<&'a str>,
    /// Host and port.
    pub host: &'a str,
    pub path: &'a str,
    /// After `?`, without it.
    pub query: Option<&'a str>,
    /// After `#`, without it.
    pub fragment: Option<&'a str>,
}

impl<'a> UrlText<'a> {
    pub fn split(url: &'a str) -> Self {
        let authority_start = url.find("://").map_or(0, |at| at + 3);
        // The user info ends at the last `@` before the path: a password
        // may hold `#` or `?` as written, which would otherwise cut the
        // URL short there and leave the rest (the password's end, the
        // host) where a password is not looked for.
        let before_path = url[authority_start..]
            .find('/')
            .map_or(url.len(), |at| authority_start + at);
        let user_info_end = url[authority_start..before_path]
            .rfind('@')
            .map(|at| authority_start + at)
            .or_else(|| password_with_slash(url, authority_start, before_path));
        let host_start = user_info_end.map_or(authority_start, |at| at + 1);
        let authority_end = url[host_start..]
            .find(['/', '?', '#'])
            .map_or(url.len(), |at| host_start + at);
        let rest = &url[authority_end..];
        let (rest, fragment) = match rest.split_once('#') {
            Some((rest, fragment)) => (rest, Some(fragment)),
            None => (rest, None),
        };
        let (path, query) = match rest.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (rest, None),
        };
        UrlText {
            scheme: &url[..authority_start],
            user_info: user_info_end.map(|at| &url[authority_start..at]),
            host: &url[host_start..authority_end],
            path,
            query,
            fragment,
        }
    }

    /// The URL again, with `user_info`, `path` and `query` in place of its
    /// own.
    pub fn with(&self, user_info: Option<&str>, path: &str, query: Option<&str>) -> String {
        let mut out = String::from(self.scheme);
        if let Some(user_info) = user_info {
            out.push_str(user_info);
            out.push('@');
        }
        out.push_str(self.host);
        out.push_str(path);
        if let Some(query) = query {
            out.push('?');
            out.push_str(query);
        }
        if let Some(fragment) = self.fragment {
            out.push('#');
            out.push_str(fragment);
        }
        out
    }
}

/// Where the user info ends (its `@`) in `url` whose password holds a
/// `/` as written (`postgresql://app:Ab3/x+y@db/app`), which would
/// otherwise start the path inside the password and leave it shown:
/// what comes before the first `/` is `user:` and more, no `host:port`
/// (a port is digits) nor an IPv6 host, and an `@` follows before any
/// `?` or `#`.
fn password_with_slash(url: &str, authority_start: usize, before_path: usize) -> Option<usize> {
    let authority = &url[authority_start..before_path];
    let (_, after_colon) = authority.rsplit_once(':')?;
    if authority.starts_with('[') || after_colon.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let rest = &url[before_path..];
    let rest = &rest[..rest.find(['?', '#']).unwrap_or(rest.len())];
    rest.find('@').map(|at| before_path + at)
}

/// Whether a URL path segment looks like a key rather than a name: long
/// enough and mixing letters with several digits (`mcp`, `v1`, `sse`,
/// `server-sequential-thinking` and `2025-11-25` stay; `a1b2c3d4e5f6`, a
/// UUID, a random token go). A `${VAR}` names the secret without showing
/// it and stays.
pub fn looks_like_a_key(segment: &str) -> bool {
    if segment.starts_with("${") {
        return false;
    }
    let letters = segment.chars().any(|c| c.is_ascii_alphabetic());
    let digits = segment.chars().filter(|c| c.is_ascii_digit()).count();
    segment.len() >= 12 && letters && digits >= 3
}

/// Whether `value` is one `${VAR}` reference and nothing else.
pub fn is_variable(value: &str) -> bool {
    value.starts_with("${") && value.ends_with('}') && value.matches("${").count() == 1
}

#[cfg(test)]
#[test]
fn a_url_splits_where_secrets_travel_and_joins_again() {
    for url in [
        "https://u:p@w@h:8/a/b?k=v&x#top",
        "https://h/mcp",
        "${BASE}/mcp?key=${KEY}",
        "https://h/a@b:c/mcp?k=v#top",
        "postgresql://app:Ab3/vG+x@db:5432/app",
        "https://h:8080/a@b",
        "http://[::1]/a@b",
    ] {
        let parts = UrlText::split(url);
        assert_eq!(parts.with(parts.user_info, parts.path, parts.query), url);
    }
    let parts = UrlText::split("https://u:p@w@h:8/a/b?k=v&x#top");
    assert_eq!(parts.user_info, Some("u:p@w"));
    assert_eq!(
        (parts.host, parts.path, parts.query),
        ("h:8", "/a/b", Some("k=v&x"))
    );
    assert_eq!(parts.fragment, Some("top"));
    // A password holding a `/` (black-box helper: it was shown).
    let parts = UrlText::split("postgresql://app:Ab3/vG+x@db:5432/app");
    assert_eq!(parts.user_info, Some("app:Ab3/vG+x"));
    assert_eq!((parts.host, parts.path), ("db:5432", "/app"));
    for (url, host) in [
        ("https://h:8080/a@b", "h:8080"),
        ("http://[::1]/a@b", "[::1]"),
    ] {
        let parts = UrlText::split(url);
        assert_eq!((parts.user_info, parts.host), (None, host), "{url}");
    }
}
