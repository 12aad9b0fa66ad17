//! Client capability profiles: what an upstream's lists may depend on.
//!
//! Servers show some tools only to clients that declared a capability
//! (server-everything lists `trigger-sampling-request` only with sampling).
//! A per-session upstream is opened with its client's own capabilities, so
//! the lists that session must see are the ones a client with the same
//! *profile* sees (the MCP Apps extension counts: Apps servers list UI
//! tools to hosts that declare it). Profiles are few (a handful of
//! booleans), so the gateway
//! discovers each mount once per profile actually in use and shares the
//! result between every session with that profile.

use rmcp::model::ClientCapabilities;
use serde_json::json;

/// The MCP Apps extension (SEP-1724 extensions, `capabilities.extensions`):
/// servers list their UI tools, or UI variants of them, only to hosts that
/// declare it.
pub const APPS_EXTENSION: &str = "io.modelcontextprotocol/ui";
/// The UI resources' MIME type an Apps host renders.
const APPS_MIME_TYPE: &str = "text/html;profile=mcp-app";

/// The parts of a client's capabilities that can change what a server lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ClientProfile {
    pub sampling: bool,
    pub elicitation_form: bool,
    pub elicitation_url: bool,
    pub roots: bool,
    /// Declares the MCP Apps extension ([`APPS_EXTENSION`]).
    pub apps: bool,
}

impl ClientProfile {
    /// Everything the gateway can relay: what shared sessions declare.
    pub const FULL: ClientProfile = ClientProfile {
        sampling: true,
        elicitation_form: true,
        elicitation_url: true,
        roots: true,
        apps: true,
    };

    pub fn of(capabilities: &ClientCapabilities) -> Self {
        let elicitation = capabilities.elicitation.as_ref();
        Self {
            sampling: capabilities.sampling.is_some(),
            // An empty `elicitation: {}` means form mode (2025-06-18 shape).
            elicitation_form: elicitation.is_some_and(|e| e.form.is_some() || e.url.is_none()),
            elicitation_url: elicitation.is_some_and(|e| e.url.is_some()),
            roots: capabilities.roots.is_some(),
            apps: capabilities
                .extensions
                .as_ref()
                .is_some_and(|extensions| extensions.contains_key(APPS_EXTENSION)),
        }
    }

    /// Capabilities declaring exactly this profile, as a mount's own
    /// (shared) sessions declare them. Roots come without `listChanged`:
    /// such a session's `roots/list` is answered by whichever client's
    /// call it is asked within, and no client's change is relayed to it,
    /// so a server must not cache one client's roots waiting to be told
    /// (per-session upstreams declare the client's own capabilities).
    pub fn capabilities(&self) -> ClientCapabilities {
        let mut declared = serde_json::Map::new();
        if self.sampling {
            declared.insert("sampling".into(), json!({}));
        }
        if self.roots {
            declared.insert("roots".into(), json!({}));
        }
        let mut elicitation = serde_json::Map::new();
        if self.elicitation_form {
            elicitation.insert("form".into(), json!({}));
        }
        if self.elicitation_url {
            elicitation.insert("url".into(), json!({}));
        }
        if !elicitation.is_empty() {
            declared.insert("elicitation".into(), elicitation.into());
        }
        if self.apps {
            declared.insert(
                "extensions".into(),
                json!({ APPS_EXTENSION: { "mimeTypes": [APPS_MIME_TYPE] } }),
            );
        }
        // Built from JSON: rmcp's builder marks these handshake-era
        // capabilities deprecated (SEP-2577).
        serde_json::from_value(declared.into()).unwrap_or_default()
    }
}

impl std::fmt::Display for ClientProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = [
            (self.sampling, "sampling"),
            (self.elicitation_form, "elicitation"),
            (self.elicitation_url, "url-elicitation"),
            (self.roots, "roots"),
            (self.apps, "apps"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        if names.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&names.join("+"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(capabilities: serde_json::Value) -> ClientProfile {
        ClientProfile::of(&serde_json::from_value(capabilities).unwrap())
    }

    #[test]
    fn profiles_round_trip_through_capabilities() {
        for sampling in [false, true] {
            for form in [false, true] {
                for url in [false, true] {
                    for roots in [false, true] {
                        for apps in [false, true] {
                            let p = ClientProfile {
                                sampling,
                                elicitation_form: form,
                                elicitation_url: url,
                                roots,
                                apps,
                            };
                            let declared = p.capabilities();
                            assert_eq!(ClientProfile::of(&declared), p, "{p}");
                            // Never promised: no client's change reaches it.
                            let roots = serde_json::to_value(&declared).unwrap()["roots"].clone();
                            assert!(roots.get("listChanged").is_none(), "{p}: {roots}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn client_shapes_map_to_profiles() {
        assert_eq!(profile(serde_json::json!({})), ClientProfile::default());
        assert_eq!(
            profile(serde_json::json!({"elicitation": {}})),
            ClientProfile {
                elicitation_form: true,
                ..Default::default()
            }
        );
        assert_eq!(
            profile(serde_json::json!({
                "sampling": {}, "roots": {"listChanged": true},
                "elicitation": {"form": {}, "url": {}},
                "extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}
            })),
            ClientProfile::FULL
        );
        assert_eq!(
            ClientProfile::FULL.to_string(),
            "sampling+elicitation+url-elicitation+roots+apps"
        );
    }
}
