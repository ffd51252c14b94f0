//! `sluice-bench`: load a running Sluice over HTTP and print events/s, MB/s and latency
//! percentiles (`--json` for scripts: infra/perf.sh). A binary of its own, so the server
//! does not link the HTTP clients and histograms it uses.
//!
//! In the spirit of `nats bench` and `kafka-producer-perf-test`: each workload of
//! [`workloads`] drives the HTTP API and yields a [`report::Report`]; the table and `--json`
//! output work for any workload. `queue --embedded DIR` alone runs in process, on an
//! embedded log whose stores count their calls: a profiling aid, not a figure to compare.
//! Below the workloads: the command line ([`args`]), the server they load ([`target`],
//! [`conn`]), the API's answers as the bench reads them ([`wire`]) and the report.

mod args;
mod conn;
mod report;
mod runner;
mod target;
mod wire;
mod workloads;

use clap::Parser;
use tracing_subscriber::EnvFilter;

/// Errors of the bench: it reports them and exits non-zero.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Parser)]
#[command(name = "sluice-bench", version, about = "Load a running Sluice over HTTP")]
struct Cli {
    #[command(flatten)]
    bench: args::BenchArgs,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .init();
    runner::run(Cli::parse().bench).await
}
