//! `sluice`: run the event router locally (`serve`), and use any Sluice from the command
//! line (topics, subs, groups, publish, tail, receive, dlq: `cli/`). Load tests are
//! `sluice-bench` (crates/bench).

mod cli;

use std::io::IsTerminal;
use std::net::SocketAddr;

use clap::{Parser, Subcommand};
use sluice_runtime::Config;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(name = "sluice", version, about = "Serverless event router: one HTTP publish, a replayable log")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    connection: cli::Connection,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API on the embedded backend (local files + SQLite).
    Serve {
        /// Address to listen on; loopback unless you say otherwise.
        #[arg(long, env = "SLUICE_ADDR", default_value = "127.0.0.1:8080")]
        addr: SocketAddr,
        #[command(flatten)]
        config: Config,
    },
    /// Print the OpenAPI 3.1 document of the v1 API (what `GET /openapi.json` answers).
    #[command(after_help = "Example:\n  sluice openapi > docs/openapi.json")]
    Openapi,
    #[command(flatten)]
    Client(cli::Verb),
}

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    limit_malloc_arenas();
    tokio::runtime::Runtime::new()?.block_on(run())
}

/// glibc gives each thread that allocates under contention a heap arena of its own, up to
/// 8 per core, and memory freed in one arena never serves another. The blocking pool's
/// many short-lived threads (file and SQLite work) spread the server's buffers over all
/// of them: a batched publish then a replay peaked at 228–240 MiB of RSS with 16 arenas,
/// 159–170 MiB with 2, at the same rates (docs/PERFORMANCE.md). Called before any thread.
/// A `MALLOC_ARENA_MAX` in the environment (glibc reads it itself) is left to rule.
#[allow(unsafe_code)] // The one unsafe call of the workspace (every other crate forbids it).
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; no other thread exists yet.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        // Colours only for a terminal: a log file or journald gets plain text, and each
        // request's span (its fields formatted when it opens) costs a third as much.
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { addr, config } => serve(addr, config).await,
        Command::Openapi => {
            use std::io::Write;
            // As the committed docs/openapi.json has it; a closed pipe (`| head`) is no error.
            let _ = std::io::stdout().write_all(sluice_api::openapi_json().as_bytes());
            Ok(())
        }
        Command::Client(verb) => {
            if let Err(error) = cli::run(verb, &cli.connection).await {
                eprintln!("{}", cli::describe_error(&error));
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

async fn serve(addr: SocketAddr, config: Config) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tracing::info!(addr = %local, data_dir = %config.data_dir.display(), "sluice listening");
    // A plain line for people and for tests that start the server on port 0.
    println!("listening on http://{local}");
    sluice_runtime::serve(listener, &config, shutdown()).await?;
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM; in-flight requests then finish before the process exits.
async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
