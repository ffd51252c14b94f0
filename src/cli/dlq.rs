//! `sluice dlq …`: list, delete, redrive and purge a subscription's dead letters.

use std::io::Write;

use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use sluice_client::{Client, DeadLetter, Error};

use super::output::{count, print_change, rfc3339, say};

#[derive(Subcommand, Debug)]
pub enum DlqVerb {
    /// Print the dead letters: one line each on a terminal, NDJSON when piped.
    #[command(after_help = "Example:\n  sluice dlq list orders billing --limit 20")]
    List {
        topic: String,
        sub: String,
        /// Most dead letters to print (default: all).
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Remove dead letters for good, by id (`dlq list` shows them: `PARTITION-OFFSET`).
    #[command(after_help = "Example:\n  sluice dlq delete orders billing 0-17 3-1204")]
    Delete {
        topic: String,
        sub: String,
        /// Dead letter ids, as `dlq list` shows them.
        #[arg(required = true, num_args = 1..)]
        ids: Vec<String>,
    },
    /// Put dead letters back in the queue, visible at once, their receive counts at 0.
    #[command(
        after_help = "Examples:\n  sluice dlq redrive orders billing\n  sluice dlq redrive orders billing --max 100"
    )]
    Redrive {
        topic: String,
        sub: String,
        /// Redrive at most this many (default: every one dead when it starts).
        #[arg(long)]
        max: Option<u64>,
    },
    /// Remove every dead letter.
    #[command(after_help = "Example:\n  sluice dlq purge orders billing")]
    Purge { topic: String, sub: String },
}

pub async fn dlq(client: &Client, verb: DlqVerb, text: bool) -> Result<(), Error> {
    match verb {
        DlqVerb::List { topic, sub, limit } => list(client, &topic, &sub, limit, text).await?,
        DlqVerb::Delete { topic, sub, ids } => {
            for id in &ids {
                client.delete_dead_letter(&topic, &sub, id).await?;
            }
            let sentence =
                format!("deleted {} of {topic}/{sub}", count(ids.len() as u64, "dead letter", "dead letters"));
            print_change(text, &sentence, &json!({ "deleted": ids }));
        }
        DlqVerb::Redrive { topic, sub, max } => {
            let total = redrive(client, &topic, &sub, max).await?;
            let sentence = format!("redrove {} of {topic}/{sub}", count(total, "dead letter", "dead letters"));
            print_change(text, &sentence, &json!({ "redriven": total }));
        }
        DlqVerb::Purge { topic, sub } => {
            let purged = client.purge_dead_letters(&topic, &sub).await?;
            let sentence = format!("purged {} of {topic}/{sub}", count(purged, "dead letter", "dead letters"));
            print_change(text, &sentence, &json!({ "purged": purged }));
        }
    }
    Ok(())
}

async fn list(client: &Client, topic: &str, sub: &str, limit: Option<usize>, text: bool) -> Result<(), Error> {
    let (mut after, mut printed) = (None::<String>, 0);
    let mut out = std::io::stdout().lock();
    loop {
        let page = client.dead_letters(topic, sub, 1000, after.as_deref()).await?;
        for letter in page.dead_letters.iter().take(limit.map_or(usize::MAX, |l| l - printed)) {
            let line = if text { describe(letter) } else { serde_json::to_string(letter).unwrap_or_default() };
            if writeln!(out, "{line}").is_err() {
                return Ok(()); // The reader went away (`| head`).
            }
            printed += 1;
        }
        after = page.next;
        if after.is_none() || limit.is_some_and(|l| printed >= l) {
            break;
        }
    }
    if text && printed == 0 {
        say!("no dead letters in {topic}/{sub}");
    }
    Ok(())
}

/// `0-17  max_receive_count_exceeded after 5 receives, dead since …  {"order": 42}`.
fn describe(letter: &DeadLetter) -> String {
    let event = match &letter.event {
        Some(event) => event.get("value").map_or_else(|| event.to_string(), ToString::to_string),
        None => "(no longer in the log)".into(),
    };
    format!(
        "{}  {} after {}, dead since {}  {event}",
        letter.id,
        letter.reason,
        count(letter.receive_count, "receive", "receives"),
        rfc3339(letter.dead_ms)
    )
}

/// Redrives in steps of 1,000, so the bar moves; each step is sent once (a bounded redrive
/// is not retried). It ends at a short step, at `max`, or once as many as were dead went
/// back: messages that die again meanwhile are left for the next redrive.
async fn redrive(client: &Client, topic: &str, sub: &str, max: Option<u64>) -> Result<u64, Error> {
    let dead = client.describe_subscription(topic, sub).await?["backlog"]["dead"].as_u64().unwrap_or(0);
    let goal = max.map_or(dead, |m| m.min(dead));
    let progress = ProgressBar::new(goal);
    progress.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} redriven").unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut total = 0;
    while total < goal {
        let step = (goal - total).min(1_000);
        let redriven = client.redrive(topic, sub, Some(step)).await?;
        total += redriven;
        progress.inc(redriven);
        if redriven < step {
            break;
        }
    }
    progress.finish_and_clear();
    Ok(total)
}
