//! `sluice topics …` and `sluice groups …`.

use clap::Subcommand;
use serde_json::json;
use sluice_client::{Client, Code, Error, GroupDescription, SeekTo, Topic, TopicDescription, TopicSettings};

use super::output::{count, parse_time, print_change, print_json, print_table, rfc3339, say};

#[derive(Subcommand, Debug)]
pub enum TopicVerb {
    /// Create a topic (or find it with exactly these settings).
    #[command(after_help = "Example:\n  sluice topics create orders --partitions 12")]
    Create {
        name: String,
        /// 1 to 1024.
        #[arg(long, default_value_t = 1)]
        partitions: u32,
        /// How long events are kept (default: the server's, 7 days).
        #[arg(long)]
        retention_ms: Option<u64>,
        /// The most bytes each partition keeps (default: no bound).
        #[arg(long)]
        retention_bytes: Option<u64>,
    },
    /// List every topic.
    #[command(after_help = "Example:\n  sluice topics list")]
    List,
    /// A topic with its partitions: log start, high watermark, bytes.
    #[command(after_help = "Example:\n  sluice topics describe orders")]
    Describe { name: String },
    /// Delete a topic, at once, everywhere.
    #[command(after_help = "Example:\n  sluice topics delete orders")]
    Delete { name: String },
}

pub async fn topics(client: &Client, verb: TopicVerb, text: bool) -> Result<(), Error> {
    match verb {
        TopicVerb::Create { name, partitions, retention_ms, retention_bytes } => {
            // A look first: the API answers a create and a find alike, with the topic.
            let existed = match client.describe_topic(&name).await {
                Ok(_) => true,
                Err(e) if e.code() == Some(Code::TopicNotFound) => false,
                Err(e) => return Err(e),
            };
            let settings = TopicSettings { partitions: Some(partitions), retention_ms, retention_bytes };
            let topic = client.create_topic(&name, &settings).await?;
            let sentence = if existed {
                format!("topic {} already exists with these settings", topic.name)
            } else {
                format!("created topic {} ({})", topic.name, count(topic.partitions, "partition", "partitions"))
            };
            print_change(text, &sentence, &topic);
        }
        TopicVerb::List => {
            let topics = client.list_topics().await?;
            if !text {
                print_json(&json!({ "topics": topics }));
                return Ok(());
            }
            let rows: Vec<Vec<String>> = topics.iter().map(topic_row).collect();
            print_table(&["name", "partitions", "retention ms", "retention bytes", "created"], &rows);
        }
        TopicVerb::Describe { name } => {
            let described = client.describe_topic(&name).await?;
            if text {
                print_topic(&described);
            } else {
                print_json(&described);
            }
        }
        TopicVerb::Delete { name } => {
            client.delete_topic(&name).await?;
            print_change(text, &format!("deleted topic {name}"), &json!({"topic": name, "deleted": true}));
        }
    }
    Ok(())
}

fn topic_row(topic: &Topic) -> Vec<String> {
    let or_default = |v: Option<i64>, none: &str| v.map_or(none.to_owned(), |n| n.to_string());
    vec![
        topic.name.clone(),
        topic.partitions.to_string(),
        or_default(topic.retention_ms, "default"),
        or_default(topic.retention_bytes, "-"),
        rfc3339(topic.created_ms),
    ]
}

/// A topic for people: its settings, then a table of its partitions.
fn print_topic(topic: &TopicDescription) {
    let retention =
        topic.retention_ms.map_or("the server's default retention".to_owned(), |ms| format!("kept {ms} ms"));
    let bound = topic.retention_bytes.map_or(String::new(), |b| format!(", at most {b} bytes a partition"));
    say!("topic {}  ({}, {retention}{bound})", topic.name, count(topic.partitions, "partition", "partitions"));
    let rows: Vec<Vec<String>> = topic
        .partition_states
        .iter()
        .map(|p| {
            let events = p.high_watermark - p.log_start_offset.min(p.high_watermark);
            [u64::from(p.partition), p.log_start_offset, p.high_watermark, events, p.bytes]
                .map(|n| n.to_string())
                .to_vec()
        })
        .collect();
    print_table(&["partition", "log start", "high mark", "events", "bytes"], &rows);
}

