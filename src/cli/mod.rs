//! The client verbs of `sluice`: topics, subscriptions, groups, publish, tail, receive and
//! the dead-letter queue, over `sluice-client`. Each prints what it got (JSON when piped,
//! for people on a terminal) and, on an error, the API's code and message, exiting 1.

mod output;
mod publish;
mod queues;
mod tail;
mod topics;

use clap::{Args, Subcommand};
use sluice_client::{Client, Error};

/// Where the Sluice is, and how to reach it.
#[derive(Args, Debug, Clone)]
pub struct Connection {
    /// Base URL of the API: `serve`'s, or the API Gateway stage URL of a deployment.
    #[arg(long, global = true, env = "SLUICE_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Sign requests with SigV4 (credentials and region from the standard AWS chain).
    #[arg(long, global = true)]
    pub aws: bool,
}

impl Connection {
    pub async fn client(&self) -> Result<Client, Error> {
        let builder = Client::builder(&self.url);
        if self.aws {
            #[cfg(feature = "aws")]
            return builder.aws().await?.build();
            #[cfg(not(feature = "aws"))]
            return Err(Error::Invalid(
                "this sluice was built without AWS signing: build it with `--features aws`".into(),
            ));
        }
        builder.build()
    }
}

/// The client verbs.
#[derive(Subcommand, Debug)]
pub enum Verb {
    /// Create, list, describe and delete topics.
    #[command(
        subcommand,
        after_help = "Example:\n  sluice topics create orders --partitions 12 --retention-ms 86400000"
    )]
    Topics(topics::TopicVerb),
    /// Create, list, describe and delete subscriptions (work queues) of a topic.
    #[command(subcommand, after_help = "Example:\n  sluice subs create orders billing --start earliest")]
    Subs(queues::SubVerb),
    /// List, describe (members, assignment, committed offsets, lag), seek and delete groups.
    #[command(subcommand, after_help = "Example:\n  sluice groups describe billing")]
    Groups(topics::GroupVerb),
    /// Publish events from arguments, or from stdin (one event per line, JSON or text).
    #[command(after_help = "Examples:\n  sluice publish orders '{\"id\": 1}' '{\"id\": 2}' --key order-1\n  \
                            sluice publish orders --key-field id < orders.ndjson")]
    Publish(publish::PublishArgs),
    /// Print a topic's events: replay and follow, or read as a member of a group.
    #[command(after_help = "Examples:\n  sluice tail orders --from earliest\n  \
                            sluice tail orders --partition 3 --from 2026-12-01T00:00:00Z --follow\n  \
                            sluice tail orders --group billing --follow")]
    Tail(tail::TailArgs),
    /// Receive messages from a subscription (and ack them with `--ack`).
    #[command(after_help = "Example:\n  sluice receive orders billing --count 10 --ack")]
    Receive(queues::ReceiveArgs),
    /// List, redrive or purge a subscription's dead-letter queue.
    #[command(subcommand, after_help = "Example:\n  sluice dlq redrive orders billing")]
    Dlq(queues::DlqVerb),
}

/// Runs a verb; the error, if any, is printed by the caller.
pub async fn run(verb: Verb, connection: &Connection) -> Result<(), Error> {
    let client = connection.client().await?;
    match verb {
        Verb::Topics(v) => topics::topics(&client, v).await,
        Verb::Subs(v) => queues::subs(&client, v).await,
        Verb::Groups(v) => topics::groups(&client, v).await,
        Verb::Publish(args) => publish::publish(&client, args).await,
        Verb::Tail(args) => tail::tail(&client, args).await,
        Verb::Receive(args) => queues::receive(&client, args).await,
        Verb::Dlq(v) => queues::dlq(&client, v).await,
    }
}

/// How an error is told: the API's code and message when Sluice answered one.
pub fn describe_error(error: &Error) -> String {
    match error {
        Error::Api { status, code, message, .. } => format!("error: {code} ({status}): {message}"),
        other => format!("error: {other}"),
    }
}
