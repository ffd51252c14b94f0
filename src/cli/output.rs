//! How verbs print: NDJSON when the output is piped (or `--format json`), lines for
//! people on a terminal (`--format pretty`).

use std::io::{IsTerminal, Write};

use serde::Serialize;
use sluice_client::{Event, Message};

/// The output format of a verb that prints events.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Pretty on a terminal, NDJSON when piped.
    Auto,
    /// One JSON document per line.
    Json,
    /// One line per event, for people.
    Pretty,
}

impl Format {
    pub fn pretty(self) -> bool {
        match self {
            Format::Auto => std::io::stdout().is_terminal(),
            Format::Json => false,
            Format::Pretty => true,
        }
    }
}

/// Prints a JSON document (indented on a terminal).
pub fn print_json(value: &impl Serialize) {
    let text = if std::io::stdout().is_terminal() {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    };
    println!("{}", text.unwrap_or_default());
}

/// One event, as `topic/partition@offset time key value` or as NDJSON.
pub fn print_event(out: &mut impl Write, topic: &str, event: &Event, pretty: bool) -> std::io::Result<()> {
    if !pretty {
        let mut value = serde_json::to_value(event).unwrap_or_default();
        value["topic"] = serde_json::Value::from(event.topic.as_deref().unwrap_or(topic));
        return writeln!(out, "{value}");
    }
    let time = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(event.timestamp_ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| event.timestamp_ms.to_string());
    let key = event.key.as_deref().map(|k| format!(" key={k}")).unwrap_or_default();
    let value = match (&event.value, &event.value_base64) {
        (Some(value), _) => value.to_string(),
        (None, Some(b64)) => format!("base64:{b64}"),
        (None, None) => String::new(),
    };
    let topic = event.topic.as_deref().unwrap_or(topic);
    writeln!(out, "{topic}/{}@{} {time}{key} {value}", event.partition, event.offset)
}

/// A received message: the event's line, with its receive count (and receipt as JSON).
pub fn print_message(out: &mut impl Write, topic: &str, message: &Message, pretty: bool) -> std::io::Result<()> {
    if pretty {
        write!(out, "[receive {}] ", message.receive_count)?;
        return print_event(out, topic, &message.event, true);
    }
    let mut value = serde_json::to_value(message).unwrap_or_default();
    value["topic"] = serde_json::Value::from(topic);
    writeln!(out, "{value}")
}
