//! The guard's table of addresses, and the deliverer's refusals end to end.

use super::guard::{is_public, refusal};
use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Every address, allowed (`None`) or refused (with the reason given).
const TABLE: &[(&str, Option<&str>)] = &[
    ("93.184.216.34", None),
    ("8.8.8.8", None),
    ("2606:4700::1111", None),
    ("::ffff:8.8.8.8", None),
    ("64:ff9b::808:808", None),
    ("2002:808:808::1", None),
    ("127.0.0.1", Some("loopback")),
    ("10.1.2.3", Some("private")),
    ("172.16.0.1", Some("private")),
    ("192.168.1.1", Some("private")),
    ("169.254.169.254", Some("link-local")),
    ("0.0.0.0", Some("this network")),
    ("100.64.0.1", Some("shared address space")),
    ("192.0.0.1", Some("IETF protocol assignments")),
    ("192.0.2.1", Some("documentation")),
    ("198.18.0.1", Some("benchmarking")),
    ("198.19.255.254", Some("benchmarking")),
    ("224.0.0.1", Some("multicast")),
    ("240.0.0.1", Some("reserved")),
    ("255.255.255.255", Some("reserved")),
    ("::1", Some("loopback")),
    ("::", Some("unspecified")),
    ("fd00::1", Some("unique local")),
    ("fe80::1", Some("link-local")),
    ("fec0::1", Some("site-local")),
    ("ff02::1", Some("multicast")),
    ("2001:db8::1", Some("documentation")),
    ("::ffff:127.0.0.1", Some("IPv4-mapped 127.0.0.1: loopback")),
    ("::ffff:169.254.169.254", Some("IPv4-mapped 169.254.169.254: link-local")),
    ("::127.0.0.1", Some("IPv4-compatible 127.0.0.1: loopback")),
    ("::ffff:0:127.0.0.1", Some("IPv4-translated 127.0.0.1: loopback")),
    ("::ffff:0:10.1.2.3", Some("IPv4-translated 10.1.2.3: private")),
    ("::ffff:0:8.8.8.8", None),
    ("192.88.99.1", Some("6to4 relay anycast")),
    ("::10.0.0.1", Some("IPv4-compatible 10.0.0.1: private")),
    ("64:ff9b::127.0.0.1", Some("NAT64 127.0.0.1: loopback")),
    ("64:ff9b::a9fe:a9fe", Some("NAT64 169.254.169.254: link-local")),
    ("64:ff9b:1::1", Some("local-use NAT64")),
    ("2002:7f00:1::", Some("6to4 127.0.0.1: loopback")),
    ("2002:a00:1::1", Some("6to4 10.0.0.1: private")),
    ("2002:c0a8:101::1", Some("6to4 192.168.1.1: private")),
];

#[test]
fn given_an_address_when_judged_then_only_public_ones_pass_and_a_refusal_says_why() {
    let mut wrong = Vec::new();
    for (ip, expected) in TABLE {
        let got = refusal(ip.parse().unwrap());
        let right = match (expected, &got) {
            (None, None) => true,
            (Some(why), Some(said)) => said.contains(why),
            _ => false,
        };
        if !right || is_public(ip.parse().unwrap()) != expected.is_none() {
            wrong.push(format!("{ip}: expected {expected:?}, got {got:?}"));
        }
    }
    assert!(wrong.is_empty(), "misjudged:\n{}", wrong.join("\n"));
}

/// A server on a free loopback port answering every request with `answer`: its address
/// and how many connections it took.
async fn server(answer: &'static str) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = socket.read(&mut buf).await;
            let _ = socket.write_all(answer.as_bytes()).await;
        }
    });
    (addr, hits)
}

fn delivery(url: String) -> Delivery {
    Delivery { destination: Destination::Url(url), headers: Vec::new(), body: b"{}".to_vec(), timeout_ms: 5_000 }
}

const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";

#[tokio::test]
async fn given_private_refused_when_the_url_names_a_private_address_or_a_name_of_one_then_never_sent() {
    let (addr, hits) = server(OK).await;
    let port = addr.port();
    let deliverer = HttpDeliverer::new(false, None).unwrap();
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://[64:ff9b::7f00:1]:{port}/"),
        format!("http://[2002:7f00:1::]:{port}/"),
        format!("http://2130706433:{port}/"),
        format!("http://localhost:{port}/"),
    ] {
        match deliverer.deliver(&delivery(url.clone())).await {
            Answer::Failed(why) => assert!(why.contains("refused"), "{url}: {why}"),
            other => panic!("{url}: delivered: {other:?}"),
        }
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn given_a_redirect_when_delivering_then_it_is_not_followed() {
    let (inner, followed) = server(OK).await;
    let redirect: &'static str = format!(
        "HTTP/1.1 307 Temporary Redirect\r\nlocation: http://{inner}/metadata\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
    )
    .leak();
    let (outer, _) = server(redirect).await;
    let deliverer = HttpDeliverer::new(true, None).unwrap();
    let answer = deliverer.deliver(&delivery(format!("http://{outer}/hook"))).await;
    assert!(matches!(answer, Answer::Status { status: 307, .. }), "{answer:?}");
    assert_eq!(followed.load(Ordering::SeqCst), 0, "the redirect was followed");
}

#[test]
fn retry_after_is_read_as_seconds_or_an_http_date() {
    // 1994-11-06T08:49:37Z, in ms.
    let at = 784_111_777_000;
    let cases = [
        ("120", Some(120_000)),
        (" 0 ", Some(0)),
        ("Sun, 06 Nov 1994 08:49:37 GMT", Some(0)),
        ("Sun, 06 Nov 1994 08:50:07 GMT", Some(30_000)),
        ("Sunday, 06-Nov-94 08:50:07 GMT", Some(30_000)),
        ("Sun Nov  6 08:50:07 1994", Some(30_000)),
        ("Sun, 06 Nov 1994 08:49:07 GMT", Some(0)),
        ("soon", None),
        ("-5", None),
    ];
    for (value, want) in cases {
        assert_eq!(retry_after_ms(value, at), want, "{value:?}");
    }
}

#[tokio::test]
async fn given_a_429_with_an_http_date_then_the_answer_carries_the_wait() {
    let answer: &'static str =
        "HTTP/1.1 429 Too Many Requests\r\nretry-after: Fri, 31 Dec 9999 23:59:59 GMT\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
    let (addr, _) = server(answer).await;
    let deliverer = HttpDeliverer::new(true, None).unwrap();
    match deliverer.deliver(&delivery(format!("http://{addr}/hook"))).await {
        Answer::Status { status: 429, retry_after_ms: Some(ms), .. } => assert!(ms > 1_000_000_000, "{ms}"),
        other => panic!("{other:?}"),
    }
}
