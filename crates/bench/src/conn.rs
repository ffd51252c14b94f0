//! One keep-alive HTTP/1.1 connection per load task, driven by hyper directly: what every
//! hand-made request of the workloads goes through.

use bytes::Bytes;

use crate::BoxError;

/// One keep-alive HTTP/1.1 connection driven by hyper directly: the load generator shares
/// the machine with the server, so every microsecond it spends per request is taken from it.
pub struct Conn {
    sender: hyper::client::conn::http1::SendRequest<http_body_util::Full<Bytes>>,
    authority: String,
}

impl Conn {
    pub async fn open(base: &str) -> Result<Self, BoxError> {
        let authority = base.strip_prefix("http://").ok_or("bench speaks plain http:// only")?.trim_end_matches('/');
        let stream = tokio::net::TcpStream::connect(authority).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(Self { sender, authority: authority.to_owned() })
    }

    /// Sends one request and reads the whole answer.
    pub async fn send(&mut self, method: hyper::Method, path: &str, body: Bytes) -> Result<(u16, Bytes), BoxError> {
        use http_body_util::BodyExt;
        let req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &self.authority)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(http_body_util::Full::new(body))?;
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let status = resp.status().as_u16();
        Ok((status, resp.into_body().collect().await?.to_bytes()))
    }
}
