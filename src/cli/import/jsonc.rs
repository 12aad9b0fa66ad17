//! JSON with comments, as VS Code (and Cursor, which shares its editor)
//! writes `mcp.json`: `//` and `/* */` comments and trailing commas.
//!
//! They are blanked out (replaced by spaces, newlines kept) rather than
//! removed, so serde_json's line and column in an error still point into
//! the user's file. Strict JSON passes through unchanged.

/// `text` with comments and trailing commas replaced by spaces.
pub fn strip(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out: Vec<char> = Vec::with_capacity(chars.len());
    // Index in `out` of the last comma outside a string, while only
    // whitespace and comments have followed it.
    let mut pending_comma: Option<usize> = None;
    let mut index = 0;
    while index < chars.len() {
        let c = chars[index];
        match c {
            '"' => {
                pending_comma = None;
                out.push(c);
                index += 1;
                while index < chars.len() {
                    let c = chars[index];
                    out.push(c);
                    index += 1;
                    if c == '\\' {
                        if let Some(&escaped) = chars.get(index) {
                            out.push(escaped);
                            index += 1;
                        }
                    } else if c == '"' {
                        break;
                    }
                }
            }
            '/' if chars.get(index + 1) == Some(&'/') => {
                while index < chars.len() && chars[index] != '\n' {
                    out.push(' ');
                    index += 1;
                }
            }
            '/' if chars.get(index + 1) == Some(&'*') => {
                out.extend([' ', ' ']);
                index += 2;
                while index < chars.len() {
                    if chars[index] == '*' && chars.get(index + 1) == Some(&'/') {
                        out.extend([' ', ' ']);
                        index += 2;
                        break;
                    }
                    out.push(if chars[index] == '\n' { '\n' } else { ' ' });
                    index += 1;
                }
            }
            ',' => {
                pending_comma = Some(out.len());
                out.push(c);
                index += 1;
            }
            '}' | ']' => {
                if let Some(comma) = pending_comma.take() {
                    out[comma] = ' ';
                }
                out.push(c);
                index += 1;
            }
            c if c.is_whitespace() => {
                out.push(c);
                index += 1;
            }
            c => {
                pending_comma = None;
                out.push(c);
                index += 1;
            }
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::strip;

    fn check(input: &str, expect: &str) {
        assert_eq!(strip(input), expect, "input {input:?}");
    }

    #[test]
    fn strict_json_is_unchanged() {
        let json = r#"{"a": [1, 2], "b": {"c": "x,}"}}"#;
        check(json, json);
    }

    #[test]
    fn line_comments_are_blanked() {
        check("{ // note\n\"a\": 1 }", "{        \n\"a\": 1 }");
    }

    #[test]
    fn block_comments_keep_newlines() {
        check("{ /* a\nb */ \"a\": 1 }", "{     \n     \"a\": 1 }");
    }

    #[test]
    fn comment_markers_inside_strings_stay() {
        let json = r#"{"url": "http://x/*y*/", "p": "a//b", "q": "\"//\""}"#;
        check(json, json);
    }

    #[test]
    fn trailing_commas_go() {
        check("{\"a\": [1, 2,], }", "{\"a\": [1, 2 ]  }");
        check("[1, // last\n]", "[1         \n]");
    }

    #[test]
    fn result_parses() {
        let text =
            "{\n  // servers\n  \"servers\": {\n    \"a\": {\"command\": \"x\",},\n  },\n}\n";
        let value: serde_json::Value = serde_json::from_str(&strip(text)).expect("parses");
        assert_eq!(value["servers"]["a"]["command"], "x");
    }
}
