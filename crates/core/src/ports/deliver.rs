//! The push port: sending one delivery to a subscription's target (an HTTP endpoint or
//! a Lambda function). The dispatcher (`crate::push`) decides what to send and what the
//! answer means; an adapter only carries it.

use async_trait::async_trait;

/// Bytes of a target's answer a deliverer reads at most (enough for a partial-batch
/// answer naming 100 messages); the rest is ignored.
pub const MAX_ANSWER_BYTES: usize = 64 << 10;

/// Where a delivery goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// `POST` to this URL.
    Url(String),
    /// Invoke this function (name or ARN) synchronously with the body as its event.
    Lambda(String),
}

/// One delivery: a signed JSON body for one target.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub destination: Destination,
    /// The request's headers (content type and signature), in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The whole attempt (connect, send, answer) must end within this.
    pub timeout_ms: u64,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The target answered (for a Lambda function: 200 with its result, or a function
    /// error as a 5xx-like status).
    Status {
        status: u16,
        /// A `Retry-After` in seconds, as milliseconds.
        retry_after_ms: Option<u64>,
        /// The answer's first [`MAX_ANSWER_BYTES`].
        body: Vec<u8>,
    },
    /// No answer within the delivery's `timeout_ms` (flow control halves the in-flight
    /// limit for it, as for a 429).
    TimedOut,
    /// No answer otherwise: a refused or failed connection, a refused destination.
    Failed(String),
}

impl Answer {
    /// What a failed attempt records as its error, when it has no status.
    pub const TIMED_OUT: &'static str = "timed out";
}

/// Sends deliveries. Contract: one attempt per call (never retried by the adapter), ended
/// by `timeout_ms`; redirects not followed (a 3xx is an answer); at most
/// [`MAX_ANSWER_BYTES`] of the answer read; never panics. An adapter may refuse targets
/// (e.g. private addresses on AWS) by answering `Failed` with the reason.
#[async_trait]
pub trait Deliver: Send + Sync + 'static {
    async fn deliver(&self, delivery: &Delivery) -> Answer;
}

/// Why a target's settings could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetError {
    /// The target is not there, or may not be read: the subscription's creator's to fix.
    Refused(String),
    /// The service did not answer (throttled, unreachable): try again.
    Unavailable(String),
    /// This process invokes no target of this kind (`serve` without a Lambda endpoint):
    /// the reason says how to set one up.
    Unsupported(String),
}

/// What a push target says of itself, asked when a push subscription is created (on AWS;
/// elsewhere nothing is asked). Contract: one read, never retried by the adapter.
#[async_trait]
pub trait Targets: Send + Sync + 'static {
    /// The timeout configured on the Lambda function `function` (a name or ARN), in
    /// milliseconds: how long an invocation the dispatcher stopped waiting for may still run.
    async fn lambda_timeout_ms(&self, function: &str) -> Result<u64, TargetError>;
}

/// A dispatcher run asked for at a time: how a run that cannot stay for a due time (a
/// stream run, whose shard's next wakes wait for it) hands it over. Contract: a hint, not a
/// promise. A wake lost, late or sent twice changes when a receive happens, never what it
/// takes (the next sweep delivers what a lost one leaves); the adapter retries nothing.
#[async_trait]
pub trait Wakes: Send + Sync + 'static {
    /// Starts a run of the dispatcher for the push subscriptions of `topics` that stays
    /// for what comes due from `at_ms` on.
    async fn wake_at(&self, topics: &[String], at_ms: i64) -> Result<(), TargetError>;
}
