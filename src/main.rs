//! `sluice`: run the event router locally (`serve`), and use any Sluice from the command
//! line (topics, subs, groups, publish, tail, receive, dlq: `cli/`). Load tests are
//! `sluice-bench` (crates/bench).

mod cli;
mod shared_dir;

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
        /// Address to listen on: HOST:PORT, localhost:PORT or :PORT (both loopback); loopback
        /// unless you say otherwise (0.0.0.0:PORT for every interface).
        #[arg(long, env = "SLUICE_ADDR", default_value = "127.0.0.1:8080", value_parser = listen_addr)]
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
        Command::Serve { addr, config } => {
            if let Err(error) = serve(addr, config).await {
                eprintln!("error: {error}");
                std::process::exit(1);
            }
            Ok(())
        }
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

/// `serve`: the backend is opened, then the address bound, and only then does anything say
/// "listening"; a failure of either is one line naming what failed (the caller prints it,
/// and exits 1).
async fn serve(addr: SocketAddr, config: Config) -> Result<(), String> {
    let dir = config.data_dir.display().to_string();
    let opened = sluice_runtime::Opened::open(&config)
        .await
        .map_err(|e| format!("cannot open the data directory {dir}: {}", causes(e.as_ref())))?;
    let presence = shared_dir::enter(&config.data_dir)
        .map_err(|e| format!("cannot lock the data directory {dir} (its serve.lock): {e}"))?;
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            format!("cannot listen on {addr}: the address is in use (another server?); choose another with --addr")
        }
        _ => format!("cannot listen on {addr}: {e}"),
    })?;
    let local = listener.local_addr().map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    tracing::info!(addr = %local, data_dir = %dir, "sluice listening");
    if presence.shared {
        println!(
            "note: another sluice serve uses the data directory {dir}: both serve the same topics (supported; \
             README, Configuration)"
        );
    }
    // A plain line for people and for tests that start the server on port 0.
    println!("listening on http://{local}");
    opened.serve(listener, shutdown()).await;
    drop(presence);
    tracing::info!("stopped");
    Ok(())
}

/// An error and its causes on one line: "a: b: c".
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line = format!("{line}: {text}");
        }
        source = cause.source();
    }
    line.replace('\n', " ")
}

/// `--addr`: a socket address, `localhost:PORT` or `:PORT` (both on loopback), or a host
/// name and port, resolved once.
fn listen_addr(text: &str) -> Result<SocketAddr, String> {
    let expected = || format!("'{text}' is not an address to listen on: use HOST:PORT, localhost:PORT or :PORT");
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let (host, port) = text.rsplit_once(':').ok_or_else(expected)?;
    let port: u16 = port.parse().map_err(|_| expected())?;
    if host.is_empty() || host.eq_ignore_ascii_case("localhost") {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    use std::net::ToSocketAddrs;
    let mut resolved = (host, port).to_socket_addrs().map_err(|e| format!("{}: {e}", expected()))?;
    resolved.next().ok_or_else(expected)
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
    #[test]
    fn addr_takes_localhost_and_a_bare_port_on_loopback() {
        let loopback = |port| std::net::SocketAddr::from(([127, 0, 0, 1], port));
        assert_eq!(super::listen_addr("localhost:8080"), Ok(loopback(8080)));
        assert_eq!(super::listen_addr(":9000"), Ok(loopback(9000)));
        assert_eq!(super::listen_addr("127.0.0.1:0"), Ok(loopback(0)));
        assert_eq!(super::listen_addr("0.0.0.0:80"), Ok(std::net::SocketAddr::from(([0, 0, 0, 0], 80))));
        assert_eq!(super::listen_addr("[::1]:80").map(|a| a.is_ipv6()), Ok(true));
        for bad in ["8080", "localhost", "localhost:http", ":99999"] {
            let e = super::listen_addr(bad).unwrap_err();
            assert!(e.contains("HOST:PORT, localhost:PORT or :PORT"), "{bad}: {e}");
        }
    }

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
