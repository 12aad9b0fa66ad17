//! Config problems, each tied to the field path it is about.
//!
//! Loading never stops at the first problem: every check pushes onto a
//! [`Problems`] list and the caller gets all of them in one
//! [`ConfigError`], printed one per line as `source: field.path: problem`.

use std::fmt;

/// One thing wrong with the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted path of the offending field, e.g. `mounts.tiny.url`; empty for
    /// problems about the file as a whole.
    pub path: String,
    /// Lowercase, no trailing period, naming the input where it helps.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Collects problems while a config is checked.
#[derive(Debug, Default)]
pub struct Problems {
    found: Vec<Problem>,
    /// Settings whose value could not be made at all (a `${VAR}` not
    /// set): what checking the placeholder left there would say is no
    /// problem of the user's, and is not reported.
    unmade: Vec<String>,
}

impl Problems {
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        let path = path.into();
        let of_unmade = self.unmade.iter().any(|unmade| {
            path == *unmade
                || path
                    .strip_prefix(unmade.as_str())
                    .is_some_and(|rest| rest.starts_with('.'))
        });
        if of_unmade {
            return;
        }
        self.found.push(Problem {
            path,
            message: message.into(),
        });
    }

    /// The value at `path` could not be made (`message` says why): the
    /// later checks of what is left there are not reported.
    pub fn push_unmade(&mut self, path: impl Into<String>, message: impl Into<String>) {
        let path = path.into();
        self.push(path.clone(), message);
        self.unmade.push(path);
    }

    /// Whether a problem was reported about `path` or a field under it.
    pub fn reported_at(&self, path: &str) -> bool {
        self.found.iter().any(|problem| {
            problem
                .path
                .strip_prefix(path)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
        })
    }

    pub fn len(&self) -> usize {
        self.found.len()
    }

    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    pub fn into_error(self, source: impl Into<String>) -> ConfigError {
        ConfigError {
            origin: source.into(),
            problems: self.found,
        }
    }
}

/// A config that cannot be used, with every problem found in it.
#[derive(Debug, Clone, thiserror::Error)]
pub struct ConfigError {
    /// Where the config came from: a file path, or `embedded default`.
    pub origin: String,
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, problem) in self.problems.iter().enumerate() {
            if index > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{}: {}", self.origin, problem)?;
        }
        Ok(())
    }
}

/// A serde message with the value it quotes left out, its kind kept:
/// `invalid type: string "--token s3cret", expected a sequence` becomes
/// `invalid type: text, expected a sequence`. Values are never echoed:
/// `${VAR}` may have put a secret in any of them.
pub fn without_the_value(message: &str) -> String {
    for prefix in ["invalid type: ", "invalid value: "] {
        let Some(rest) = message.strip_prefix(prefix) else {
            continue;
        };
        // The value may itself hold ", expected ": the last one is serde's.
        let Some(at) = rest.rfind(", expected ") else {
            continue;
        };
        let (unexpected, expected) = rest.split_at(at);
        let kind = [
            ("string ", "text"),
            ("integer ", "a number"),
            ("floating point ", "a number"),
            ("boolean ", "true or false"),
            ("character ", "a character"),
        ]
        .into_iter()
        .find_map(|(quoting, kind)| unexpected.starts_with(quoting).then_some(kind))
        // The rest (`sequence`, `map`, `null`, …) quote nothing.
        .unwrap_or(unexpected);
        return format!("{prefix}{kind}{expected}");
    }
    message.to_owned()
}

#[cfg(test)]
mod tests {
    use super::without_the_value;

    #[test]
    fn serde_messages_keep_the_kind_not_the_value() {
        for (message, expected) in [
            (
                r#"invalid type: string "a, expected b", expected a sequence"#,
                "invalid type: text, expected a sequence",
            ),
            (
                "invalid type: integer `1234`, expected a string",
                "invalid type: a number, expected a string",
            ),
            (
                "invalid type: sequence, expected a string",
                "invalid type: sequence, expected a string",
            ),
            (
                "unknown variant `per-session`, expected `shared` or `per_session`",
                "unknown variant `per-session`, expected `shared` or `per_session`",
            ),
        ] {
            assert_eq!(without_the_value(message), expected);
        }
    }
}
