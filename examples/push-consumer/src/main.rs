//! A push target written as a Lambda function. A subscription with
//! `"push": {"lambda": "<this function's ARN>"}` has Sluice invoke it (RequestResponse)
//! with a delivery, `{"topic", "subscription", "messages": [...]}`, and read its answer as
//! Lambda's SQS event source reads one: the ids listed in `batchItemFailures` are
//! redelivered after the subscription's backoff (and dead-lettered after
//! `max_receive_count` deliveries), every other message of the batch is acknowledged. A
//! function error or a timeout fails the whole batch.
//!
//! This one fails the messages whose JSON value holds `"fail": true`, and handles the rest
//! by doing nothing. With `PUSH_CONSUMER_LOG` set to a file, it appends one JSON line per
//! message (its id, receive count and whether it failed): Sluice's tests read it.
//!
//! Run it locally with `cargo lambda watch` and point `sluice serve --lambda-endpoint` at
//! watch's address; the subscription then names the function: `{"lambda": "sluice-push-consumer"}`.

use std::io::Write;

use lambda_runtime::{service_fn, Error, LambdaEvent};
use serde::Deserialize;
use serde_json::{json, Value};

/// A delivery, as much of it as this function reads.
#[derive(Deserialize)]
struct Delivery {
    messages: Vec<Message>,
}

#[derive(Deserialize)]
struct Message {
    /// `<topic>/<partition>/<offset>`: what `batchItemFailures` names.
    id: String,
    receive_count: u32,
    /// The event's value when it was published as JSON (bytes come as `value_base64`).
    #[serde(default)]
    value: Value,
}

async fn handle(event: LambdaEvent<Delivery>) -> Result<Value, Error> {
    let mut failures = Vec::new();
    let mut lines = String::new();
    for m in &event.payload.messages {
        let failed = m.value.get("fail") == Some(&Value::Bool(true));
        if failed {
            failures.push(json!({ "itemIdentifier": m.id }));
        }
        lines.push_str(&json!({ "id": m.id, "receive_count": m.receive_count, "failed": failed }).to_string());
        lines.push('\n');
    }
    if let Some(path) = std::env::var_os("PUSH_CONSUMER_LOG") {
        std::fs::OpenOptions::new().create(true).append(true).open(path)?.write_all(lines.as_bytes())?;
    }
    Ok(json!({ "batchItemFailures": failures }))
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::run(service_fn(handle)).await
}
