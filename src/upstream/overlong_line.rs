//! The id of a stdio answer too long to be read, found as it streams past.
//!
//! rmcp drops a line of a stdio server longer than its limit (16 MiB),
//! logging only that it did; when that line answered one of the gateway's
//! requests, the request waited out its whole timeout and failed as if
//! the server were silent. The line is too long to keep, and the id of
//! an answer may come first (rmcp, the Python SDK) or last (the
//! TypeScript SDK writes `result` first). So the line is scanned as it
//! passes, one byte at a time and in constant memory, following only
//! strings and nesting: the top-level `id` is kept, and whether the
//! message has a `result` or an `error` (an answer) or a `method` (not
//! one).

/// A scan of one line; fed its bytes in order, then asked
/// [`Self::answered_id`].
#[derive(Default)]
pub struct OverlongLine {
    depth: usize,
    /// The first byte that is not white space, once seen.
    opened_with: Option<u8>,
    in_string: bool,
    escaped: bool,
    /// The current string is a member name of the top-level object.
    in_name: bool,
    /// A top-level member's name is expected next (after `{` or `,`).
    name_next: bool,
    /// The name being read (only short ones matter).
    name: Vec<u8>,
    /// The member whose value is being read, at the top level.
    member: Member,
    /// The top-level `id`'s value as written, while it is short.
    id: Vec<u8>,
    id_unusable: bool,
    answers: bool,
    has_method: bool,
}

#[derive(Default, Clone, Copy, PartialEq)]
enum Member {
    #[default]
    Other,
    Id,
}

/// The longest member name looked at (`"result"`, `"method"`).
const NAME_KEPT: usize = 8;
/// The longest `id` kept: ids are numbers or short strings.
const ID_KEPT: usize = 256;

impl OverlongLine {
    pub fn feed(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.step(byte);
        }
    }

    fn step(&mut self, byte: u8) {
        if self.opened_with.is_none() {
            if byte.is_ascii_whitespace() {
                return;
            }
            self.opened_with = Some(byte);
        }
        let in_id = self.depth == 1 && self.member == Member::Id;
        if self.in_string {
            if self.in_name {
                if self.escaped || byte != b'"' {
                    if self.name.len() <= NAME_KEPT {
                        self.name.push(byte);
                    }
                } else {
                    self.named();
                }
            } else if in_id {
                self.keep_id(byte);
            }
            match (self.escaped, byte) {
                (true, _) => self.escaped = false,
                (false, b'\\') => self.escaped = true,
                (false, b'"') => self.in_string = false,
                _ => {}
            }
            return;
        }
        match byte {
            b'"' => {
                self.in_string = true;
                self.in_name = self.depth == 1 && self.name_next;
                if self.in_name {
                    self.name.clear();
                } else if in_id {
                    self.keep_id(byte);
                }
            }
            b'{' | b'[' => {
                if in_id {
                    self.id_unusable = true;
                }
                self.depth += 1;
                self.name_next = self.depth == 1 && byte == b'{';
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            b':' if self.depth == 1 => self.name_next = false,
            b',' if self.depth == 1 => {
                self.name_next = true;
                self.member = Member::Other;
            }
            _ if byte.is_ascii_whitespace() => {}
            _ if in_id => self.keep_id(byte),
            _ => {}
        }
    }

    /// A top-level member's name has been read.
    fn named(&mut self) {
        self.in_name = false;
        self.member = Member::Other;
        match self.name.as_slice() {
            b"id" => {
                // A second `id` (serde keeps the last): not both at once.
                self.member = Member::Id;
                self.id.clear();
                self.id_unusable = false;
            }
            b"result" | b"error" => self.answers = true,
            b"method" => self.has_method = true,
            _ => {}
        }
    }

    fn keep_id(&mut self, byte: u8) {
        if self.id.len() < ID_KEPT {
            self.id.push(byte);
        } else {
            self.id_unusable = true;
        }
    }

    /// The id of the answer the line was, if it reads as one: an object
    /// with a `result` or an `error`, no `method`, and a number or string
    /// `id`.
    pub fn answered_id(&self) -> Option<serde_json::Value> {
        if self.opened_with != Some(b'{') || !self.answers || self.has_method || self.id_unusable {
            return None;
        }
        let id: serde_json::Value = serde_json::from_slice(&self.id).ok()?;
        (id.is_string() || id.is_number()).then_some(id)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn scanned(line: &str) -> Option<serde_json::Value> {
        let mut scan = OverlongLine::default();
        // In pieces, as a pipe hands them over.
        for piece in line.as_bytes().chunks(3) {
            scan.feed(piece);
        }
        scan.answered_id()
    }

    #[test]
    fn the_top_level_id_of_an_answer_is_found_first_or_last() {
        let big = "x".repeat(1000);
        assert_eq!(
            scanned(&format!(
                r#"{{"jsonrpc":"2.0","id":7,"result":{{"text":"{big}"}}}}"#
            )),
            Some(json!(7))
        );
        // The TypeScript SDK's order, an id nested in the result before it,
        // and strings holding what would be syntax.
        assert_eq!(
            scanned(&format!(
                r#"{{"result":{{"id":1,"content":[{{"text":"\"id\":2, }} {big}"}}]}}, "jsonrpc":"2.0" , "id" : "a\"b" }}"#
            )),
            Some(json!("a\"b"))
        );
        assert_eq!(
            scanned(r#" {"jsonrpc":"2.0","error":{"code":1,"message":"m"},"id":-3}"#),
            Some(json!(-3))
        );
    }

    #[test]
    fn what_is_no_answer_has_no_id() {
        assert_eq!(
            scanned(r#"{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{}}"#),
            None
        );
        assert_eq!(
            scanned(r#"{"jsonrpc":"2.0","method":"notifications/message"}"#),
            None
        );
        assert_eq!(
            scanned(r#"{"jsonrpc":"2.0","id":{"a":1},"result":{}}"#),
            None
        );
        assert_eq!(scanned(r#"{"jsonrpc":"2.0","id":null,"result":{}}"#), None);
        assert_eq!(scanned(r#"[{"jsonrpc":"2.0","id":1,"result":{}}]"#), None);
        assert_eq!(scanned("Server started"), None);
        assert_eq!(
            scanned(r#"{"id":7,"result":{},"id":8}"#),
            Some(json!(8)),
            "the last of two, as serde reads it"
        );
        let long_id = format!(r#"{{"id":"{}","result":{{}}}}"#, "i".repeat(300));
        assert_eq!(scanned(&long_id), None);
    }
}
