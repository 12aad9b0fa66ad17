//! The headers of a client's own requests that its per-session upstreams
//! get (`forward_headers`): per-user credentials, such as each developer's
//! own token for a remote server, rather than one token for everyone.
//!
//! Each request of the session is read for them (only the headers some
//! mount forwards now are kept), so the values are the latest the client
//! sent: a token it renewed, a header a reload began to forward. A request
//! without one leaves the value it had (a client does not take its token
//! back, and a stack may leave headers off a notification or a wake). Each
//! per-session upstream of the session sends them on every request (its
//! opening included; `upstream::live_headers` reads them afresh each
//! time), in place of the mount's own header of the same name; client
//! values never enter the mount's config. The mount's own session
//! (discovery) sends only the mount's `headers`. Validation keeps them off
//! shared mounts, whose one upstream session serves every client.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use reqwest::header::{HeaderName, HeaderValue};

use crate::{config::MountConfig, upstream::LiveHeaders};

/// A client's values of the headers some mount forwards, by lower-case
/// name. Never shown: they are credentials.
#[derive(Default)]
pub(crate) struct ClientHeaders(BTreeMap<String, String>);

/// A session's [`ClientHeaders`], shared with its per-session upstreams'
/// [`LiveHeaders`] (which outlive it a little: the `DELETE` that ends
/// an upstream session goes out as the session ends).
pub(crate) type HeldClientHeaders = Arc<Mutex<ClientHeaders>>;

impl std::fmt::Debug for ClientHeaders {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_list().entries(self.0.keys()).finish()
    }
}

/// Takes what of `headers` (a client's request) some mount forwards (the
/// names `each_forwarded` gives); those it does not carry keep their
/// value. A value that is not visible text is left out, as if not sent,
/// and so is a header the request names in `Connection`: it was meant
/// for the gateway's hop alone (RFC 9110, 7.6.1), and a client or a
/// proxy in front may rely on it going no further. Without a mount that
/// forwards, nothing is locked or allocated.
pub(crate) fn note(
    held: &HeldClientHeaders,
    headers: &axum::http::HeaderMap,
    each_forwarded: impl FnOnce(&mut dyn FnMut(&str)),
) {
    let mut sent: Vec<(String, &str)> = Vec::new();
    each_forwarded(&mut |client_name| {
        if let Some(value) = headers.get(client_name).and_then(|v| v.to_str().ok()) {
            if !named_in_connection(headers, client_name) {
                sent.push((client_name.to_owned(), value));
            }
        }
    });
    if sent.is_empty() {
        return;
    }
    let mut held = lock(held);
    for (client_name, value) in sent {
        if held.0.get(&client_name).map(String::as_str) != Some(value) {
            held.0.insert(client_name, value.to_owned());
        }
    }
}

/// Whether a `Connection` header of `headers` lists `name` (lower case)
/// among its options.
fn named_in_connection(headers: &axum::http::HeaderMap, name: &str) -> bool {
    headers
        .get_all(axum::http::header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|option| option.trim().eq_ignore_ascii_case(name))
}

/// The headers `config` forwards, as an upstream session of it for this
/// client sends them: read from `held` afresh for each request, each in
/// place of the mount's own of that name (`None`: the mount forwards
/// none). A header the client never sent leaves the mount's own.
pub(crate) fn live_for(held: &HeldClientHeaders, config: &MountConfig) -> Option<LiveHeaders> {
    let forwarded: Vec<(HeaderName, String)> = config
        .forward_headers
        .iter()
        .filter_map(|(upstream, client)| {
            Some((
                HeaderName::from_bytes(upstream.as_bytes()).ok()?,
                client.clone(),
            ))
        })
        .collect();
    if forwarded.is_empty() {
        return None;
    }
    let held = held.clone();
    Some(LiveHeaders::new(move || {
        let held = lock(&held);
        forwarded
            .iter()
            .filter_map(|(upstream, client)| {
                let mut value = HeaderValue::from_str(held.0.get(client)?).ok()?;
                // Kept out of any `Debug` of a request.
                value.set_sensitive(true);
                Some((upstream.clone(), value))
            })
            .collect()
    }))
}

/// A copy of `held` to keep while its session sleeps (made now, as the
/// rest of a sleeper is: see `hibernation`); `None` if the client sent
/// none of them, which costs a sleeper nothing.
pub(crate) fn kept(held: &HeldClientHeaders) -> Option<HeldClientHeaders> {
    let held = lock(held);
    (!held.0.is_empty()).then(|| Arc::new(Mutex::new(ClientHeaders(held.0.clone()))))
}

