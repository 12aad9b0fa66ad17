//! The subcommands that help set Junction up, next to `serve`: `check`
//! (validate a config, optionally start every upstream once), `tools` (the
//! merged tool list clients will see) and `import` (translate another MCP
//! client's server list into a Junction config).
//!
//! Each command returns an [`Outcome`] that the binary turns into its exit
//! code; the command line itself (clap) is wired in `main.rs`, with the help
//! examples kept here next to the commands they describe. Nothing here
//! serves HTTP.

pub mod check;
pub mod import;
pub mod probe;
mod secret_args;
pub mod tools;
mod url_text;

use std::io::Write;

/// How a command ended, as the process exit code scripts test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything asked for worked (exit 0).
    Ok,
    /// The input was usable but something in it was not: an upstream failed
    /// to start, or part of an imported file could not be translated (exit 1).
    Partial,
    /// The input itself is invalid or unreadable (exit 2, as for `serve`
    /// with an invalid config).
    Invalid,
    /// The result could not be written to stdout (exit 3): whatever the
    /// command found, its output is lost, e.g. `junction import x.json >
    /// junction.toml` on a full disk.
    Unwritten,
    /// Stopped by SIGINT or SIGTERM before the end, the upstreams it had
    /// started stopped with it (exit 130, as a shell reports Ctrl-C).
    Interrupted,
}

/// Runs a command that starts upstreams until it ends or SIGINT/SIGTERM
/// comes. Dropped then, it takes its upstreams with it (each stdio
/// child's process group is killed with its session); the signal's
/// default action would end the process and leave children that do not
/// read their stdin (a package still downloading) running.
pub async fn until_interrupted(command: impl std::future::Future<Output = Outcome>) -> Outcome {
    let interrupted = crate::signals::shutdown_signal();
    tokio::select! {
        outcome = command => outcome,
        () = interrupted => {
            crate::say_on_stderr!("junction: interrupted; upstreams stopped");
            Outcome::Interrupted
        }
    }
}

impl Outcome {
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Ok => 0,
            Outcome::Partial => 1,
            Outcome::Invalid => 2,
            Outcome::Unwritten => 3,
            Outcome::Interrupted => 130,
        }
    }
}

/// Writes a command's result to stdout. A closed pipe (`junction tools |
/// head`) is not a failure: the reader has what it wanted. Any other write
/// error is ([`Outcome::Unwritten`], said on stderr): the command must not
/// exit as if its output had been written.
#[must_use = "a lost output must change the exit code"]
fn print_stdout(text: &str) -> Result<(), Outcome> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(error) => {
            crate::say_on_stderr!("junction: cannot write the output: {error}");
            Err(Outcome::Unwritten)
        }
    }
}

/// Lays `rows` out in left-aligned columns two spaces apart, one line each;
/// the last column is not padded.
fn columns(rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (index, cell) in row.iter().enumerate() {
            let width = cell.chars().count();
            match widths.get_mut(index) {
                Some(current) => *current = (*current).max(width),
                None => widths.push(width),
            }
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (index, cell) in row.iter().enumerate() {
            if index + 1 < row.len() {
                let pad = widths[index] - cell.chars().count();
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            } else {
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
