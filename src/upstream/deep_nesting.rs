//! Answers nested too deep for rmcp to read.
//!
//! serde_json stops at 128 levels of nesting (its guard against a stack
//! overflow), so rmcp skips a stdio line or legacy SSE event nested that
//! deep as unreadable, and the request it answered waited out its whole
//! timeout; discovery stalled the same way on such a list. Such a line is
//! told apart cheaply: it has at least [`DEEP`] brackets, which a `memchr`
//! scan counts for every line and stops at; only then is the nesting
//! measured (strings skipped by `memchr`, stopping where it is that
//! deep), and only a line nested at least that deep is read as rmcp reads
//! it, to be sure it fails for that reason. Its id is read without
//! descending into the rest (serde's `IgnoredAny` walks a value without
//! recursion), so the request can be failed at once.

use rmcp::model::ServerJsonRpcMessage;
use serde::{de::IgnoredAny, Deserialize, Deserializer};
use serde_json::Value;

/// How deep a line must nest before it is read to see whether rmcp can:
/// below serde_json's limit of 128, so that no line rmcp refuses for its
/// depth is missed, whatever depth rmcp's own types add.
const DEEP: usize = 100;

/// If `line` (a whole JSON message) is an answer that rmcp cannot read
/// because it nests too deep, the id it answers.
pub fn too_deep_answer_id(line: &[u8]) -> Option<Value> {
    if memchr::memchr2_iter(b'{', b'[', line).take(DEEP).count() < DEEP
        || !nests_at_least(line, DEEP)
    {
        return None;
    }
    let refused = serde_json::from_slice::<ServerJsonRpcMessage>(line).err()?;
    if !refused.to_string().starts_with("recursion limit exceeded") {
        return None;
    }
    let envelope: Envelope = serde_json::from_slice(line).ok()?;
    let id = envelope.id?;
    ((envelope.result.0 || envelope.error.0) && (id.is_string() || id.is_number())).then_some(id)
}

/// Whether objects and arrays nest `deep` levels or more anywhere in
/// `line`, brackets inside strings aside. Strings, most of a large
/// message (text, base64), are skipped by `memchr`; the scan stops at the
/// first place that deep.
fn nests_at_least(line: &[u8], deep: usize) -> bool {
    let mut depth = 0usize;
    let mut at = 0;
    while at < line.len() {
        match line[at] {
            b'"' => {
                // To the closing quote: past each escape's next byte.
                at += 1;
                loop {
                    let Some(rest) = line.get(at..) else {
                        return false;
                    };
                    match memchr::memchr2(b'"', b'\\', rest) {
                        None => return false,
                        Some(found) if line[at + found] == b'\\' => at += found + 2,
                        Some(found) => {
                            at += found;
                            break;
                        }
                    }
                }
            }
            b'{' | b'[' => {
                depth += 1;
                if depth >= deep {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        at += 1;
    }
    false
}

/// A message's top level: what it answers, and whether it is an answer,
/// its `result` and `error` walked over, not read.
#[derive(Deserialize)]
struct Envelope {
    id: Option<Value>,
    #[serde(default)]
    result: Present,
    #[serde(default)]
    error: Present,
}

/// Whether a field is there at all (`null` included).
#[derive(Default)]
struct Present(bool);

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(deserializer).map(|_| Present(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    fn answer(id: &str, depth: usize) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[],"structuredContent":{{"v":{}}}}}}}"#,
            nested(depth)
        )
    }

    /// Exactly the answers rmcp cannot read for their depth are found,
    /// with their id; brackets in strings do not count.
    #[test]
    fn an_answer_rmcp_refuses_for_its_depth_is_found_with_its_id() {
        let readable = (1..200)
            .rev()
            .find(|&depth| {
                serde_json::from_str::<ServerJsonRpcMessage>(&answer("1", depth)).is_ok()
            })
            .expect("rmcp reads a shallow answer");
        assert!(
            readable + 3 >= DEEP,
            "DEEP ({DEEP}) is below rmcp's limit ({readable})"
        );
        assert_eq!(too_deep_answer_id(answer("1", readable).as_bytes()), None);
        assert_eq!(
            too_deep_answer_id(answer("7", readable + 1).as_bytes()),
            Some(Value::from(7))
        );
        assert_eq!(
            too_deep_answer_id(answer(r#""a""#, 5000).as_bytes()),
            Some(Value::from("a"))
        );
        let error = format!(
            r#"{{"jsonrpc":"2.0","id":2,"error":{{"code":1,"message":"m","data":{}}}}}"#,
            nested(300)
        );
        assert_eq!(too_deep_answer_id(error.as_bytes()), Some(Value::from(2)));
        let in_a_string = format!(
            r#"{{"jsonrpc":"2.0","id":3,"result":{{"content":[{{"type":"text","text":"{}"}}]}}}}"#,
            "[{\\\"".repeat(300)
        );
        assert!(serde_json::from_str::<ServerJsonRpcMessage>(&in_a_string).is_ok());
        assert_eq!(too_deep_answer_id(in_a_string.as_bytes()), None);
    }

    /// Brackets in strings, escaped quotes and backslashes, and a line
    /// cut inside a string or an escape are measured right.
    #[test]
    fn nesting_is_measured_outside_strings() {
        assert!(nests_at_least(b"[[[1]]]", 3));
        assert!(!nests_at_least(b"[[[1]]]", 4));
        assert!(!nests_at_least(br#"[["[[[[", "\"[[[["]]"#, 3));
        assert!(nests_at_least(br#"["\\", [[1]]]"#, 3));
        assert!(!nests_at_least(br#"[[1]] [[1]]"#, 3));
        assert!(!nests_at_least(b"[[\"cut \\", 3));
        assert!(!nests_at_least(br#"[["cut"#, 3));
        assert!(!nests_at_least(b"", 1));
    }

    /// A deep message that answers nothing (a notification, a request of
    /// the server's) has no id to fail.
    #[test]
    fn a_deep_message_that_is_no_answer_has_no_id() {
        let notification = format!(
            r#"{{"jsonrpc":"2.0","method":"notifications/message","params":{{"level":"info","data":{}}}}}"#,
            nested(300)
        );
        assert_eq!(too_deep_answer_id(notification.as_bytes()), None);
        let request = format!(
            r#"{{"jsonrpc":"2.0","id":4,"method":"sampling/createMessage","params":{}}}"#,
            nested(300)
        );
        assert_eq!(too_deep_answer_id(request.as_bytes()), None);
    }
}
