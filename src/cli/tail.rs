//! `sluice tail TOPIC`: replay partitions from a point, follow them, or read as a member
//! of a consumer group.

use std::io::{BufWriter, Write};

use clap::Args;
use sluice_client::{Client, ConsumerConfig, Error, Event, From, GroupConsumer};
use tokio::sync::mpsc;

use super::output::{print_event, Format};

#[derive(Args, Debug)]
pub struct TailArgs {
    topic: String,
    /// Only this partition (default: all of them).
    #[arg(long, conflicts_with = "group")]
    partition: Option<u32>,
    /// Where to start: `earliest`, `latest`, an offset, or a time (RFC 3339, e.g.
    /// 2026-12-01T00:00:00Z: each partition's first event at or after it).
    #[arg(long, default_value = "earliest", conflicts_with = "group")]
    from: String,
    /// Keep waiting for new events (until Ctrl-C).
    #[arg(long)]
    follow: bool,
    /// Read as a member of this consumer group (committing what it printed).
    #[arg(long)]
    group: Option<String>,
    /// `auto`: pretty on a terminal, NDJSON when piped.
    #[arg(long, value_enum, default_value = "auto")]
    format: Format,
}

pub async fn tail(client: &Client, args: TailArgs) -> Result<(), Error> {
    let pretty = args.format.pretty();
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut print = |batch: &[Event]| -> bool {
        let written: std::io::Result<()> =
            batch.iter().try_for_each(|e| print_event(&mut out, &args.topic, e, pretty)).and_then(|()| out.flush());
        // An error: the reader of our output went away (`| head`).
        written.is_ok()
    };
    if let Some(group) = &args.group {
        return as_member(client.clone(), group, &args.topic, args.follow, &mut print).await;
    }
    let partitions = match args.partition {
        Some(p) => vec![p],
        None => (0..client.describe_topic(&args.topic).await?.partitions).collect(),
    };
    let (events, mut printing) = mpsc::channel::<Vec<Event>>(64);
    let reader =
        tokio::spawn(replay(client.clone(), args.topic.clone(), partitions, args.from.clone(), args.follow, events));
    while let Some(batch) = printing.recv().await {
        if !print(&batch) {
            reader.abort();
            return Ok(());
        }
    }
    reader.await.map_err(|e| Error::Invalid(e.to_string()))?
}

/// Each partition from its start, in order: one after the other, or side by side when following.
async fn replay(
    client: Client,
    topic: String,
    partitions: Vec<u32>,
    from: String,
    follow: bool,
    out: mpsc::Sender<Vec<Event>>,
) -> Result<(), Error> {
    let mut starts = Vec::new();
    for &p in &partitions {
        starts.push((p, start_of(&client, &topic, p, &from).await?));
    }
    if !follow {
        for (p, start) in starts {
            read_partition(&client, &topic, p, start, false, &out).await?;
        }
        return Ok(());
    }
    let mut readers = tokio::task::JoinSet::new();
    for (p, start) in starts {
        let (client, topic, out) = (client.clone(), topic.clone(), out.clone());
        readers.spawn(async move { read_partition(&client, &topic, p, start, true, &out).await });
    }
    // The first partition that fails stops the tail (retention overtook it, the topic went).
    while let Some(ended) = readers.join_next().await {
        ended.map_err(|e| Error::Invalid(e.to_string()))??;
    }
    Ok(())
}

/// Reads one partition from `start` to its high watermark, or on and on when following.
async fn read_partition(
    client: &Client,
    topic: &str,
    partition: u32,
    start: From,
    follow: bool,
    out: &mpsc::Sender<Vec<Event>>,
) -> Result<(), Error> {
    let mut at = start;
    loop {
        let page = client.read(topic, partition, at, 1000, if follow { 5_000 } else { 0 }).await?;
        let done = page.next_offset >= page.high_watermark && !follow;
        at = From::Offset(page.next_offset);
        if !page.events.is_empty() && out.send(page.events).await.is_err() {
            return Ok(());
        }
        if done {
            return Ok(());
        }
    }
}

async fn start_of(client: &Client, topic: &str, partition: u32, from: &str) -> Result<From, Error> {
    Ok(match from {
        "earliest" => From::Earliest,
        "latest" => From::Latest,
        _ => match from.parse::<u64>() {
            Ok(offset) => From::Offset(offset),
            Err(_) => {
                let time = time::OffsetDateTime::parse(from, &time::format_description::well_known::Rfc3339).map_err(
                    |_| Error::Invalid(format!("--from {from}: not earliest, latest, an offset or an RFC 3339 time")),
                )?;
                let ms = (time.unix_timestamp_nanos() / 1_000_000) as i64;
                From::Offset(client.offset_for_time(topic, partition, ms).await?)
            }
        },
    })
}

/// Polls as a member of `group`; without `follow`, until a poll finds nothing new. Each
/// batch is committed once printed, and only then: a reader that goes away (`| head`)
/// leaves the rest to the group.
async fn as_member(
    client: Client,
    group: &str,
    topic: &str,
    follow: bool,
    print: &mut impl FnMut(&[Event]) -> bool,
) -> Result<(), Error> {
    let config =
        ConsumerConfig { wait_ms: if follow { 5_000 } else { 1_000 }, auto_commit: false, ..ConsumerConfig::default() };
    let mut consumer = GroupConsumer::new(client, group, &[topic]).with_config(config);
    let mut printed_any = false;
    loop {
        let events = consumer.poll().await?;
        if events.is_empty() && !follow && printed_any {
            break;
        }
        if events.is_empty() {
            // The first poll of a member that just (re)joined can come back empty.
            printed_any |= !follow;
            continue;
        }
        if !print(&events) {
            break;
        }
        printed_any = true;
        consumer.commit().await?;
    }
    consumer.leave().await
}
