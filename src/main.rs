//! The `junction` binary: parses the command line, loads the config and runs
//! the gateway (or the demo MCP server). All behaviour lives in the library;
//! this file only wires it to the process: logging, signals, exit codes.

use std::{net::SocketAddr, path::PathBuf, process::ExitCode};

use anyhow::Context;
use clap::{Parser, Subcommand};
use junction::{
    config::{self, ConfigSource},
    gateway::Gateway,
};

/// Exit code for an invalid config or command line.
const EXIT_CONFIG: u8 = 2;

#[derive(Parser)]
#[command(
    name = "junction",
    version,
    about = "An MCP gateway: many upstream MCP servers behind one Streamable HTTP endpoint",
    after_help = "Examples:\n  junction                         serve ./junction.toml, else the embedded default\n  junction --config gateway.yaml --listen 0.0.0.0:8080\n  JUNCTION_SERVER__LISTEN=127.0.0.1:9000 junction --config junction.toml"
)]
struct Cli {
    /// Config file (.toml, .yaml, .yml or .json). Default: ./junction.toml if
    /// present, else the embedded default config.
    #[arg(long, global = true, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Listen address, overriding `server.listen` (port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the gateway (the default).
    Serve,
    /// Run Junction's small demo MCP server on stdin/stdout.
    DemoServer {
        /// Serve Streamable HTTP at http://ADDR/mcp instead of stdio.
        #[arg(long, value_name = "ADDR")]
        http: Option<SocketAddr>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo server is a child of the gateway, whose log its stderr joins:
    // keep it quiet unless asked. rmcp's own info lines are per-message noise.
    let default_filter = match cli.command {
        Some(Command::DemoServer { .. }) => "warn",
        _ => "info,rmcp=warn",
    };
    init_logging(default_filter);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("junction: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Some(Command::DemoServer { http: None }) => runtime.block_on(junction::demo::run_stdio()),
        Some(Command::DemoServer { http: Some(addr) }) => runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot bind {addr}"))?;
            eprintln!(
                "junction demo-server listening on {}",
                listener.local_addr()?
            );
            junction::demo::run_http(listener).await
        }),
        Some(Command::Serve) | None => {
            let source = ConfigSource::resolve(cli.config);
            let mut config = match config::load(&source) {
                Ok(config) => config,
                Err(error) => {
                    eprintln!("junction: invalid config\n{error}");
                    return ExitCode::from(EXIT_CONFIG);
                }
            };
            if let Some(listen) = cli.listen {
                config.server.listen = listen;
            }
            tracing::info!(config = %source.describe(), mounts = config.mounts.len(), "config loaded");
            runtime.block_on(serve(config))
        }
    };
    // Do not wait for stray blocking tasks (stdin readers) at exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("junction: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: config::Config) -> anyhow::Result<()> {
    let listen = config.server.listen;
    let path = config.server.path.clone();
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let bound = listener.local_addr()?;
    let gateway = Gateway::new(config);
    gateway.start();
    // Printed, not logged: scripts and tests read this line whatever the
    // log level.
    eprintln!("junction listening on {bound} (MCP endpoint http://{bound}{path})");
    junction::http::serve(listener, gateway.clone(), shutdown_signal()).await?;
    tracing::info!("shutting down");
    gateway.shutdown().await;
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(signal) => signal,
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for SIGTERM");
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}

/// Human-readable logs on stderr (stdout stays free for the stdio demo
/// server's protocol), level from `RUST_LOG`, else `default_filter`.
fn init_logging(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}
