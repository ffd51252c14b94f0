//! The connection: a base URL, an HTTP client, optional SigV4 signing, and the retry
//! policy every call goes through.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{from_answer, Error};

/// When and how often a call that may be sent again is retried.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1: never retry).
    pub max_attempts: u32,
    /// The first wait; it doubles per attempt, with jitter, up to `max_backoff`.
    pub initial_backoff: Duration,
    /// The longest wait between attempts (a `Retry-After` the server sends wins, up to 30 s).
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { max_attempts: 6, initial_backoff: Duration::from_millis(100), max_backoff: Duration::from_secs(5) }
    }
}

impl RetryPolicy {
    /// The wait before attempt `attempt + 1`: the server's `Retry-After` if it sent one,
    /// else exponential backoff with full jitter.
    fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(wait) = retry_after {
            return wait.min(Duration::from_secs(30));
        }
        let ceiling = self.initial_backoff.saturating_mul(1 << attempt.min(16)).min(self.max_backoff);
        ceiling.mul_f64(rand::random::<f64>().max(0.1))
    }
}

/// A client of one Sluice deployment: `serve`'s URL, or the API Gateway URL of the AWS
/// deployment (with its stage) and `ClientBuilder::aws` signing. Cheap to clone; clones
/// share connections.
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = tempfile::tempdir()?; let server = sluice_runtime::LocalServer::start(dir.path()).await?;
/// # let url = server.url();
/// let client = sluice_client::Client::new(url)?;
/// client.create_topic("orders", &sluice_client::TopicSettings::partitions(4)).await?;
/// assert_eq!(client.describe_topic("orders").await?.partitions, 4);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    base: String,
    http: reqwest::Client,
    timeout: Duration,
    retry: RetryPolicy,
    #[cfg(feature = "aws")]
    signer: Option<crate::sigv4::Signer>,
}

/// Settings for a [`Client`].
pub struct ClientBuilder {
    base: String,
    timeout: Duration,
    retry: RetryPolicy,
    #[cfg(feature = "aws")]
    signer: Option<crate::sigv4::Signer>,
}

impl ClientBuilder {
    /// How long one attempt may take, on top of the long-poll wait it asks for (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The retry policy of calls that may be sent again.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Signs every request with SigV4 for API Gateway (service `execute-api`), with
    /// credentials and region from the standard AWS chain (environment, profile, SSO,
    /// container or instance role).
    #[cfg(feature = "aws")]
    pub async fn aws(mut self) -> Result<Self, Error> {
        self.signer = Some(crate::sigv4::Signer::from_env().await?);
        Ok(self)
    }

    /// The client.
    pub fn build(self) -> Result<Client, Error> {
        // Idle connections are dropped before `serve` closes them (30 s), so a request never
        // goes out on a connection the server is closing.
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(20))
            .build()?;
        let inner = Inner {
            base: self.base,
            http,
            timeout: self.timeout,
            retry: self.retry,
            #[cfg(feature = "aws")]
            signer: self.signer,
        };
        Ok(Client { inner: Arc::new(inner) })
    }
}

/// One request as the client's methods describe it.
pub(crate) struct Call {
    pub method: Method,
    pub path: String,
    pub query: Vec<(&'static str, String)>,
    pub body: Option<Vec<u8>>,
    pub headers: Vec<(&'static str, String)>,
    /// May the request be sent again after a transient failure? Only when a second
    /// application cannot do what the first did not mean to (see the crate's notes).
    pub retry: bool,
    /// The long-poll wait it asks of the server, added to the timeout.
    pub wait: Duration,
}

impl Call {
    pub fn new(method: Method, path: impl Into<String>) -> Self {
        Self {
            method,
            path: path.into(),
            query: Vec::new(),
            body: None,
            headers: Vec::new(),
            retry: true,
            wait: Duration::ZERO,
        }
    }

    pub fn json(mut self, body: &impl Serialize) -> Result<Self, Error> {
        self.body = Some(serde_json::to_vec(body).map_err(|e| Error::Invalid(e.to_string()))?);
        Ok(self)
    }

    pub fn query(mut self, name: &'static str, value: impl ToString) -> Self {
        self.query.push((name, value.to_string()));
        self
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    pub fn once(mut self) -> Self {
        self.retry = false;
        self
    }

    pub fn waiting(mut self, wait_ms: u64) -> Self {
        self.wait = Duration::from_millis(wait_ms);
        self
    }
}

/// A successful answer: its status, content type and body.
pub(crate) struct Answer {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.body).map_err(|e| Error::Unexpected {
            status: self.status,
            content_type: self.content_type.clone(),
            body: format!("{e}: {}", String::from_utf8_lossy(&self.body[..self.body.len().min(512)])),
        })
    }
}

impl Client {
    /// A client of the Sluice at `url` (e.g. `http://127.0.0.1:8080`), with default settings.
    pub fn new(url: &str) -> Result<Self, Error> {
        Self::builder(url).build()
    }

