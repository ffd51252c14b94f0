//! `sluice receive`: take messages from a subscription, printing each with its receipt;
//! `sluice peek`: look at the visible ones without taking them.

use std::io::Write;

use clap::Args;
use sluice_client::{Client, Error, Receive};

use super::output::{count, print_event, print_message, say};

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
}

pub async fn receive(client: &Client, args: ReceiveArgs, text: bool) -> Result<(), Error> {
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
            let _ = print_message(&mut out, &args.topic, message, text);
        }
        let _ = out.flush();
        if args.ack {
            let receipts: Vec<String> = received.messages.into_iter().map(|m| m.receipt).collect();
            acked += client.ack(&args.topic, &args.sub, &receipts).await?.iter().filter(|r| r.ok).count();
        }
    }
    let acked = if args.ack { format!(", acked {acked}") } else { String::new() };
    eprintln!("received {}{acked}", count(got, "message", "messages"));
    Ok(())
}

#[derive(Args, Debug)]
pub struct PeekArgs {
    topic: String,
    sub: String,
    /// Most messages to show (1 to 100).
    #[arg(long, default_value_t = 10)]
    count: u32,
}

/// Prints the visible messages, each with its receive count so far; nothing is received.
pub async fn peek(client: &Client, args: PeekArgs, text: bool) -> Result<(), Error> {
    let messages = client.peek(&args.topic, &args.sub, args.count).await?;
    let mut out = std::io::stdout().lock();
    for message in &messages {
        let written = if text {
            write!(out, "[{}] ", count(message.receive_count, "receive", "receives"))
                .and_then(|()| print_event(&mut out, &args.topic, &message.event, true))
        } else {
            let mut value = serde_json::to_value(message).unwrap_or_default();
            value["topic"] = serde_json::Value::from(args.topic.as_str());
            writeln!(out, "{value}")
        };
        if written.is_err() {
            return Ok(()); // The reader went away (`| head`).
        }
    }
    if text && messages.is_empty() {
        say!("no visible messages in {}/{}", args.topic, args.sub);
    }
    Ok(())
}
