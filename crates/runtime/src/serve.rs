//! `sluice serve`'s process on one listener: the embedded log, its janitor, the push
//! dispatcher, the HTTP API and `GET /metrics`, until a shutdown signal. [`LocalServer`] runs the same in
//! the background on a loopback port, for tests, doc examples and tools.

use std::future::Future;
use std::path::Path;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

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
    axum::serve(listener, routes).with_graceful_shutdown(shutdown).await?;
    // Deliveries under way finish and are settled; nothing new is received.
    let _ = stop.send(true);
    let _ = pushing.await;
    upkeep.abort();
    Ok(())
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
