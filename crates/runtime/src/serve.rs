//! `sluice serve`'s process on one listener: the embedded log, its janitor, the push
//! dispatcher, the HTTP API and `GET /metrics`, until a shutdown signal. [`LocalServer`] runs the same in
//! the background on a loopback port, for tests, doc examples and tools.

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use sluice_core::upkeep::pace::TrafficPacer;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tower::util::MapRequestLayer;
use tower::ServiceExt;
use tower_http::timeout::TimeoutBody;

use crate::{dispatcher, janitor, open_embedded, App, Config};

/// Serves the whole v1 API on `listener` over the embedded backend of `config` until
/// `shutdown` resolves; requests under way and push deliveries under way then finish.
pub async fn serve(
    listener: TcpListener,
    config: &Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    Opened::open(config).await?.serve(listener, shutdown).await;
    Ok(())
}

/// A server's backend, open and ready to serve: what can fail at start-up (the data
/// directory, the janitor, the dispatcher) has, before anything listens.
pub struct Opened {
    app: App,
    upkeep: JoinHandle<()>,
    dispatcher: sluice_core::push::Dispatcher,
    /// Requests served, counted for the janitor's pacer.
    requests: Arc<AtomicU64>,
}

impl Opened {
    /// Opens the embedded backend of `config` and starts its janitor.
    pub async fn open(config: &Config) -> Result<Self, Box<dyn std::error::Error + Send + Sync>> {
        let log = open_embedded(config)?;
        let requests = Arc::new(AtomicU64::new(0));
        let mut janitor = janitor(config, &log)?;
        if let Some(settings) = config.pace_settings() {
            // Compaction's rewrites share the disk and the SQLite writer with the requests.
            janitor = janitor.with_pacer(Arc::new(TrafficPacer::new(requests.clone(), log.clock().clone(), settings)));
        }
        let mut app = App::new(log, config.groups_config());
        // One process answers every request: its receives and settles keep their subscription.
        app.queues = sluice_core::queues::Queues::caching_subscriptions(app.log.clone());
        if config.lambda_endpoint.is_none() {
            // Nothing could deliver to a Lambda target: its subscription is refused, saying how.
            app.queues = app.queues.with_push_targets(std::sync::Arc::new(crate::push::NoLambdaEndpoint));
        }
        // Push subscriptions are delivered by this process, with the queues the API serves.
        let dispatcher = dispatcher(config, app.queues.clone(), None).await?;
        let upkeep = tokio::spawn(janitor.run_forever(config.janitor_interval_ms, config.retention_interval_ms));
        Ok(Self { app, upkeep, dispatcher, requests })
    }

    /// Serves on `listener` until `shutdown` resolves, as [`serve`].
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()> + Send + 'static) {
        let Self { app, upkeep, dispatcher, requests } = self;
        let (stop, stopping) = tokio::sync::watch::channel(false);
        let pushing = tokio::spawn(async move { dispatcher.run(stopping).await });
        let routes = sluice_api::router(app.clone())
            .merge(crate::metrics::router(app))
            .merge(crate::ui::router())
            .layer(MapRequestLayer::new(move |r: Request| {
                requests.fetch_add(1, Ordering::Relaxed);
                r
            }));
        serve_http(listener, routes, shutdown).await;
        // Deliveries under way finish and are settled; nothing new is received.
        let _ = stop.send(true);
        let _ = pushing.await;
        upkeep.abort();
    }
}

/// The most a connection's read buffer grows to. hyper's default (about 400 KiB) let each
/// connection publishing 100 KiB batches keep a buffer of 256 KiB or more: 256 such
/// connections held 66 MB of buffers, a third of the server's peak RSS. Bodies larger than
/// this arrive in more reads, which costs little next to parsing them.
const READ_BUFFER_BYTES: usize = 64 << 10;

