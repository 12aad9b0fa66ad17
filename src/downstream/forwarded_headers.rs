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
//! time), in place of the mount's own header of the same name. The mount's own session
//! (discovery) sends only the mount's `headers`. Validation keeps them off
//! shared mounts, whose one upstream session serves every client.

use std::{borrow::Cow, collections::BTreeMap};

use reqwest::header::{HeaderName, HeaderValue};

use crate::config::{MountConfig, UpstreamTransport};

/// A client's values of the headers some mount forwards, by lower-case
/// name. Never shown: they are credentials.
#[derive(Default)]
pub(crate) struct ClientHeaders(BTreeMap<String, String>);

impl std::fmt::Debug for ClientHeaders {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_list().entries(self.0.keys()).finish()
    }
}

impl ClientHeaders {
    /// Takes what of `headers` (a client's request) any of `mounts`
    /// forwards; those it does not carry keep their value. A value that is
    /// not visible text is left out, as if not sent. Without a mount that
    /// forwards, nothing is locked or allocated.
    pub(crate) fn note<'a>(
        held: &std::sync::Mutex<ClientHeaders>,
        headers: &axum::http::HeaderMap,
        mounts: impl IntoIterator<Item = &'a MountConfig>,
    ) {
        let mut sent = Vec::new();
        for mount in mounts {
            for client_name in mount.forward_headers.values() {
                if let Some(value) = headers.get(client_name).and_then(|v| v.to_str().ok()) {
                    sent.push((client_name, value));
                }
            }
        }
        if sent.is_empty() {
            return;
        }
        let mut held = held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (client_name, value) in sent {
            if held.0.get(client_name).map(String::as_str) != Some(value) {
                held.0.insert(client_name.clone(), value.to_owned());
            }
        }
    }

    /// The values of `forwarded` (upstream name → client name) the client
    /// has sent, as headers to send upstream (marked sensitive, so that
    /// no `Debug` of a request shows them).
    pub(crate) fn values_for(
        &self,
        forwarded: &BTreeMap<String, String>,
    ) -> Vec<(HeaderName, HeaderValue)> {
        forwarded
            .iter()
            .filter_map(|(upstream, client)| {
                let name = HeaderName::from_bytes(upstream.as_bytes()).ok()?;
                let mut value = HeaderValue::from_str(self.0.get(client)?).ok()?;
                value.set_sensitive(true);
                Some((name, value))
            })
            .collect()
    }

    /// `config` as this client's upstream session of it is opened: each
    /// header the mount forwards that the client sent replaces the mount's
    /// own of that name (whatever its case); one the client did not send
    /// leaves the mount's own, if any.
    pub(crate) fn applied_to<'a>(&self, config: &'a MountConfig) -> Cow<'a, MountConfig> {
        let sent: Vec<(&String, &String)> = config
            .forward_headers
            .iter()
            .filter_map(|(upstream, client)| Some((upstream, self.0.get(client)?)))
            .collect();
        if sent.is_empty() {
            return Cow::Borrowed(config);
        }
        let mut config = config.clone();
        if let UpstreamTransport::StreamableHttp { headers, .. }
        | UpstreamTransport::Sse { headers, .. } = &mut config.transport
        {
            for (upstream, value) in sent {
                headers.retain(|name, _| !name.eq_ignore_ascii_case(upstream));
                headers.insert(upstream.clone(), value.clone());
            }
        }
        Cow::Owned(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load_content, ConfigSource};

    fn mount(toml: &str) -> MountConfig {
        let source = ConfigSource::File("junction.toml".into());
        let config = load_content(&source, toml.as_bytes().to_vec()).expect("a valid config");
        config.mounts[0].clone()
    }

    fn sent(config: &MountConfig) -> BTreeMap<String, String> {
        match &config.transport {
            UpstreamTransport::StreamableHttp { headers, .. }
            | UpstreamTransport::Sse { headers, .. } => headers.clone(),
            UpstreamTransport::Stdio { .. } => unreachable!("an HTTP mount"),
        }
    }

    /// The client's value replaces the mount's own whatever its case; a
    /// header the client did not send leaves the mount's; what is not
    /// forwarded stays as the mount has it.
    #[test]
    fn the_clients_values_replace_the_mounts_own() {
        let config = mount(
            "[mounts.a]\nurl = \"http://127.0.0.1:1/mcp\"\nisolation = \"per_session\"\n\
             headers = { AUTHORIZATION = \"Bearer mount\", X-Team = \"t\", X-Key = \"k\" }\n\
             forward_headers = { Authorization = \"X-User-Token\", X-Key = \"X-Key\" }\n",
        );
        let client = ClientHeaders(BTreeMap::from([(
            "x-user-token".to_owned(),
            "Bearer alice".to_owned(),
        )]));
        assert_eq!(
            sent(&client.applied_to(&config)),
            BTreeMap::from([
                ("X-Key".to_owned(), "k".to_owned()),
                ("X-Team".to_owned(), "t".to_owned()),
                ("authorization".to_owned(), "Bearer alice".to_owned()),
            ])
        );
        let nothing_sent = ClientHeaders::default();
        assert!(matches!(nothing_sent.applied_to(&config), Cow::Borrowed(_)));
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
        let held = std::sync::Mutex::new(ClientHeaders::default());
        let request = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = axum::http::HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, value.parse().unwrap());
            }
            headers
        };
        let authorization = |held: &std::sync::Mutex<ClientHeaders>| {
            sent(&held.lock().unwrap().applied_to(&config))
                .get("authorization")
                .cloned()
        };
        ClientHeaders::note(
            &held,
            &request(&[("authorization", "Bearer old"), ("cookie", "c")]),
            [&config],
        );
        assert_eq!(authorization(&held).as_deref(), Some("Bearer old"));
        ClientHeaders::note(&held, &request(&[]), [&config]);
        assert_eq!(authorization(&held).as_deref(), Some("Bearer old"), "kept");
        ClientHeaders::note(
            &held,
            &request(&[("authorization", "Bearer renewed")]),
            [&config],
        );
        assert_eq!(authorization(&held).as_deref(), Some("Bearer renewed"));
        assert_eq!(
            format!("{:?}", held.lock().unwrap()),
            r#"["authorization"]"#
        );
    }

    #[test]
    fn a_clients_values_are_never_shown() {
        let client = ClientHeaders(BTreeMap::from([(
            "authorization".to_owned(),
            "Bearer secret".to_owned(),
        )]));
        assert_eq!(format!("{client:?}"), r#"["authorization"]"#);
    }
}
