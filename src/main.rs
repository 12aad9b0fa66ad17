//! The `junction` binary: parses the command line, loads the config and runs
//! the gateway, the demo MCP server, or one of the setup commands in
//! `junction::cli` (`check`, `tools`, `import`). All behaviour lives in the
//! library; this file only wires it to the process: logging, signals, exit
//! codes.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context;
use clap::{Parser, Subcommand};
use junction::{
    cli::{self, probe::DEFAULT_DISCOVERY_WAIT, Outcome},
    config::{self, ConfigSource},
    gateway::Gateway,
    telemetry::{self, LogFormat},
};

/// Exit code for an invalid config or command line.
const EXIT_CONFIG: u8 = 2;

#[derive(Parser)]
#[command(
    name = "junction",
    version,
    about = "An MCP gateway: many upstream MCP servers behind one Streamable HTTP endpoint",
    after_help = "Examples:\n  junction                         serve ./junction.toml, else the embedded default\n  junction --config gateway.yaml --listen 0.0.0.0:8080\n  JUNCTION_SERVER__LISTEN=127.0.0.1:9000 junction --config junction.toml\n  junction check --config junction.toml --connect\n  junction import ~/.cursor/mcp.json > junction.toml"
)]
struct Cli {
    /// Config file (.toml, .yaml, .yml or .json). Default: ./junction.toml if
    /// present, else the embedded default config.
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Listen address, overriding `server.listen` (port 0 picks a free port).
    #[arg(long, global = true, value_name = "ADDR", value_parser = |text: &str| junction::config::listen_address(text, 8080))]
    listen: Option<SocketAddr>,
    /// Log line format on stderr, overriding `telemetry.log_format`.
    #[arg(long, global = true, value_name = "FORMAT", value_parser = ["text", "json"])]
    log_format: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the gateway (the default).
    #[command(
        after_help = "Examples:\n  junction serve --config junction.toml --listen 0.0.0.0:8080\n  junction serve --log-format json\n\nExit codes: 0 stopped by SIGTERM or Ctrl-C; 1 could not serve (e.g. the\naddress is in use); 2 invalid config or command line; 130 or 143 stopped\nat once by a second Ctrl-C or SIGTERM during the graceful stop."
    )]
    Serve,
    /// Run Junction's small demo MCP server on stdin/stdout.
    #[command(
        after_help = "Examples:\n  junction demo-server                        on stdin/stdout, as a mount runs it\n  junction demo-server --http 127.0.0.1:9000  Streamable HTTP at /mcp\n\nExit codes: 0 its client closed stdin; 1 it could not serve; 2 invalid\ncommand line."
    )]
    DemoServer {
        /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio.
        #[arg(long, value_name = "ADDR", value_parser = |text: &str| junction::config::listen_address(text, 9000))]
        http: Option<SocketAddr>,
        /// With --http: answer an unknown session id with 400 and a
        /// JSON-RPC error, as many TypeScript servers do, instead of 404
        /// (for testing clients against such servers).
        #[arg(long, requires = "http")]
        unknown_session_400: bool,
    },
    /// Validate the config and list its mounts (--connect: start each upstream once)
    ///
    /// Loads the config like `serve` and prints every problem with its field
    /// path, or a summary of the mounts. With --connect, also starts every
    /// upstream, discovers it, prints what it offers under the names clients
    /// will see, and stops it again.
    #[command(after_help = cli::check::EXAMPLES)]
    Check {
        /// Also start each upstream, discover it, print its tool, prompt and
        /// resource counts and the names clients will see (flagging tool
        /// names many clients reject), then stop it.
        #[arg(long)]
        connect: bool,
        /// How long --connect waits for every upstream's first discovery
        /// (e.g. 30s, 2m). Default: 30s.
        #[arg(long, value_name = "DURATION", value_parser = cli::probe::parse_wait, requires = "connect")]
        timeout: Option<Duration>,
    },
    /// Print the merged tool list clients will see
    ///
    /// Starts every upstream once (no HTTP is served), waits for discovery,
    /// prints the qualified tool names with their descriptions, then stops
    /// every upstream.
    #[command(after_help = cli::tools::EXAMPLES)]
    Tools {
        /// Print the tool objects a client's tools/list receives, as a JSON
        /// array.
        #[arg(long)]
        json: bool,
        /// How long to wait for every upstream's first discovery (e.g. 30s,
        /// 2m). Default: 30s.
        #[arg(long, value_name = "DURATION", value_parser = cli::probe::parse_wait)]
        timeout: Option<Duration>,
    },
    /// Translate a Claude Desktop, Claude Code, Cursor or VS Code MCP config into Junction TOML
    #[command(after_help = cli::import::EXAMPLES)]
    Import {
        /// The client's config file (claude_desktop_config.json, .mcp.json,
        /// mcp.json, .vscode/mcp.json).
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo server is a child of the gateway, whose log its stderr joins:
    // keep it quiet unless asked. rmcp's own info lines are per-message noise.
    let default_filter = match cli.command {
        Some(Command::DemoServer { .. }) => "warn",
        // These commands print their own report of every mount; the
        // gateway's per-mount log lines would repeat it. An upstream's own
        // stderr stays visible: it usually says why a mount failed.
        Some(Command::Check { .. } | Command::Tools { .. } | Command::Import { .. }) => {
            "error,rmcp=off,junction::upstream_stderr=info"
        }
        _ => "info,rmcp=warn",
    };
    // Both flags are global (so `junction serve --listen ADDR` works); a
    // command they do not apply to refuses them rather than ignoring them.
    let misplaced = match &cli.command {
        Some(Command::Tools { .. } | Command::Import { .. }) if cli.listen.is_some() => {
            Some("--listen only applies to serve and check")
        }
        Some(Command::DemoServer { .. }) if cli.listen.is_some() => {
            Some("demo-server takes --http ADDR, not --listen")
        }
        Some(Command::DemoServer { .. }) if cli.config.is_some() => {
            Some("demo-server reads no config; --config does not apply")
        }
        _ => None,
    };
    if let Some(message) = misplaced {
        junction::say_on_stderr!("junction: {message}");
        return ExitCode::from(EXIT_CONFIG);
    }
    // Over `server.listen` in every load (start, check, reloads), so that
    // it is validated in its place.
    if let Some(listen) = cli.listen {
        config::override_listen(listen);
    }
    let log_format = cli.log_format.as_deref().map(|format| match format {
        "json" => LogFormat::Json,
        _ => LogFormat::Text,
    });
    let serving = matches!(cli.command, Some(Command::Serve) | None);
    if !serving {
        telemetry::init(log_format.unwrap_or_default(), default_filter, None);
    } else if let Some(format) = log_format {
        // What goes wrong before the log starts is said in its format.
        telemetry::say_as(format);
    }
    // tokio reads it too when not told, and panics on a value it cannot
    // use (untrimmed: `4\n` from an env file): read here, and told.
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = std::env::var_os("TOKIO_WORKER_THREADS") {
        match threads
            .to_str()
            .and_then(|threads| threads.trim().parse::<usize>().ok())
            .filter(|threads| *threads > 0)
        {
            Some(threads) => {
                builder.worker_threads(threads);
            }
            None => {
                telemetry::say(
                    "ERROR",
                    &format!("junction: TOKIO_WORKER_THREADS={threads:?} is not a number of threads (a whole number from 1); unset it for one per CPU"),
                );
                return ExitCode::from(EXIT_CONFIG);
            }
        }
    }
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            telemetry::say(
                "ERROR",
                &format!("junction: cannot start the async runtime: {error}"),
            );
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Some(Command::DemoServer { http: None, .. }) => runtime
            .block_on(junction::demo::run_stdio())
            .map(|()| Outcome::Ok),
        Some(Command::DemoServer {
            http: Some(addr),
            unknown_session_400,
        }) => runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot bind {addr}"))?;
            junction::say_on_stderr!(
                "junction demo-server listening on {}",
                listener.local_addr()?
            );
            junction::demo::run_http(listener, unknown_session_400).await?;
            Ok(Outcome::Ok)
        }),
        Some(Command::Check { connect, timeout }) => {
            Ok(runtime.block_on(cli::until_interrupted(cli::check::run(
                ConfigSource::resolve(cli.config),
                cli.listen,
                connect,
                timeout.unwrap_or(DEFAULT_DISCOVERY_WAIT),
            ))))
        }
        Some(Command::Tools { json, timeout }) => {
            Ok(runtime.block_on(cli::until_interrupted(cli::tools::run(
                ConfigSource::resolve(cli.config),
                json,
                timeout.unwrap_or(DEFAULT_DISCOVERY_WAIT),
            ))))
        }
        Some(Command::Import { file }) => {
            if cli.config.is_some() {
                junction::say_on_stderr!("junction: import reads FILE; --config does not apply");
                return ExitCode::from(EXIT_CONFIG);
            }
            Ok(cli::import::run(&file))
        }
        Some(Command::Serve) | None => {
            let source = ConfigSource::resolve(cli.config);
            // Before loading: an edit from here on differs from it, and
            // the watcher applies it once started.
            let loaded = source.snapshot();
            let mut config = match config::load(&source) {
                Ok(config) => config,
                Err(error) => {
                    say_invalid_config(
                        &error,
                        log_format.or_else(|| config::log_format_asked(&source)),
                    );
                    return ExitCode::from(EXIT_CONFIG);
                }
            };
            let overrides = move |config: &mut config::Config| {
                if let Some(listen) = cli.listen {
                    config.server.listen = listen;
                }
            };
            overrides(&mut config);
            // Inside the runtime: the trace exporter may need it.
            let telemetry = runtime
                .block_on(async { telemetry::init_from_config(&config.telemetry, log_format) });
            tracing::info!(config = %source.describe(), mounts = config.mounts.len(), "config loaded");
            for (setting, variable) in &config.overridden {
                tracing::info!(%setting, %variable, "the environment overrides this setting of the config file");
            }
            let served = runtime
                .block_on(serve(config, source, loaded, overrides))
                .map(|()| Outcome::Ok);
            telemetry.shutdown();
            served
        }
    };
    // Do not wait for stray blocking tasks (stdin readers) at exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        Err(error) => {
            junction::telemetry::say("ERROR", &format!("junction: {error:#}"));
            ExitCode::FAILURE
        }
    }
}

