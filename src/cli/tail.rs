//! `sluice tail TOPIC`: replay partitions from a point, follow them, or read as a member
//! of a consumer group.

use std::io::{BufWriter, Write};

use clap::Args;
use sluice_client::{Client, ConsumerConfig, Error, Event, From, GroupConsumer, TopicDescription};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, watch};

use super::output::{count, parse_time, print_event};

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
    /// Read as a member of this consumer group, committing what it printed; Ctrl-C (or
    /// SIGTERM) commits and leaves the group, a second Ctrl-C exits at once.
    #[arg(long)]
    group: Option<String>,
}

pub async fn tail(client: &Client, args: TailArgs, text: bool) -> Result<(), Error> {
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut print = |batch: &[Event]| -> bool {
        let written: std::io::Result<()> =
            batch.iter().try_for_each(|e| print_event(&mut out, &args.topic, e, text)).and_then(|()| out.flush());
        // An error: the reader of our output went away (`| head`).
        written.is_ok()
    };
    if let Some(group) = &args.group {
        return as_member(client.clone(), group, &args.topic, args.follow, &mut print).await;
    }
    let described = client.describe_topic(&args.topic).await?;
    let partitions = match args.partition {
        Some(p) => vec![p],
        None => (0..described.partitions).collect(),
    };
    let (events, mut printing) = mpsc::channel::<Vec<Event>>(64);
    let replaying = Replay { client: client.clone(), described, from: args.from.clone(), follow: args.follow };
    let reader = tokio::spawn(replaying.run(partitions, events));
    while let Some(batch) = printing.recv().await {
        if !print(&batch) {
            reader.abort();
            return Ok(());
        }
    }
    reader.await.map_err(|e| Error::Invalid(e.to_string()))?
}

/// A replay of a topic's partitions from `--from`.
struct Replay {
    client: Client,
    /// The topic as it was when the tail started: its partitions' ranges.
    described: TopicDescription,
    from: String,
    follow: bool,
}

impl Replay {
    /// Each partition from its start, in order: one after the other, or side by side when
    /// following.
    async fn run(self, partitions: Vec<u32>, out: mpsc::Sender<Vec<Event>>) -> Result<(), Error> {
        let (client, topic) = (&self.client, &self.described.name);
        let mut starts = Vec::new();
        for &p in &partitions {
            starts.push((p, self.start_of(p).await?));
        }
        if !self.follow {
            for (p, start) in starts {
                read_partition(client, topic, p, start, false, &out).await?;
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

    async fn start_of(&self, partition: u32) -> Result<From, Error> {
        let topic = &self.described.name;
        Ok(match self.from.as_str() {
            "earliest" => From::Earliest,
            "latest" => From::Latest,
            from => match from.parse::<u64>() {
                Ok(offset) => From::Offset(offset_in(&self.described, partition, offset)?),
                Err(_) => {
                    From::Offset(self.client.offset_for_time(topic, partition, parse_time("--from", from)?).await?)
                }
            },
        })
    }
}

/// `--from N` in one partition: N, or the partition's log end when it is shorter (so a
/// tail over partitions of unequal lengths reads each from N on). A partition whose log
/// now begins after N cannot serve it, and is named.
fn offset_in(topic: &TopicDescription, partition: u32, offset: u64) -> Result<u64, Error> {
    let Some(state) = topic.partition_states.iter().find(|s| s.partition == partition) else {
        let has = count(topic.partitions, "partition", "partitions");
        return Err(Error::Invalid(format!("{} has no partition {partition} (it has {has})", topic.name)));
    };
    if offset < state.log_start_offset {
        return Err(Error::Invalid(format!(
            "--from {offset}: partition {partition} of {} now begins at offset {} (retention removed the events \
             before it); try --from earliest, or a time",
            topic.name, state.log_start_offset
        )));
    }
    Ok(offset.min(state.high_watermark))
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

/// Polls as a member of `group`; without `follow`, until a poll finds nothing new. Each
/// batch is committed once printed, and only then: a reader that goes away (`| head`)
/// leaves the rest to the group. On SIGINT or SIGTERM it stops polling and leaves, so its
/// partitions go to the other members at once rather than at its session timeout.
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
    let mut stop = stop_signals()?;
    let (mut printed_any, mut joined) = (false, false);
    while !*stop.borrow() {
        // A poll is dropped at a signal once the member has joined (it can still leave); the
        // poll that joins is let finish, else the server would hold a member nobody can
        // name until its session timeout. Its events are then printed and committed.
        let events = if joined {
            tokio::select! {
                polled = consumer.poll() => polled?,
                _ = stop.changed() => break,
            }
        } else {
            consumer.poll().await?
        };
        joined = true;
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

/// Becomes `true` at the first SIGINT or SIGTERM; the second exits the process at once.
fn stop_signals() -> Result<watch::Receiver<bool>, Error> {
    let listen = |kind| signal(kind).map_err(|e| Error::Invalid(format!("cannot listen for signals: {e}")));
    let (mut interrupt, mut terminate) = (listen(SignalKind::interrupt())?, listen(SignalKind::terminate())?);
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        for signals in 0.. {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
            if signals > 0 {
                std::process::exit(130);
            }
            eprintln!("stopping: committing and leaving group (Ctrl-C again to quit at once)");
            let _ = stop.send(true);
        }
    });
    Ok(stopped)
}

#[cfg(test)]
mod tests {
    use sluice_client::{PartitionState, Upkeep};

    use super::*;

    #[test]
    fn given_from_an_offset_then_each_partition_starts_there_or_at_its_end_and_a_trimmed_one_is_named() {
        let state = |partition, log_start_offset, high_watermark| PartitionState {
            partition,
            log_start_offset,
            high_watermark,
            bytes: 0,
        };
        let upkeep = Upkeep {
            segments_expired: 0,
            bytes_expired: 0,
            segments_merged: 0,
            segments_written: 0,
            last_change_ms: 0,
        };
        let topic = TopicDescription {
            name: "orders".into(),
            partitions: 3,
            retention_ms: None,
            retention_bytes: None,
            created_ms: 0,
            partition_states: vec![state(0, 0, 10), state(1, 0, 2), state(2, 7, 12)],
            upkeep,
        };
        assert_eq!(offset_in(&topic, 0, 5).unwrap(), 5);
        assert_eq!(offset_in(&topic, 1, 5).unwrap(), 2, "a shorter partition starts at its end");
        let trimmed = offset_in(&topic, 2, 5).unwrap_err().to_string();
        assert!(trimmed.contains("partition 2 of orders now begins at offset 7"), "{trimmed}");
        let missing = offset_in(&topic, 3, 0).unwrap_err().to_string();
        assert!(missing.contains("orders has no partition 3 (it has 3 partitions)"), "{missing}");
    }
}
