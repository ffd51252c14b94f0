//! `sluice ack`, `sluice nack` and `sluice visibility`: settle received messages by their
//! receipts. Each receipt's outcome is printed; any receipt that did nothing makes the
//! exit 1, after the others were settled.

use clap::Args;
use serde_json::json;
use sluice_client::{Client, Error, ReceiptResult};

use super::output::{count, print_json, say};

/// The subscription and the receipts a settle takes.
#[derive(Args, Debug)]
pub struct Receipts {
    topic: String,
    sub: String,
    /// Receipts, as `receive` printed them (at most 100).
    #[arg(required = true, num_args = 1..)]
    receipts: Vec<String>,
}

#[derive(Args, Debug)]
pub struct AckArgs {
    #[command(flatten)]
    receipts: Receipts,
}

#[derive(Args, Debug)]
pub struct NackArgs {
    #[command(flatten)]
    receipts: Receipts,
    /// How long before the messages are visible again (0: at once).
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
}

#[derive(Args, Debug)]
pub struct VisibilityArgs {
    #[command(flatten)]
    receipts: Receipts,
    /// How long from now the messages stay hidden (0: visible again at once).
    #[arg(long, required = true)]
    timeout_ms: u64,
}

pub async fn ack(client: &Client, args: AckArgs, text: bool) -> Result<(), Error> {
    let Receipts { topic, sub, receipts } = &args.receipts;
    let results = client.ack(topic, sub, receipts).await?;
    report(receipts, &results, text, &format!("acked {} of {topic}/{sub}", settled(&results)))
}

pub async fn nack(client: &Client, args: NackArgs, text: bool) -> Result<(), Error> {
    let Receipts { topic, sub, receipts } = &args.receipts;
    let results = client.nack(topic, sub, receipts, args.delay_ms).await?;
    let when = if args.delay_ms == 0 { "now".to_owned() } else { format!("in {} ms", args.delay_ms) };
    report(receipts, &results, text, &format!("gave back {} of {topic}/{sub}, visible {when}", settled(&results)))
}

pub async fn visibility(client: &Client, args: VisibilityArgs, text: bool) -> Result<(), Error> {
    let Receipts { topic, sub, receipts } = &args.receipts;
    let results = client.change_visibility(topic, sub, receipts, args.timeout_ms).await?;
    let sentence = if args.timeout_ms == 0 {
        format!("made {} of {topic}/{sub} visible again", settled(&results))
    } else {
        format!(
            "kept {} of {topic}/{sub} hidden for {} ms; the receipts to use from now on:",
            settled(&results),
            args.timeout_ms
        )
    };
    if text {
        say!("{sentence}");
        for (sent, result) in receipts.iter().zip(&results) {
            if let (true, Some(new)) = (result.ok, &result.receipt) {
                say!("  {sent} -> {new}");
            }
        }
        return failures(receipts, &results);
    }
    report(receipts, &results, false, &sentence)
}

fn settled(results: &[ReceiptResult]) -> String {
    count(results.iter().filter(|r| r.ok).count() as u64, "message", "messages")
}

/// Prints the sentence (or `{"results": […]}`), then fails if a receipt did nothing.
fn report(receipts: &[String], results: &[ReceiptResult], text: bool, sentence: &str) -> Result<(), Error> {
    if text {
        say!("{sentence}");
    } else {
        print_json(&json!({ "results": results }));
    }
    failures(receipts, results)
}

/// An error naming each receipt that did nothing, and why.
fn failures(receipts: &[String], results: &[ReceiptResult]) -> Result<(), Error> {
    let failed: Vec<String> = receipts
        .iter()
        .zip(results)
        .filter(|(_, r)| !r.ok)
        .map(|(receipt, r)| {
            let why = r.error.as_ref().map_or("refused".to_owned(), |e| format!("{}: {}", e.code, e.message));
            format!("{receipt} ({why})")
        })
        .collect();
    if failed.is_empty() {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "{} did nothing: {}",
        count(failed.len() as u64, "receipt", "receipts"),
        failed.join("; ")
    )))
}