/// Reports a config the gateway cannot start with: as plain lines, or,
/// when the config or `--log-format` asks for JSON logs, one JSON line per
/// problem (a log pipeline reading JSON lines gets the reason it failed).
fn say_invalid_config(error: &config::ConfigError, format: Option<LogFormat>) {
    if format != Some(LogFormat::Json) {
        junction::say_on_stderr!("junction: invalid config\n{error}");
        return;
    }
    telemetry::say_as(LogFormat::Json);
    for problem in &error.problems {
        telemetry::say(
            "ERROR",
            &format!("junction: invalid config: {}: {problem}", error.origin),
        );
    }
}

async fn serve(
    config: config::Config,
    source: ConfigSource,
    loaded: Option<Vec<u8>>,
    overrides: impl Fn(&mut config::Config) + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let listen = config.server.listen;
    let path = config.server.path.clone();
    let sse_path = config.server.sse_path.clone();
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let bound = listener.local_addr()?;
    let admin = junction::http::bind_admin(&config).await?;
    // Caught from here on, before any child starts.
    let shutdown = junction::signals::shutdown_signal();
    let gateway = Gateway::new(config);
    gateway.start();
    // Printed, not logged: scripts and tests read this line whatever the
    // log level.
    let older_transport = sse_path
        .map(|sse_path| format!("; HTTP+SSE at http://{bound}{sse_path}"))
        .unwrap_or_default();
    junction::telemetry::say(
        "INFO",
        &format!(
            "junction listening on {bound} (MCP endpoint http://{bound}{path}{older_transport})"
        ),
    );
    let stop_watching = tokio_util::sync::CancellationToken::new();
    let watcher = tokio::spawn(junction::gateway::watch::watch(
        gateway.clone(),
        source,
        loaded,
        overrides,
        stop_watching.clone(),
    ));
    // A reload once draining has begun would start new mounts' processes
    // only to stop them: the watcher stops with the signal.
    let shutdown = {
        let stop_watching = stop_watching.clone();
        async move {
            shutdown.await;
            stop_watching.cancel();
        }
    };
    let served = junction::http::serve(
        listener,
        admin,
        gateway.clone(),
        shutdown,
        junction::http::lanes::count(),
    )
    .await;
    let lanes = match served {
        Ok(lanes) => lanes,
        Err(error) => {
            // What started is stopped, not left to the runtime's drop.
            stop_watching.cancel();
            let _ = watcher.await;
            gateway.shutdown().await;
            kill_leftovers().await;
            return Err(error.into());
        }
    };
    tracing::info!("shutting down");
    stop_watching.cancel();
    let _ = watcher.await;
    gateway.shutdown().await;
    // Only now: the sessions just shut down ran on the lanes.
    lanes.close().await;
    kill_leftovers().await;
    Ok(())
}

/// Kills what any upstream left running outside its process group and a
/// close cut short at shutdown did not get to (see
/// `upstream::kill_every_tagged`): no child of the gateway outlives it.
async fn kill_leftovers() {
    let killed = tokio::task::spawn_blocking(junction::upstream::kill_every_tagged).await;
    if let Ok(killed @ 1..) = killed {
        tracing::info!(count = killed, "killed processes upstreams left running");
    }
}