/// How long a connection may take to send a request's head, counted from the end of the
/// previous answer (so it is also how long an idle keep-alive connection stays open), and
/// how long a request's body may pause between two pieces. Past the first the connection
/// is closed; past the second the request is refused (400 `unreadable_body`) and the
/// connection closed. Without them a client that stops mid-request holds its connection,
/// its buffers and a graceful shutdown for ever.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
pub const BODY_PAUSE_TIMEOUT: Duration = Duration::from_secs(30);

/// HTTP/1.1 on `listener` until `shutdown` resolves, then until the requests under way
/// are answered. What `axum::serve` does, with the connections' read buffer bounded and
/// the client's sending timed.
async fn serve_http(listener: TcpListener, routes: Router, shutdown: impl Future<Output = ()> + Send + 'static) {
    let mut http = http1::Builder::new();
    http.max_buf_size(READ_BUFFER_BYTES).timer(TokioTimer::new()).header_read_timeout(HEAD_TIMEOUT);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            // That connection is gone before it was accepted; the next one is fine.
            Err(error) if is_connection_error(&error) => continue,
            Err(error) => {
                // Out of file descriptors and the like: wait rather than spin.
                tracing::warn!(%error, "accepting a connection failed");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        let service = TowerToHyperService::new(
            routes
                .clone()
                .map_request(|r: Request<Incoming>| r.map(|b| Body::new(TimeoutBody::new(BODY_PAUSE_TIMEOUT, b)))),
        );
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

/// An accept error that concerns only the connection being accepted.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset)
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::post;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::time::Instant;

    /// Far past both timeouts: a connection still open then is one they did not close.
    const GUARD: Duration = Duration::from_secs(3600);

    /// `serve_http` on a loopback port with one route that reads its body, until `stop` fires.
    async fn server() -> (std::net::SocketAddr, oneshot::Sender<()>, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let routes = Router::new().route(
            "/echo",
            post(|body: Body| async move {
                match axum::body::to_bytes(body, 1 << 20).await {
                    Ok(bytes) => (axum::http::StatusCode::OK, bytes.len().to_string()),
                    Err(_) => (axum::http::StatusCode::BAD_REQUEST, "unreadable".to_owned()),
                }
            }),
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_http(listener, routes, async move { drop(stopped.await) }));
        (addr, stop, task)
    }

    /// Everything the server sends until it closes the connection, and when it closed it.
    async fn read_to_close(stream: &mut TcpStream) -> (String, Instant) {
        let mut answer = Vec::new();
        tokio::time::timeout(GUARD, stream.read_to_end(&mut answer)).await.expect("the connection stays open").unwrap();
        (String::from_utf8_lossy(&answer).into_owned(), Instant::now())
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_head_that_stops_coming_closes_its_connection() {
        let (addr, _stop, _task) = server().await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let start = Instant::now();
        stream.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        let (_, closed) = read_to_close(&mut stream).await;
        assert!(closed - start >= HEAD_TIMEOUT, "closed after {:?}", closed - start);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_coming_is_refused() {
        let (addr, _stop, _task) = server().await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let start = Instant::now();
        stream.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789").await.unwrap();
        let (answer, closed) = read_to_close(&mut stream).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(closed - start >= BODY_PAUSE_TIMEOUT, "answered after {:?}", closed - start);
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_keeps_coming_is_read_whole() {
        let (addr, _stop, _task) = server().await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        // Four pieces, each within the pause allowed, the whole longer than it.
        for _ in 0..4 {
            tokio::time::sleep(BODY_PAUSE_TIMEOUT - Duration::from_secs(1)).await;
            stream.write_all(b"0123456789").await.unwrap();
        }
        let (answer, _) = read_to_close(&mut stream).await;
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("40"), "{answer}");
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_is_not_held_by_a_half_sent_request() {
        let (addr, stop, task) = server().await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123").await.unwrap();
        tokio::task::yield_now().await;
        stop.send(()).unwrap();
        tokio::time::timeout(GUARD, task).await.expect("shutdown waits for ever").unwrap();
    }
}
