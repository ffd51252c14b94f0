//! The push deliverer ignores `HTTP(S)_PROXY`: a proxy would resolve and connect past the
//! guard that refuses private addresses. Alone in its binary: it sets the process's
//! environment before any client is built.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use sluice_core::ports::deliver::{Answer, Deliver, Delivery, Destination};
use sluice_runtime::push::HttpDeliverer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A server on a free loopback port that answers every request 200: its URL and how many
/// connections it took.
async fn server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = socket.read(&mut buf).await;
            let _ = socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
        }
    });
    (url, hits)
}

fn delivery(url: &str) -> Delivery {
    Delivery { destination: Destination::Url(url.into()), headers: Vec::new(), body: b"{}".to_vec(), timeout_ms: 5_000 }
}

#[tokio::test]
async fn given_a_proxy_in_the_environment_when_delivering_then_it_is_not_used() {
    let (proxy, proxied) = server().await;
    let (target, reached) = server().await;
    for var in ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"] {
        std::env::set_var(var, &proxy);
    }
    for var in ["NO_PROXY", "no_proxy"] {
        std::env::remove_var(var);
    }

    // Private addresses refused: a name is resolved by the guard, never by a proxy.
    let guarded = HttpDeliverer::new(false, None).unwrap();
    let answer = guarded.deliver(&delivery("http://sluice-proxy-check.invalid/hook")).await;
    assert!(matches!(answer, Answer::Failed(_)), "delivered through the proxy: {answer:?}");

    // Private addresses allowed: straight to the target all the same.
    let open = HttpDeliverer::new(true, None).unwrap();
    let answer = open.deliver(&delivery(&format!("{target}/hook"))).await;
    assert!(matches!(answer, Answer::Status { status: 200, .. }), "{answer:?}");
    assert_eq!(reached.load(Ordering::SeqCst), 1, "the target was not reached directly");
    assert_eq!(proxied.load(Ordering::SeqCst), 0, "the proxy was used");
}
