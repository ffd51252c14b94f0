//! `sluice topics …` and `sluice groups …`.

use clap::Subcommand;
use sluice_client::{Client, Error, GroupDescription, SeekTo, TopicSettings};

use super::output::print_json;

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

pub async fn topics(client: &Client, verb: TopicVerb) -> Result<(), Error> {
    match verb {
        TopicVerb::Create { name, partitions, retention_ms, retention_bytes } => {
            let settings = TopicSettings { partitions: Some(partitions), retention_ms, retention_bytes };
            let topic = client.create_topic(&name, &settings).await?;
            eprintln!("topic {} has {} partitions", topic.name, topic.partitions);
        }
        TopicVerb::List => {
            for topic in client.list_topics().await? {
                println!("{}\t{} partitions", topic.name, topic.partitions);
            }
        }
        TopicVerb::Describe { name } => print_json(&client.describe_topic(&name).await?),
        TopicVerb::Delete { name } => {
            client.delete_topic(&name).await?;
            eprintln!("topic {name} deleted");
        }
    }
    Ok(())
}

#[derive(Subcommand, Debug)]
pub enum GroupVerb {
    /// List every group.
    #[command(after_help = "Example:\n  sluice groups list")]
    List,
    /// Members, assignment, committed offsets and lag (JSON when piped).
    #[command(after_help = "Example:\n  sluice groups describe billing")]
    Describe { group: String },
    /// Move the group's committed offsets: `--to earliest|latest`, `--offset N` or `--timestamp-ms MS`.
    #[command(after_help = "Examples:\n  sluice groups seek billing --topic orders --to earliest\n  \
                            sluice groups seek billing --topic orders --partition 3 --offset 1200")]
    Seek {
        group: String,
        /// The topic (default: every topic the group reads).
        #[arg(long)]
        topic: Option<String>,
        /// Only these partitions of `--topic` (repeatable).
        #[arg(long = "partition", requires = "topic")]
        partitions: Vec<u32>,
        #[arg(long, value_parser = ["earliest", "latest"], required_unless_present_any = ["offset", "timestamp_ms"])]
        to: Option<String>,
        #[arg(long, conflicts_with_all = ["to", "timestamp_ms"])]
        offset: Option<u64>,
        #[arg(long, conflicts_with = "to")]
        timestamp_ms: Option<i64>,
    },
    /// Delete a group and its offsets (refused while it has members).
    #[command(after_help = "Example:\n  sluice groups delete billing")]
    Delete { group: String },
}

pub async fn groups(client: &Client, verb: GroupVerb) -> Result<(), Error> {
    match verb {
        GroupVerb::List => client.list_groups().await?.iter().for_each(|g| println!("{g}")),
        GroupVerb::Describe { group } => {
            let described = client.describe_group(&group).await?;
            if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
                print_group(&described);
            } else {
                print_json(&described);
            }
        }
        GroupVerb::Seek { group, topic, partitions, to, offset, timestamp_ms } => {
            let target = match (to.as_deref(), offset, timestamp_ms) {
                (Some("latest"), _, _) => SeekTo::Latest,
                (Some(_), _, _) => SeekTo::Earliest,
                (None, Some(offset), _) => SeekTo::Offset(offset),
                (None, None, Some(ms)) => SeekTo::Timestamp(ms),
                (None, None, None) => return Err(Error::Invalid("say where: --to, --offset or --timestamp-ms".into())),
            };
            let offsets = client.seek_group(&group, topic.as_deref(), &partitions, target).await?;
            for o in offsets {
                println!("{}/{}\t{}", o.topic, o.partition, o.offset);
            }
        }
        GroupVerb::Delete { group } => {
            client.delete_group(&group).await?;
            eprintln!("group {group} deleted");
        }
    }
    Ok(())
}

/// A group as a table, for people.
fn print_group(group: &GroupDescription) {
    println!("group {}  generation {}  lag {}", group.group, group.generation, group.lag);
    println!("members:");
    for m in &group.members {
        let assigned: Vec<String> = m.assignment.iter().map(|tp| format!("{}/{}", tp.topic, tp.partition)).collect();
        println!("  {}  [{}]", m.member_id, assigned.join(", "));
    }
    println!("{:<24} {:>9} {:>12} {:>12} {:>10}  member", "partition", "committed", "log start", "high mark", "lag");
    for p in &group.partitions {
        let committed = p.committed_offset.map_or("-".to_owned(), |o| o.to_string());
        let tp = format!("{}/{}", p.topic, p.partition);
        let owner = p.member_id.as_deref().unwrap_or("-");
        println!("{tp:<24} {committed:>9} {:>12} {:>12} {:>10}  {owner}", p.log_start_offset, p.high_watermark, p.lag);
    }
}