    /// Settings for a client of the Sluice at `url`.
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            base: url.trim_end_matches('/').to_owned(),
            timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            #[cfg(feature = "aws")]
            signer: None,
        }
    }

    /// The base URL.
    pub fn url(&self) -> &str {
        &self.inner.base
    }

    /// Sends `call`, retried by the policy while it fails transiently and may be sent again.
    pub(crate) async fn send(&self, call: Call) -> Result<Answer, Error> {
        self.send_counted(call).await.0
    }

    /// [`Client::send`], with the number of attempts it made, failed or not.
    pub(crate) async fn send_counted(&self, call: Call) -> (Result<Answer, Error>, u32) {
        let policy = &self.inner.retry;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (error, retry_after) = match self.attempt(&call).await {
                Ok(answer) => return (Ok(answer), attempt),
                Err(failure) => failure,
            };
            if !(call.retry && error.is_transient() && attempt < policy.max_attempts) {
                return (Err(error), attempt);
            }
            tracing::debug!(%error, attempt, path = %call.path, "retrying");
            tokio::time::sleep(policy.backoff(attempt - 1, retry_after)).await;
        }
    }

    /// Sends and parses a JSON answer.
    pub(crate) async fn fetch<T: DeserializeOwned>(&self, call: Call) -> Result<T, Error> {
        self.send(call).await?.parse()
    }

    async fn attempt(&self, call: &Call) -> Result<Answer, (Error, Option<Duration>)> {
        let request = self.request(call).await.map_err(|e| (e, None))?;
        let response = self.inner.http.execute(request).await.map_err(|e| (Error::from(e), None))?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let content_type = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let body = response.bytes().await.map_err(|e| (Error::from(e), None))?;
        if (200..300).contains(&status) {
            Ok(Answer { status, content_type, body: body.to_vec() })
        } else {
            Err((from_answer(status, content_type, &body), retry_after))
        }
    }

    async fn request(&self, call: &Call) -> Result<reqwest::Request, Error> {
        let mut url = url::Url::parse(&format!("{}{}", self.inner.base, call.path))
            .map_err(|e| Error::Invalid(format!("bad URL {}{}: {e}", self.inner.base, call.path)))?;
        if !call.query.is_empty() {
            url.query_pairs_mut().extend_pairs(call.query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        let mut builder = self.inner.http.request(call.method.clone(), url).timeout(self.inner.timeout + call.wait);
        for (name, value) in &call.headers {
            builder = builder.header(*name, value);
        }
        if let Some(body) = &call.body {
            builder = builder.header(CONTENT_TYPE, HeaderValue::from_static("application/json")).body(body.clone());
        }
        #[allow(unused_mut)]
        let mut request = builder.build()?;
        #[cfg(feature = "aws")]
        if let Some(signer) = &self.inner.signer {
            signer.sign(&mut request, call.body.as_deref().unwrap_or_default()).await?;
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_retry_after_then_it_is_the_wait_and_else_backoff_grows_to_its_cap() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.backoff(0, Some(Duration::from_secs(1))), Duration::from_secs(1));
        assert_eq!(policy.backoff(0, Some(Duration::from_secs(3600))), Duration::from_secs(30));
        for attempt in 0..20 {
            let wait = policy.backoff(attempt, None);
            assert!(wait <= policy.max_backoff, "{wait:?}");
            assert!(wait <= policy.initial_backoff * (1 << attempt.min(16)), "{wait:?} at {attempt}");
        }
    }
}