#[derive(Subcommand, Debug)]
pub enum GroupVerb {
    /// List every group.
    #[command(after_help = "Example:\n  sluice groups list")]
    List,
    /// Members, assignment, committed offsets and lag (JSON when piped).
    #[command(after_help = "Example:\n  sluice groups describe billing")]
    Describe { group: String },
    /// Move the group's committed offsets: `--to earliest|latest|TIME`, `--offset N` or
    /// `--timestamp-ms MS`.
    #[command(after_help = "Examples:\n  sluice groups seek billing --topic orders --to earliest\n  \
                            sluice groups seek billing --topic orders --to 2026-12-01T00:00:00Z\n  \
                            sluice groups seek billing --topic orders --partition 3 --offset 1200")]
    Seek {
        group: String,
        /// The topic (default: every topic the group reads).
        #[arg(long)]
        topic: Option<String>,
        /// Only these partitions of `--topic` (repeatable).
        #[arg(long = "partition", requires = "topic")]
        partitions: Vec<u32>,
        /// `earliest`, `latest`, or an RFC 3339 time (each partition's first event at or
        /// after it, as `tail --from`).
        #[arg(long, required_unless_present_any = ["offset", "timestamp_ms"])]
        to: Option<String>,
        /// This offset in each partition.
        #[arg(long, conflicts_with_all = ["to", "timestamp_ms"])]
        offset: Option<u64>,
        /// A time as milliseconds since the epoch.
        #[arg(long, conflicts_with = "to")]
        timestamp_ms: Option<i64>,
    },
    /// Delete a group and its offsets (refused while it has members).
    #[command(after_help = "Example:\n  sluice groups delete billing")]
    Delete { group: String },
}

pub async fn groups(client: &Client, verb: GroupVerb, text: bool) -> Result<(), Error> {
    match verb {
        GroupVerb::List => {
            let groups = client.list_groups().await?;
            if text {
                groups.iter().for_each(|g| say!("{g}"));
            } else {
                print_json(&json!({ "groups": groups }));
            }
        }
        GroupVerb::Describe { group } => {
            let described = client.describe_group(&group).await?;
            if text {
                print_group(&described);
            } else {
                print_json(&described);
            }
        }
        GroupVerb::Seek { group, topic, partitions, to, offset, timestamp_ms } => {
            let target = match (to.as_deref(), offset, timestamp_ms) {
                (Some("latest"), _, _) => SeekTo::Latest,
                (Some("earliest"), _, _) => SeekTo::Earliest,
                (Some(time), _, _) => SeekTo::Timestamp(parse_time("--to", time)?),
                (None, Some(offset), _) => SeekTo::Offset(offset),
                (None, None, Some(ms)) => SeekTo::Timestamp(ms),
                (None, None, None) => return Err(Error::Invalid("say where: --to, --offset or --timestamp-ms".into())),
            };
            let offsets = client.seek_group(&group, topic.as_deref(), &partitions, target).await?;
            if !text {
                print_json(&json!({ "offsets": offsets }));
                return Ok(());
            }
            say!("moved group {group} in {}:", count(offsets.len() as u64, "partition", "partitions"));
            let rows: Vec<Vec<String>> =
                offsets.iter().map(|o| vec![format!("{}/{}", o.topic, o.partition), o.offset.to_string()]).collect();
            print_table(&["partition", "offset"], &rows);
        }
        GroupVerb::Delete { group } => {
            client.delete_group(&group).await?;
            print_change(text, &format!("deleted group {group}"), &json!({"group": group, "deleted": true}));
        }
    }
    Ok(())
}

/// A group as a table, for people.
fn print_group(group: &GroupDescription) {
    say!("group {}  generation {}  lag {}", group.group, group.generation, group.lag);
    say!("members:");
    for m in &group.members {
        let assigned: Vec<String> = m.assignment.iter().map(|tp| format!("{}/{}", tp.topic, tp.partition)).collect();
        say!("  {}  [{}]", m.member_id, assigned.join(", "));
    }
    say!("{:<24} {:>9} {:>12} {:>12} {:>10}  member", "partition", "committed", "log start", "high mark", "lag");
    for p in &group.partitions {
        let committed = p.committed_offset.map_or("-".to_owned(), |o| o.to_string());
        let tp = format!("{}/{}", p.topic, p.partition);
        let owner = p.member_id.as_deref().unwrap_or("-");
        say!("{tp:<24} {committed:>9} {:>12} {:>12} {:>10}  {owner}", p.log_start_offset, p.high_watermark, p.lag);
    }
}