fn lock(held: &HeldClientHeaders) -> std::sync::MutexGuard<'_, ClientHeaders> {
    held.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::config::{load_content, ConfigSource};

    fn mount(toml: &str) -> MountConfig {
        let source = ConfigSource::File("junction.toml".into());
        let config = load_content(&source, toml.as_bytes().to_vec()).expect("a valid config");
        config.mounts[0].clone()
    }

    fn request(pairs: &[(&'static str, &'static str)]) -> axum::http::HeaderMap {
        let mut headers = axum::http::HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(*name, value.parse().unwrap());
        }
        headers
    }

    fn noted(held: &HeldClientHeaders, config: &MountConfig, headers: &axum::http::HeaderMap) {
        note(held, headers, |take| {
            for client_name in config.forward_headers.values() {
                take(client_name);
            }
        });
    }

    /// What a request of `config`'s upstream sends, its own headers being
    /// `own`.
    fn sent(
        held: &HeldClientHeaders,
        config: &MountConfig,
        own: &[(&'static str, &'static str)],
    ) -> BTreeMap<String, String> {
        let mut headers: HashMap<HeaderName, HeaderValue> = own
            .iter()
            .map(|(name, value)| {
                (
                    HeaderName::from_static(name),
                    HeaderValue::from_static(value),
                )
            })
            .collect();
        crate::upstream::live_headers::apply(&live_for(held, config), &mut headers);
        headers
            .into_iter()
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
            .collect()
    }

    /// The client's value replaces the mount's own; a header the client
    /// did not send leaves the mount's; what is not forwarded stays as the
    /// mount has it.
    #[test]
    fn the_clients_values_replace_the_mounts_own() {
        let config = mount(
            "[mounts.a]\nurl = \"http://127.0.0.1:1/mcp\"\nisolation = \"per_session\"\n\
             forward_headers = { Authorization = \"X-User-Token\", X-Key = \"X-Key\" }\n",
        );
        let held = HeldClientHeaders::default();
        noted(
            &held,
            &config,
            &request(&[("x-user-token", "Bearer alice")]),
        );
        let own = [
            ("authorization", "Bearer mount"),
            ("x-team", "t"),
            ("x-key", "k"),
        ];
        assert_eq!(
            sent(&held, &config, &own),
            BTreeMap::from([
                ("authorization".to_owned(), "Bearer alice".to_owned()),
                ("x-key".to_owned(), "k".to_owned()),
                ("x-team".to_owned(), "t".to_owned()),
            ])
        );
        let nothing_forwarded = mount("[mounts.a]\nurl = \"http://127.0.0.1:1/mcp\"\n");
        assert!(live_for(&held, &nothing_forwarded).is_none());
    }

    /// The latest value the client sent wins; a request without the
    /// header (a notification, a wake) leaves the one it had; a header no
    /// mount forwards is not kept.
    #[test]
    fn each_request_renews_what_it_carries() {
        let config = mount(
            "[mounts.a]\nurl = \"http://127.0.0.1:1/mcp\"\nisolation = \"per_session\"\n\
             forward_headers = [\"Authorization\"]\n",
        );
        let held = HeldClientHeaders::default();
        let authorization =
            |held: &HeldClientHeaders| sent(held, &config, &[]).remove("authorization");
        noted(
            &held,
            &config,
            &request(&[("authorization", "Bearer old"), ("cookie", "c")]),
        );
        assert_eq!(authorization(&held).as_deref(), Some("Bearer old"));
        noted(&held, &config, &request(&[]));
        assert_eq!(authorization(&held).as_deref(), Some("Bearer old"), "kept");
        noted(
            &held,
            &config,
            &request(&[("authorization", "Bearer renewed")]),
        );
        assert_eq!(authorization(&held).as_deref(), Some("Bearer renewed"));
        assert_eq!(format!("{:?}", lock(&held)), r#"["authorization"]"#);
    }

    /// A header the request names in `Connection` stops at the gateway,
    /// whichever `Connection` header and case names it; the value held
    /// from an earlier request stays.
    #[test]
    fn a_header_named_in_connection_is_not_forwarded() {
        let config = mount(
            "[mounts.a]\nurl = \"http://127.0.0.1:1/mcp\"\nisolation = \"per_session\"\n\
             forward_headers = [\"X-Token\", \"X-Team\"]\n",
        );
        let held = HeldClientHeaders::default();
        let mut headers = request(&[("x-token", "hop only"), ("x-team", "t")]);
        headers.append("connection", "keep-alive".parse().unwrap());
        headers.append("connection", "close , X-TOKEN".parse().unwrap());
        noted(&held, &config, &headers);
        assert_eq!(
            sent(&held, &config, &[]),
            BTreeMap::from([("x-team".to_owned(), "t".to_owned())])
        );
        noted(&held, &config, &request(&[("x-token", "end to end")]));
        let mut headers = request(&[("x-token", "hop only again")]);
        headers.insert("connection", "x-token".parse().unwrap());
        noted(&held, &config, &headers);
        assert_eq!(
            sent(&held, &config, &[]).remove("x-token").as_deref(),
            Some("end to end")
        );
    }
}
