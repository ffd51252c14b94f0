//! `sluice`: run the event router locally (`serve`), and use any Sluice from the command
//! line (topics, subs, groups, publish, tail, receive, dlq: `cli/`). Load tests are
//! `sluice-bench` (crates/bench).

mod cli;

use std::io::IsTerminal;
use std::net::SocketAddr;

use clap::{CommandFactory, Parser, Subcommand};
use sluice_runtime::Config;
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(name = "sluice", version, about = "Serverless event router: one HTTP publish, a replayable log")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    connection: cli::Connection,
    /// `auto`: text on a terminal, JSON when piped (NDJSON for streams); `json`; `text`.
    #[arg(short = 'o', long, global = true, value_enum, default_value = "auto")]
    output: cli::Output,
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
    /// Print a shell's completion script for `sluice`.
    #[command(
        after_help = "Examples:\n  sluice completions bash > ~/.local/share/bash-completion/completions/sluice\n  \
                            sluice completions zsh > ~/.zfunc/_sluice\n  \
                            sluice completions fish > ~/.config/fish/completions/sluice.fish"
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print `sluice`'s man page (roff).
    #[command(after_help = "Example:\n  sluice man > sluice.1 && man ./sluice.1")]
    Man,
    #[command(flatten)]
    Client(cli::Verb),
}

/// mimalloc: about a tenth fewer instructions per request than glibc's malloc, which was a
/// fifth of a group poll's (docs/PERFORMANCE.md, "mimalloc, purging at once").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    purge_freed_memory_at_once();
    tokio::runtime::Runtime::new()?.block_on(run())
}

/// mimalloc's `purge_delay` option (its index in `mi_option_t`, mimalloc 3's `mimalloc.h`;
/// a test pins it by its default).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// mimalloc gives memory freed back to the OS a second after it is freed (its
/// `purge_delay`); meanwhile a burst's buffers (a batched publish, then a replay) stay
/// resident, and the server's peak RSS over the side by side was 175–195 MiB against
/// 144 MiB with glibc. Purged at once, it was 124–128 MiB, for a few hundred `madvise`
/// calls a run. A `MIMALLOC_PURGE_DELAY` in the environment (mimalloc reads it itself) is
/// left to rule.
#[allow(unsafe_code)] // The workspace's one unsafe call outside tests (every other crate forbids it).
fn purge_freed_memory_at_once() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mi_option_set only stores an option's value (mimalloc reads it at each
        // purge decision); no other thread exists yet.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let cli = Cli::parse();
    if let Command::Client(_) = cli.command {
        // A client verb's stdout is its output (JSON when piped): its logs go to stderr,
        // and only warnings unless RUST_LOG asks for more.
        tracing_subscriber::fmt()
            .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
            // Colours only for a terminal: a log file or journald gets plain text, and each
            // request's span (its fields formatted when it opens) costs a third as much.
            .with_ansi(std::io::stdout().is_terminal())
            .init();
    }
    match cli.command {
        Command::Serve { addr, config } => serve(addr, config).await,
        Command::Openapi => {
            use std::io::Write;
            // As the committed docs/openapi.json has it; a closed pipe (`| head`) is no error.
            let _ = std::io::stdout().write_all(sluice_api::openapi_json().as_bytes());
            Ok(())
        }
        Command::Completions { shell } => {
            // Written whole, as `openapi`: clap_complete panics on a write error, and a
            // closed pipe (`| head`) is no error.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "sluice", &mut script);
            let _ = std::io::Write::write_all(&mut std::io::stdout(), &script);
            Ok(())
        }
        Command::Man => {
            let mut page = Vec::new();
            clap_mangen::Man::new(Cli::command()).render(&mut page)?;
            let _ = std::io::Write::write_all(&mut std::io::stdout(), &page);
            Ok(())
        }
        Command::Client(verb) => {
            if let Err(error) = cli::run(verb, &cli.connection, cli.output).await {
                eprintln!("{}", cli::describe_error(&error, &cli.connection));
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

#[cfg(test)]
mod tests {
    /// The option set at start-up is the purge delay: the only one whose default is 1000 (ms).
    #[test]
    #[allow(unsafe_code)]
    fn the_option_set_at_start_up_is_mimallocs_purge_delay() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return;
        }
        // SAFETY: mi_option_get only reads an option's value.
        let delay = || unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        assert_eq!(delay(), 1000, "mimalloc 3's default purge delay, so the index is that option's");
        super::purge_freed_memory_at_once();
        assert_eq!(delay(), 0);
    }
}
