//! `sluice serve`'s process on one listener: the embedded log, its janitor, the push
//! dispatcher, the HTTP API and `GET /metrics`, until a shutdown signal. [`LocalServer`] runs the same in
//! the background on a loopback port, for tests, doc examples and tools.

use std::future::Future;
use std::path::Path;

use axum::body::Body;
use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::ServiceExt;

use crate::{dispatcher, janitor, open_embedded, App, Config};

/// Serves the whole v1 API on `listener` over the embedded backend of `config` until
/// `shutdown` resolves; requests under way and push deliveries under way then finish.
pub async fn serve(
    listener: TcpListener,
    config: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let log = open_embedded(config)?;
    let upkeep = tokio::spawn(janitor(config, &log)?.run_forever(config.janitor_interval_ms));
    let app = App::new(log, config.groups_config());
    // Push subscriptions are delivered by this process, with the queues the API serves.
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let dispatcher = dispatcher(config, app.queues.clone()).await?;
    let pushing = tokio::spawn(async move { dispatcher.run(stopping).await });
    let routes = sluice_api::router(app.clone()).merge(crate::metrics::router(app)).merge(crate::ui::router());
    serve_http(listener, routes, shutdown).await;
    // Deliveries under way finish and are settled; nothing new is received.
    let _ = stop.send(true);
    let _ = pushing.await;
    upkeep.abort();
    Ok(())
}

/// The most a connection's read buffer grows to. hyper's default (about 400 KiB) let each
/// connection publishing 100 KiB batches keep a buffer of 256 KiB or more: 256 such
/// connections held 66 MB of buffers, a third of the server's peak RSS. Bodies larger than
/// this arrive in more reads, which costs little next to parsing them.
const READ_BUFFER_BYTES: usize = 64 << 10;

/// HTTP/1.1 on `listener` until `shutdown` resolves, then until the requests under way
/// are answered. What `axum::serve` does, with the connections' read buffer bounded.
async fn serve_http(listener: TcpListener, routes: Router, shutdown: impl Future<Output = ()> + Send + 'static) {
    let mut http = http1::Builder::new();
    http.max_buf_size(READ_BUFFER_BYTES);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(routes.clone().map_request(|r: Request<Incoming>| r.map(Body::new)));
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// A `serve` on a free loopback port in this process, over its own data directory; it
/// stops when dropped.
pub struct LocalServer {
    url: String,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl LocalServer {
    /// Starts a server with the default configuration over `data_dir`.
    pub async fn start(data_dir: &Path) -> std::io::Result<Self> {
        let config = Config::from_env()
            .map(|c| Config { data_dir: data_dir.to_owned(), ..c })
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            if let Err(error) = serve(listener, &config, async move { drop(stopped.await) }).await {
                tracing::error!(%error, "local server failed");
            }
        });
        Ok(Self { url, stop: Some(stop), task })
    }

    /// The server's base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}
