//! `sluice`: run the event router locally (`serve`). Load tests are `sluice-bench`
//! (crates/bench).

use std::net::SocketAddr;

use clap::{Parser, Subcommand};
use sluice_runtime::Config;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(name = "sluice", version, about = "Serverless event router: one HTTP publish, a replayable log")]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    match Cli::parse().command {
        Command::Serve { addr, config } => serve(addr, config).await,
    }
}

async fn serve(addr: SocketAddr, config: Config) -> Result<(), Box<dyn std::error::Error>> {
    let log = sluice_runtime::open_embedded(&config)?;
    tokio::spawn(sluice_runtime::janitor(&config, &log)?.run_forever(config.janitor_interval_ms));
    let app = sluice_runtime::App::new(log, config.groups_config());
    // Push subscriptions are delivered by this process, with the queues the API serves.
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let dispatcher = sluice_runtime::dispatcher(&config, app.queues.clone()).await?;
    let pushing = tokio::spawn(async move { dispatcher.run(stopping).await });
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    tracing::info!(addr = %local, data_dir = %config.data_dir.display(), "sluice listening");
    // A plain line for people and for tests that start the server on port 0.
    println!("listening on http://{local}");
    axum::serve(listener, sluice_api::router(app)).with_graceful_shutdown(shutdown()).await?;
    // Deliveries under way finish and are settled; nothing new is received.
    let _ = stop.send(true);
    let _ = pushing.await;
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
