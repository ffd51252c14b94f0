//! The client verbs of `sluice`: topics, subscriptions, groups, publish, tail, receive,
//! ack, nack, visibility and the dead-letter queue, over `sluice-client`. Each prints by
//! the global `-o/--output` (`output.rs`) and, on an error, one `error:` line and a
//! `hint:` line where one helps (`errors.rs`), exiting 1.

mod dlq;
mod errors;
mod output;
mod publish;
mod queues;
mod settle;
mod subs;
mod tail;
mod topics;

pub use output::Output;

use clap::{Args, Subcommand};
use sluice_client::{Client, Error};

/// Where the Sluice is, and how to reach it.
#[derive(Args, Debug, Clone)]
pub struct Connection {
    /// Base URL of the API: `serve`'s, or the API Gateway stage URL of a deployment
    /// (`http://` is assumed without a scheme: `localhost:8080`).
    #[arg(long, global = true, env = "SLUICE_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Sign requests with SigV4 (credentials and region from the standard AWS chain).
    #[arg(long, global = true)]
    pub aws: bool,
}

impl Connection {
    pub async fn client(&self) -> Result<Client, Error> {
        let builder = Client::builder(&errors::complete_url(&self.url)?);
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
    /// Create, list, describe, update, delete, pause and resume subscriptions (work queues) of a topic.
    #[command(subcommand, after_help = "Example:\n  sluice subs create orders billing --start earliest")]
    Subs(subs::SubVerb),
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
    /// Receive messages from a subscription, each with its receipt (ack with `--ack`).
    ///
    /// On a terminal each message's receipt is printed on the line under it, for `ack`,
    /// `nack` and `visibility`; piped, it is each NDJSON line's `receipt`.
    #[command(after_help = "Examples:\n  sluice receive orders billing --count 10 --ack\n  \
                            sluice receive orders billing -o json | jq -r .receipt")]
    Receive(queues::ReceiveArgs),
    /// Show the visible messages of a subscription without receiving them: no receive
    /// count, lease or cursor changes.
    #[command(after_help = "Example:\n  sluice peek orders billing --count 5")]
    Peek(queues::PeekArgs),
    /// Acknowledge received messages by their receipts: they are done.
    #[command(after_help = "Example:\n  sluice ack orders billing AAAAAAAB… AAAAAAAC…")]
    Ack(settle::AckArgs),
    /// Give received messages back, visible again now or after `--delay-ms`.
    #[command(after_help = "Example:\n  sluice nack orders billing AAAAAAAB… --delay-ms 60000")]
    Nack(settle::NackArgs),
    /// Keep received messages hidden for `--timeout-ms` from now; prints the new receipts.
    ///
    /// `--timeout-ms 0` makes them visible again at once.
    #[command(after_help = "Example:\n  sluice visibility orders billing AAAAAAAB… --timeout-ms 120000")]
    Visibility(settle::VisibilityArgs),
    /// List, delete, redrive or purge a subscription's dead-letter queue.
    #[command(subcommand, after_help = "Example:\n  sluice dlq redrive orders billing")]
    Dlq(dlq::DlqVerb),
}

/// Runs a verb, printing text or JSON by `output`; the error, if any, is the caller's to
/// print ([`describe_error`]).
pub async fn run(verb: Verb, connection: &Connection, output: Output) -> Result<(), Error> {
    let client = connection.client().await?;
    let text = output.text();
    match verb {
        Verb::Topics(v) => topics::topics(&client, v, text).await,
        Verb::Subs(v) => subs::subs(&client, v, text).await,
        Verb::Groups(v) => topics::groups(&client, v, text).await,
        Verb::Publish(args) => publish::publish(&client, args, text).await,
        Verb::Tail(args) => tail::tail(&client, args, text).await,
        Verb::Receive(args) => queues::receive(&client, args, text).await,
        Verb::Peek(args) => queues::peek(&client, args, text).await,
        Verb::Ack(args) => settle::ack(&client, args, text).await,
        Verb::Nack(args) => settle::nack(&client, args, text).await,
        Verb::Visibility(args) => settle::visibility(&client, args, text).await,
        Verb::Dlq(v) => dlq::dlq(&client, v, text).await,
    }
}

/// How an error is told: an `error:` line, then a `hint:` line where one helps.
pub fn describe_error(error: &Error, connection: &Connection) -> String {
    let url = errors::complete_url(&connection.url).unwrap_or_else(|_| connection.url.clone());
    match errors::describe(error, &url) {
        (line, Some(hint)) => format!("{line}\n{hint}"),
        (line, None) => line,
    }
}
