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
pub struct Problems(Vec<Problem>);

impl Problems {
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn into_error(self, source: impl Into<String>) -> ConfigError {
        ConfigError {
            origin: source.into(),
            problems: self.0,
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
