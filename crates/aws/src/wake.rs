//! Waking the dispatcher function for a time ([`SelfWaker`]): how a stream run hands over a
//! due time it cannot stay for (docs/AWS.md, "Push at a due time"). An asynchronous `Invoke`
//! (`Event`: Lambda queues it and answers at once) of the function itself, whose run waits
//! for the time on its own clock; IAM: `lambda:InvokeFunction` on the dispatcher alone.

use async_trait::async_trait;
use aws_sdk_lambda::error::ProvideErrorMetadata;
use aws_sdk_lambda::primitives::Blob;
use aws_sdk_lambda::types::InvocationType;
use sluice_core::ports::deliver::{TargetError, Wakes};
use sluice_core::push::Wake;

/// Invokes `function` (the dispatcher, by the name Lambda gives it in
/// `AWS_LAMBDA_FUNCTION_NAME`) with a [`Wake`].
pub struct SelfWaker {
    client: aws_sdk_lambda::Client,
    function: String,
}

impl SelfWaker {
    pub(crate) fn with_client(client: aws_sdk_lambda::Client, function: impl Into<String>) -> Self {
        Self { client, function: function.into() }
    }
}

#[async_trait]
impl Wakes for SelfWaker {
    async fn wake_at(&self, topics: &[String], at_ms: i64) -> Result<(), TargetError> {
        let payload = Wake { topics: topics.to_vec(), at_ms }.event();
        let sent = self
            .client
            .invoke()
            .function_name(&self.function)
            .invocation_type(InvocationType::Event)
            .payload(Blob::new(payload))
            .send()
            .await;
        sent.map(|_| ()).map_err(|e| {
            TargetError::Unavailable(match e.as_service_error() {
                Some(err) => format!("{}: {}", err.code().unwrap_or("error"), err.message().unwrap_or_default()),
                None => std::error::Error::source(&e).map_or_else(|| e.to_string(), |s| s.to_string()),
            })
        })
    }
}
