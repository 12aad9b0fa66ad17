//! The config as the user wrote it: loose serde shapes, no I/O, no checks.
//!
//! Every field is optional here so that one missing or mistyped field does
//! not hide the other problems: [`super::validate`] turns these into the
//! resolved [`super::Config`] and reports everything wrong at once.
//! `deny_unknown_fields` catches typos such as `comand`.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The `[server]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table of server settings")]
pub struct RawServer {
    pub listen: Option<String>,
    pub path: Option<String>,
    pub separator: Option<String>,
    pub fit_tool_names: Option<bool>,
    pub tool_name_max_chars: Option<Count>,
    pub allowed_hosts: Option<Vec<Text>>,
    pub allowed_origins: Option<Vec<String>>,
    pub session_idle_timeout: Option<String>,
    pub session_hibernate_after: Option<String>,
    pub shutdown_grace: Option<String>,
    pub request_read_timeout: Option<String>,
    pub sse_path: Option<String>,
}

/// One `[mounts.NAME]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a mount table (`command` or `url`, and its settings)"
)]
pub struct RawMount {
    // stdio upstream
    pub command: Option<Text>,
    pub args: Option<Vec<Text>>,
    pub env: Option<BTreeMap<String, Text>>,
    pub cwd: Option<Text>,
    // HTTP upstream (Streamable HTTP, or the legacy HTTP+SSE transport)
    pub url: Option<String>,
    pub headers: Option<BTreeMap<String, Text>>,
    pub transport: Option<String>,
    // both
    pub namespace: Option<String>,
    pub isolation: Option<String>,
    pub timeouts: Option<RawMountTimeouts>,
    pub max_upstream_sessions: Option<Count>,
    pub include_tools: Option<Vec<Text>>,
    pub exclude_tools: Option<Vec<Text>>,
    pub forward_headers: Option<RawForwardHeaders>,
}

/// One `[endpoints.NAME]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an endpoint table (`mounts`, the mounts it serves)"
)]
pub struct RawEndpoint {
    pub mounts: Option<Vec<Text>>,
}

/// A mount's `forward_headers`: client header names, each sent upstream
/// under its own name (`["Authorization"]`), or a table of upstream header
/// name = client header name (`{ Authorization = "X-Tiny-Token" }`).
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "a list of header names, or a table of upstream header name = client header name"
)]
pub enum RawForwardHeaders {
    Same(Vec<Text>),
    Renamed(BTreeMap<String, Text>),
}

/// A command-line argument, an environment value, a header value, or a
/// name (a host, a tool pattern, a header, the service): text, whatever
/// it looks like. YAML reads `args: [--port, 8080]` and `PORT:
/// 8080` as numbers, TOML `DEBUG = true` as a boolean; integers and
/// booleans are taken as the text they are written as. A number with a
/// fraction is refused (`3.10` would be read as 3.1), and no error here
/// quotes the value, which may be a secret.
#[derive(Debug, Clone)]
pub struct Text(pub String);

impl<'de> Deserialize<'de> for Text {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl serde::de::Visitor<'_> for TextVisitor {
            type Value = Text;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Text, E> {
                Ok(Text(text.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Text, E> {
                Ok(Text(text))
            }
            fn visit_i64<E: serde::de::Error>(self, number: i64) -> Result<Text, E> {
                Ok(Text(number.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, number: u64) -> Result<Text, E> {
                Ok(Text(number.to_string()))
            }
            fn visit_bool<E: serde::de::Error>(self, flag: bool) -> Result<Text, E> {
                Ok(Text(flag.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Text, E> {
                Err(E::custom(
                    "a number with a fraction is not taken as text: write it in quotes",
                ))
            }
        }
        deserializer.deserialize_any(TextVisitor)
    }
}

/// A count or a length: a whole number, 0 or more. Its errors say so
/// in words ("expected a whole number"), where serde's integer types say
/// `expected usize`. A count past what the setting's type holds is taken
/// as the most it holds ([`Self::usize`], [`Self::u32`]): a limit that
/// high is no limit either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count(pub u64);

impl Count {
    pub fn usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }

    pub fn u32(self) -> u32 {
        u32::try_from(self.0).unwrap_or(u32::MAX)
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountVisitor;
        impl serde::de::Visitor<'_> for CountVisitor {
            type Value = Count;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a whole number")
            }
            fn visit_u64<E: serde::de::Error>(self, number: u64) -> Result<Count, E> {
                Ok(Count(number))
            }
            fn visit_i64<E: serde::de::Error>(self, number: i64) -> Result<Count, E> {
                u64::try_from(number)
                    .map(Count)
                    .map_err(|_| E::custom(format!("{number} is below 0")))
            }
            fn visit_f64<E: serde::de::Error>(self, number: f64) -> Result<Count, E> {
                // YAML reads `1e3` as a float: a whole one is that count.
                match number {
                    _ if number.fract() != 0.0 || !number.is_finite() => {
                        Err(E::custom(format!("{number} is not a whole number")))
                    }
                    _ if number < 0.0 => Err(E::custom(format!("{number} is below 0"))),
                    // `as` saturates past u64::MAX: no limit either way.
                    _ => Ok(Count(number as u64)),
                }
            }
        }
        deserializer.deserialize_any(CountVisitor)
    }
}

/// The text of each of `values`.
pub fn texts(values: Vec<Text>) -> Vec<String> {
    values.into_iter().map(|text| text.0).collect()
}

/// `map` with its values' text.
pub fn text_map(map: BTreeMap<String, Text>) -> BTreeMap<String, String> {
    map.into_iter().map(|(key, text)| (key, text.0)).collect()
}

/// The `[timeouts]` table, and the same keys in `[mounts.NAME.timeouts]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table of timeouts")]
pub struct RawTimeouts {
    pub connect: Option<String>,
    pub initialize: Option<String>,
    pub request: Option<String>,
    pub request_ceiling: Option<String>,
}

/// `[mounts.NAME.timeouts]`: the `[timeouts]` keys plus per-tool request
/// timeouts by the upstream's own tool name.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table of timeouts")]
pub struct RawMountTimeouts {
    pub connect: Option<String>,
    pub initialize: Option<String>,
    pub request: Option<String>,
    pub request_ceiling: Option<String>,
    pub tools: Option<BTreeMap<String, String>>,
}

/// The `[supervision]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table of supervision settings")]
pub struct RawSupervision {
    pub restart_backoff: Option<String>,
    pub restart_backoff_max: Option<String>,
    pub crash_loop_restarts: Option<Count>,
    pub down_retry: Option<String>,
}

/// The `[limits]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table of limits")]
pub struct RawLimits {
    pub max_sessions: Option<Count>,
    pub max_concurrent_requests: Option<Count>,
    pub max_body_size: Option<RawSize>,
    pub max_upstream_sessions: Option<Count>,
}

/// A size in bytes: a number, or a string such as `"4MiB"`.
#[derive(Debug, Deserialize)]
#[serde(
    untagged,
    expecting = "a size: a number of bytes, or text such as \"4MiB\""
)]
pub enum RawSize {
    Bytes(u64),
    Text(String),
}

/// The `[telemetry]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table of telemetry settings")]
pub struct RawTelemetry {
    pub log_format: Option<String>,
    pub log_level: Option<String>,
    pub otlp_endpoint: Option<String>,
    pub otlp_protocol: Option<String>,
    pub service_name: Option<Text>,
}

/// The `[admin]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table of admin settings")]
pub struct RawAdmin {
    pub enabled: Option<bool>,
    pub listen: Option<String>,
}
