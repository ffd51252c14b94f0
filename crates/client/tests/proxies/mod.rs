//! HTTP proxies between a client and `serve` for the client's tests: one that loses
//! answers (the request applied, the answer a `503`), one that holds a receive's answer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::response::Response;
use serde_json::Value;

/// Forwards to `upstream`; every `every`-th request whose path ends with `suffix` is
/// applied by the server and answered `503` (a lost answer). The first `refused` such
/// requests are not forwarded at all (the server is unreachable for a while).
pub struct Lossy {
    pub upstream: String,
    pub suffix: &'static str,
    pub every: u64,
    pub refused: u64,
    pub seen: AtomicU64,
    pub lost: AtomicU64,
    pub http: reqwest::Client,
}

async fn forward(State(proxy): State<Arc<Lossy>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    if parts.uri.path().ends_with(proxy.suffix) && proxy.lost.load(Ordering::SeqCst) < proxy.refused {
        proxy.lost.fetch_add(1, Ordering::SeqCst);
        return Response::builder().status(503).body(Body::from("unreachable")).unwrap();
    }
    let body = to_bytes(body, usize::MAX).await.unwrap_or_default();
    let url = format!("{}{}", proxy.upstream, parts.uri.path_and_query().map_or("", |p| p.as_str()));
    let mut outgoing = proxy.http.request(parts.method.clone(), url).body(body);
    for (name, value) in &parts.headers {
        if name != "host" {
            outgoing = outgoing.header(name, value);
        }
    }
    let answer = outgoing.send().await.expect("the server answers");
    let (status, bytes) = (answer.status(), answer.bytes().await.unwrap_or_default());
    if parts.uri.path().ends_with(proxy.suffix)
        && proxy.seen.fetch_add(1, Ordering::SeqCst) % proxy.every == proxy.every - 1
    {
        proxy.lost.fetch_add(1, Ordering::SeqCst);
        return Response::builder().status(503).header("retry-after", "0").body(Body::from("lost")).unwrap();
    }
    Response::builder()
        .status(status.as_u16())
        .header("content-type", "application/json")
        .body(Body::from(bytes))
        .unwrap()
}

/// A proxy in front of `upstream` on a loopback port; answers its URL.
pub async fn lossy(upstream: &str, suffix: &'static str, every: u64) -> (String, Arc<Lossy>) {
    lossy_refusing(upstream, suffix, every, 0).await
}

pub async fn lossy_refusing(upstream: &str, suffix: &'static str, every: u64, refused: u64) -> (String, Arc<Lossy>) {
    let proxy = Arc::new(Lossy {
        upstream: upstream.to_owned(),
        suffix,
        every,
        refused,
        seen: AtomicU64::new(0),
        lost: AtomicU64::new(0),
        http: reqwest::Client::new(),
    });
    let app = axum::Router::new().fallback(forward).with_state(proxy.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, proxy)
}

/// Forwards to `upstream`, but holds the first answer to a receive that brings messages
/// until `open` is notified, after notifying `answered` (the server put them in flight).
#[derive(Default)]
pub struct Holding {
    pub upstream: String,
    pub answered: tokio::sync::Notify,
    pub open: tokio::sync::Notify,
    pub held: std::sync::atomic::AtomicBool,
    pub http: reqwest::Client,
}

async fn hold_receive(State(proxy): State<Arc<Holding>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = to_bytes(body, usize::MAX).await.unwrap_or_default();
    let url = format!("{}{}", proxy.upstream, parts.uri.path_and_query().map_or("", |p| p.as_str()));
    let outgoing = proxy.http.request(parts.method.clone(), url).header("content-type", "application/json");
    let answer = outgoing.body(body).send().await.expect("the server answers");
    let (status, bytes) = (answer.status(), answer.bytes().await.unwrap_or_default());
    let brought =
        serde_json::from_slice::<Value>(&bytes).is_ok_and(|v| v["messages"].as_array().is_some_and(|m| !m.is_empty()));
    if parts.uri.path().ends_with("/receive") && brought && !proxy.held.swap(true, Ordering::SeqCst) {
        proxy.answered.notify_one();
        proxy.open.notified().await;
    }
    Response::builder()
        .status(status.as_u16())
        .header("content-type", "application/json")
        .body(Body::from(bytes))
        .unwrap()
}

/// A [`Holding`] proxy in front of `upstream` on a loopback port; answers its URL.
pub async fn holding(upstream: &str) -> (String, Arc<Holding>) {
    let proxy = Arc::new(Holding { upstream: upstream.to_owned(), ..Holding::default() });
    let app = axum::Router::new().fallback(hold_receive).with_state(proxy.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, proxy)
}
