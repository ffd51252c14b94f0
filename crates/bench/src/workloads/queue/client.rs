//! One worker's way to the queue: its settings, a keep-alive connection or the embedded
//! log, and its receives and acks as the worker sees them.

use bytes::Bytes;
use serde_json::json;

use crate::args::PublishShape;
use crate::conn::Conn;
use crate::wire::{value_len, AckAnswer, AckResult, ReceiveAnswer};
use crate::BoxError;

use super::profile::OP;

/// How the workers of a `queue` run receive and ack.
#[derive(Debug, Clone)]
pub struct QueueSettings {
    pub subscription: String,
    pub workers: usize,
    pub batch: usize,
    pub wait_ms: u64,
    pub visibility_timeout_ms: Option<u64>,
    /// What the backlog or the live publishers publish.
    pub shape: PublishShape,
    /// Acks ride on the next receive.
    pub ack_next: bool,
}

/// A message as a worker sees it.
pub struct Received {
    pub receipt: String,
    pub partition: u32,
    pub offset: u64,
    pub receive_count: u32,
    pub value_len: u64,
    /// When its publish was sent, on the bench's clock (live publishers' events only).
    pub sent_ns: Option<u64>,
}

/// One worker's way to the queue: a keep-alive connection, or the embedded log.
pub enum QueueClient {
    Http {
        conn: Conn,
        base: String,
        receive_path: String,
        ack_path: String,
        receive_body: Bytes,
        /// The receive body as JSON, to add acks to.
        receive_json: serde_json::Value,
    },
    Embedded {
        queues: sluice_core::queues::Queues,
        topic: String,
        subscription: String,
        request: sluice_core::queues::ReceiveRequest,
    },
}

/// A refusal (an HTTP status other than 200, or the core's error) as text; transport
/// errors are the outer `Err`.
pub type Answered<T> = Result<Result<T, String>, BoxError>;

/// `None` for an ack that went through, else its error code.
fn ack_outcome(r: AckResult<'_>) -> Option<String> {
    match (r.ok, r.error) {
        (true, _) => None,
        (false, e) => Some(e.map_or_else(|| "unknown".to_owned(), |e| e.code.into_owned())),
    }
}

impl QueueClient {
    pub async fn receive(&mut self) -> Answered<Vec<Received>> {
        Ok(self.receive_acking(&[]).await?.map(|(messages, _)| messages))
    }

    /// Acks `receipts` and receives, in one request (HTTP only); answers the messages and,
    /// per receipt, `None` (acked) or the error code.
    pub async fn receive_acking(&mut self, receipts: &[String]) -> Answered<(Vec<Received>, Vec<Option<String>>)> {
        match self {
            Self::Http { conn, receive_path, receive_body, receive_json, .. } => {
                let body = if receipts.is_empty() {
                    receive_body.clone()
                } else {
                    let mut with_acks = receive_json.clone();
                    with_acks["ack"] = json!(receipts);
                    Bytes::from(serde_json::to_vec(&with_acks)?)
                };
                let (status, body) = conn.send(hyper::Method::POST, receive_path, body).await?;
                if status != 200 {
                    return Ok(Err(format!("receive: HTTP {status} {}", String::from_utf8_lossy(&body))));
                }
                let answer: ReceiveAnswer = serde_json::from_slice(&body)?;
                if answer.acks.len() != receipts.len() {
                    return Ok(Err(format!(
                        "receive: {} ack results for {} receipts",
                        answer.acks.len(),
                        receipts.len()
                    )));
                }
                let acks = answer.acks.into_iter().map(ack_outcome).collect();
                let messages = answer
                    .messages
                    .into_iter()
                    .map(|m| Received {
                        value_len: value_len(m.value, m.value_base64.as_deref()),
                        sent_ns: m.headers.ns(),
                        receipt: m.receipt.into_owned(),
                        partition: m.partition,
                        offset: m.offset,
                        receive_count: m.receive_count,
                    })
                    .collect();
                Ok(Ok((messages, acks)))
            }
            Self::Embedded { queues, topic, subscription, request } => {
                let answer = OP.scope("receive", queues.receive(topic, subscription, request)).await;
                Ok(answer
                    .map(|messages| {
                        messages
                            .into_iter()
                            .map(|m| Received {
                                value_len: m.event.record.value.len() as u64,
                                sent_ns: None,
                                receipt: m.receipt,
                                partition: m.event.partition,
                                offset: m.event.offset,
                                receive_count: m.receive_count,
                            })
                            .collect()
                    })
                    .map(|messages| (messages, Vec::new()))
                    .map_err(|e| format!("receive: {e}")))
            }
        }
    }

    /// Acks; answers per receipt `None` (acked) or the error code.
    pub async fn ack(&mut self, receipts: &[String]) -> Answered<Vec<Option<String>>> {
        match self {
            Self::Http { conn, ack_path, .. } => {
                let body = Bytes::from(serde_json::to_vec(&json!({ "receipts": receipts }))?);
                let (status, body) = conn.send(hyper::Method::POST, ack_path, body).await?;
                if status != 200 {
                    return Ok(Err(format!("ack: HTTP {status} {}", String::from_utf8_lossy(&body))));
                }
                let answer: AckAnswer = serde_json::from_slice(&body)?;
                if answer.results.len() != receipts.len() {
                    return Ok(Err(format!("ack: {} results for {} receipts", answer.results.len(), receipts.len())));
                }
                Ok(Ok(answer.results.into_iter().map(ack_outcome).collect()))
            }
            Self::Embedded { queues, topic, subscription, .. } => {
                let answer = OP.scope("ack", queues.ack(topic, subscription, receipts)).await;
                Ok(answer
                    .map(|results| results.into_iter().map(|r| r.err().map(|e| e.code().as_str().to_owned())).collect())
                    .map_err(|e| format!("ack: {e}")))
            }
        }
    }

    /// After a transport error: a new connection (the old one is unusable).
    pub async fn reopen(&mut self) -> Result<(), BoxError> {
        if let Self::Http { conn, base, .. } = self {
            *conn = Conn::open(base).await?;
        }
        Ok(())
    }
}
