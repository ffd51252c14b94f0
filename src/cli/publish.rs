//! `sluice publish TOPIC`: events from arguments or stdin, through the batching producer.

use std::collections::BTreeMap;
use std::time::Instant;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use sluice_client::{Client, Delivery, Error, Producer, ProducerConfig, Record};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::output::{count, print_json, say};

#[derive(Args, Debug)]
pub struct PublishArgs {
    topic: String,
    /// Events to publish; without any, one event per line of stdin. Each is JSON if it
    /// parses as JSON, else text (published as a JSON string).
    values: Vec<String>,
    /// The key of every event (it picks the partition).
    #[arg(long, conflicts_with = "key_field")]
    key: Option<String>,
    /// Take each event's key from this field of its JSON object.
    #[arg(long)]
    key_field: Option<String>,
    /// A header of every event, `name=value` (repeatable).
    #[arg(long = "header", value_parser = parse_header)]
    headers: Vec<(String, String)>,
    /// Deliver no event before TIME (RFC 3339, or milliseconds since the epoch): they are
    /// in the log at once, for replay and groups; queues and push wait.
    #[arg(long, value_name = "TIME", value_parser = parse_time, conflicts_with = "delay_ms")]
    deliver_at: Option<i64>,
    /// Deliver no event before N milliseconds after the server accepts it.
    #[arg(long, value_name = "N")]
    delay_ms: Option<u64>,
}

/// RFC 3339 or milliseconds since the epoch, as milliseconds.
fn parse_time(s: &str) -> Result<i64, String> {
    s.parse::<i64>().or_else(|_| {
        time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
            .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
            .map_err(|e| format!("`{s}` is neither RFC 3339 nor milliseconds since the epoch: {e}"))
    })
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    s.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())).ok_or_else(|| format!("`{s}` is not name=value"))
}

impl PublishArgs {
    fn record(&self, line: &str) -> Record {
        let value = serde_json::from_str::<Value>(line).unwrap_or_else(|_| Value::String(line.to_owned()));
        let key = self.key.clone().or_else(|| {
            let field = value.get(self.key_field.as_deref()?).filter(|v| !v.is_null())?;
            Some(field.as_str().map_or_else(|| field.to_string(), str::to_owned))
        });
        let mut record = Record::json(value);
        record.key = key;
        record.headers = self.headers.iter().cloned().collect();
        (record.deliver_at_ms, record.delay_ms) = (self.deliver_at, self.delay_ms);
        record
    }
}

pub async fn publish(client: &Client, args: PublishArgs, text: bool) -> Result<(), Error> {
    let started = Instant::now();
    let config =
        ProducerConfig { max_batch_events: 1000, linger: std::time::Duration::from_millis(20), ..Default::default() };
    let producer = Producer::with_config(client.clone(), config);
    let (deliveries, mut landed) = tokio::sync::mpsc::channel::<Delivery>(50_000);
    let progress = ProgressBar::new_spinner();
    progress.set_style(
        ProgressStyle::with_template("{spinner} published: {pos} ({per_sec})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    let counter = progress.clone();
    // Deliveries are awaited in order by a task of their own, which counts what landed where.
    let collector = tokio::spawn(async move {
        let mut partitions: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        let (mut landed_count, mut first_error) = (0u64, None);
        while let Some(delivery) = landed.recv().await {
            match delivery.await {
                Ok(placed) => {
                    let range = partitions.entry(placed.partition).or_insert((placed.offset, placed.offset));
                    range.0 = range.0.min(placed.offset);
                    range.1 = range.1.max(placed.offset);
                    landed_count += 1;
                    counter.inc(1);
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        (partitions, landed_count, first_error)
    });
    let mut sent = 0u64;
    let send = |line: String| {
        let record = args.record(&line);
        let (producer, deliveries, topic) = (&producer, &deliveries, &args.topic);
        async move {
            let delivery = producer.send_record(topic, record).await?;
            deliveries.send(delivery).await.map_err(|_| Error::Closed)
        }
    };
    if args.values.is_empty() {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Some(line) = lines.next_line().await.map_err(|e| Error::Invalid(format!("reading stdin: {e}")))? {
            if !line.trim().is_empty() {
                send(line).await?;
                sent += 1;
            }
        }
    } else {
        for value in args.values.clone() {
            send(value).await?;
            sent += 1;
        }
    }
    if sent == 0 {
        // Only stdin can bring none: a script that meant to publish learns that it did not.
        progress.finish_and_clear();
        return Err(Error::Invalid(
            "nothing published: stdin had no events (blank lines are skipped); give events as arguments or one \
             per line on stdin"
                .into(),
        ));
    }
    producer.flush().await?;
    drop(deliveries);
    let (partitions, landed, first_error) = collector.await.map_err(|e| Error::Invalid(e.to_string()))?;
    progress.finish_and_clear();
    report(&args.topic, (sent, landed), &partitions, started.elapsed().as_secs_f64(), text);
    first_error.map_or(Ok(()), Err)
}

/// What a publish sent and landed, and each partition's first and last offset, told as a
/// sentence or JSON.
fn report(topic: &str, (sent, landed): (u64, u64), partitions: &BTreeMap<u32, (u64, u64)>, seconds: f64, text: bool) {
    if text {
        let spread: Vec<String> = partitions.iter().map(|(p, (lo, hi))| format!("{p}:{lo}..={hi}")).collect();
        say!(
            "published {landed} of {} to {topic} in {seconds:.1} s; partition:offsets {}",
            count(sent, "event", "events"),
            spread.join(" ")
        );
    } else {
        let spread: BTreeMap<String, Value> =
            partitions.iter().map(|(p, (lo, hi))| (p.to_string(), json!({"first": lo, "last": hi}))).collect();
        print_json(&json!({"topic": topic, "sent": sent, "published": landed, "partitions": spread}));
    }
}
