//! Headers whose values may change over an upstream session's life, read
//! afresh before each of its HTTP requests: a client's credentials that a
//! `per_session` mount forwards (`downstream::forwarded_headers`), which
//! the client renews as its token expires. Each value replaces the
//! mount's own header of that name on that request.

use std::{collections::HashMap, sync::Arc};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

/// The current values, from whoever holds them (a downstream session).
#[derive(Clone)]
pub struct LiveHeaders(Arc<dyn Fn() -> Vec<(HeaderName, HeaderValue)> + Send + Sync>);

impl LiveHeaders {
    pub fn new(
        current: impl Fn() -> Vec<(HeaderName, HeaderValue)> + Send + Sync + 'static,
    ) -> Self {
        LiveHeaders(Arc::new(current))
    }
}

/// The header sets a request is built from.
pub trait Headers {
    /// Sets `name` to `value` alone (never a second value beside the
    /// mount's own).
    fn replace(&mut self, name: HeaderName, value: HeaderValue);
}

impl Headers for HeaderMap {
    fn replace(&mut self, name: HeaderName, value: HeaderValue) {
        self.insert(name, value);
    }
}

impl Headers for HashMap<HeaderName, HeaderValue> {
    fn replace(&mut self, name: HeaderName, value: HeaderValue) {
        self.insert(name, value);
    }
}

/// Lays the current values (if the session has live headers) over
/// `headers`.
pub fn apply(live: &Option<LiveHeaders>, headers: &mut impl Headers) {
    if let Some(LiveHeaders(current)) = live {
        for (name, value) in current() {
            headers.replace(name, value);
        }
    }
}
