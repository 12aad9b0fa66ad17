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
            .map(|at| authority_start + at);
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
}
