//! `sluice-bench`: load a running Sluice over HTTP and print events/s, MB/s and latency
//! percentiles (`--json` for scripts: infra/perf.sh). A binary of its own, so the server
//! does not link the HTTP clients and histograms it uses.

mod bench;

use clap::Parser;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(name = "sluice-bench", version, about = "Load a running Sluice over HTTP")]
struct Cli {
    #[command(flatten)]
    bench: bench::BenchArgs,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .init();
    bench::run(Cli::parse().bench).await
}
