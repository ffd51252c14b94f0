//! `sluice subs …`, `sluice receive` and `sluice dlq …`.

use std::io::Write;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use sluice_client::{Client, Error, Receive};

use super::output::{print_json, print_message, Format};

#[derive(Subcommand, Debug)]
pub enum SubVerb {
    /// Create a subscription (or find it with exactly these settings).
    #[command(
        after_help = "Examples:\n  sluice subs create orders billing --start earliest --max-receive-count 3\n  \
                            sluice subs create orders paid --settings '{\"filter\": {\"value\": {\"status\": [\"paid\"]}}}'"
    )]
    Create {
        topic: String,
        sub: String,
        /// `latest` (default) or `earliest`.
        #[arg(long)]
        start: Option<String>,
        #[arg(long)]
        visibility_timeout_ms: Option<u64>,
        #[arg(long)]
        max_receive_count: Option<u32>,
        /// Any other settings, as the JSON body docs/API.md describes (filter, push, ordering, …).
        #[arg(long)]
        settings: Option<String>,
    },
    /// List a topic's subscriptions.
    #[command(after_help = "Example:\n  sluice subs list orders")]
    List { topic: String },
    /// A subscription with its backlog: visible, in flight, delayed, dead, expired, filtered.
    #[command(after_help = "Example:\n  sluice subs describe orders billing")]
    Describe { topic: String, sub: String },
    /// Delete a subscription.
    #[command(after_help = "Example:\n  sluice subs delete orders billing")]
    Delete { topic: String, sub: String },
}

pub async fn subs(client: &Client, verb: SubVerb) -> Result<(), Error> {
    match verb {
        SubVerb::Create { topic, sub, start, visibility_timeout_ms, max_receive_count, settings } => {
            let mut body: Value = match settings {
                Some(text) => serde_json::from_str(&text).map_err(|e| Error::Invalid(format!("--settings: {e}")))?,
                None => json!({}),
            };
            for (name, value) in [
                ("start", start.map(Value::from)),
                ("visibility_timeout_ms", visibility_timeout_ms.map(Value::from)),
                ("max_receive_count", max_receive_count.map(Value::from)),
            ] {
                if let Some(value) = value {
                    body[name] = value;
                }
            }
            print_json(&client.create_subscription(&topic, &sub, &body).await?);
        }
        SubVerb::List { topic } => {
            for sub in client.list_subscriptions(&topic).await? {
                println!("{}", sub["name"].as_str().unwrap_or_default());
            }
        }
        SubVerb::Describe { topic, sub } => print_json(&client.describe_subscription(&topic, &sub).await?),
        SubVerb::Delete { topic, sub } => {
            client.delete_subscription(&topic, &sub).await?;
            eprintln!("subscription {topic}/{sub} deleted");
        }
    }
    Ok(())
}

#[derive(Args, Debug)]
pub struct ReceiveArgs {
    topic: String,
    sub: String,
    /// Most messages to receive.
    #[arg(long, default_value_t = 1)]
    count: u32,
    /// Ack the messages once printed (else they come back after their visibility timeout).
    #[arg(long)]
    ack: bool,
    /// How long to wait for a first message.
    #[arg(long, default_value_t = 1_000)]
    wait_ms: u64,
    #[arg(long, value_enum, default_value = "auto")]
    format: Format,
}

pub async fn receive(client: &Client, args: ReceiveArgs) -> Result<(), Error> {
    let (mut got, mut acked) = (0, 0);
    let mut out = std::io::stdout().lock();
    while got < args.count {
        let request =
            Receive { max_messages: (args.count - got).min(100), wait_ms: args.wait_ms, ..Default::default() };
        let received = client.receive(&args.topic, &args.sub, &request).await?;
        if received.messages.is_empty() {
            break;
        }
        got += received.messages.len() as u32;
        for message in &received.messages {
            let _ = print_message(&mut out, &args.topic, message, args.format.pretty());
        }
        let _ = out.flush();
        if args.ack {
            let receipts: Vec<String> = received.messages.into_iter().map(|m| m.receipt).collect();
            acked += client.ack(&args.topic, &args.sub, &receipts).await?.iter().filter(|r| r.ok).count();
        }
    }
    eprintln!("received {got} messages{}", if args.ack { format!(", acked {acked}") } else { String::new() });
    Ok(())
}

#[derive(Subcommand, Debug)]
pub enum DlqVerb {
    /// Print the dead letters (NDJSON when piped).
    #[command(after_help = "Example:\n  sluice dlq list orders billing")]
    List {
        topic: String,
        sub: String,
        /// Most dead letters to print (default: all).
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Put dead letters back in the queue, visible at once.
    #[command(after_help = "Example:\n  sluice dlq redrive orders billing")]
    Redrive { topic: String, sub: String },
    /// Remove every dead letter.
    #[command(after_help = "Example:\n  sluice dlq purge orders billing")]
    Purge { topic: String, sub: String },
}

pub async fn dlq(client: &Client, verb: DlqVerb) -> Result<(), Error> {
    match verb {
        DlqVerb::List { topic, sub, limit } => {
            let (mut after, mut printed) = (None::<String>, 0);
            loop {
                let page = client.dead_letters(&topic, &sub, 1000, after.as_deref()).await?;
                for letter in page.dead_letters.iter().take(limit.map_or(usize::MAX, |l| l - printed)) {
                    println!("{}", serde_json::to_string(letter).unwrap_or_default());
                    printed += 1;
                }
                after = page.next;
                if after.is_none() || limit.is_some_and(|l| printed >= l) {
                    break;
                }
            }
        }
        DlqVerb::Redrive { topic, sub } => {
            let dead = client.describe_subscription(&topic, &sub).await?["backlog"]["dead"].as_u64().unwrap_or(0);
            let progress = ProgressBar::new(dead);
            progress.set_style(
                ProgressStyle::with_template("{bar:40} {pos}/{len} redriven")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            let mut total = 0;
            // In steps of 1,000, so the bar moves; each step is sent once (a bounded redrive
            // is not retried). It ends at a short step, or once as many as were dead went
            // back: messages that die again meanwhile are left for the next redrive.
            loop {
                let redriven = client.redrive(&topic, &sub, Some(1_000)).await?;
                total += redriven;
                progress.inc(redriven);
                if redriven < 1_000 || total >= dead {
                    break;
                }
            }
            progress.finish_and_clear();
            eprintln!("redrove {total} dead letters of {topic}/{sub}");
        }
        DlqVerb::Purge { topic, sub } => {
            let purged = client.purge_dead_letters(&topic, &sub).await?;
            eprintln!("purged {purged} dead letters of {topic}/{sub}");
        }
    }
    Ok(())
}
