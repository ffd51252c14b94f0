//! How verbs print, by the global `-o/--output`: `auto` is text on a terminal and JSON
//! when piped (NDJSON for streams: tail, receive, peek, dlq list); `text` is aligned
//! tables for lists and describes and a sentence for a change; `json` is one document (or
//! one per line for a stream) on stdout.

use std::io::{IsTerminal, Write};

use serde::Serialize;
use sluice_client::{Event, Message};

/// `println!` that lets a closed pipe (`| head`) go, where `println!` panics: the reader
/// has what it wanted.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}
pub(crate) use say;

/// The global `-o/--output`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Text on a terminal, JSON (NDJSON for streams) when piped.
    Auto,
    /// JSON: one document, or one per line for a stream.
    Json,
    /// For people: tables, sentences, one line per event.
    Text,
}

impl Output {
    /// Whether to print text (else JSON), `auto` settled by whether stdout is a terminal.
    pub fn text(self) -> bool {
        match self {
            Output::Auto => std::io::stdout().is_terminal(),
            Output::Json => false,
            Output::Text => true,
        }
    }
}

/// `1 event`, `2 events`: a count with its noun, singular or plural.
pub fn count(n: impl Into<u64>, singular: &str, plural: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { singular } else { plural })
}

/// Prints a JSON document on one line (indented on a terminal, for `-o json` there).
pub fn print_json(value: &impl Serialize) {
    let text = if std::io::stdout().is_terminal() {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    };
    say!("{}", text.unwrap_or_default());
}

/// A change's outcome: its sentence as text, else `json`.
pub fn print_change(text: bool, sentence: &str, json: &impl Serialize) {
    if text {
        say!("{sentence}");
    } else {
        print_json(json);
    }
}

/// Rows under a header, each column as wide as its widest cell (numbers to the right).
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let numeric: Vec<bool> = (0..header.len())
        .map(|c| {
            !rows.is_empty() && rows.iter().all(|r| r.get(c).is_some_and(|v| v.parse::<f64>().is_ok() || v == "-"))
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .zip(&numeric)
            .map(|((cell, &w), &right)| if right { format!("{cell:>w$}") } else { format!("{cell:<w$}") })
            .collect();
        say!("{}", padded.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// One event, as `topic/partition@offset time key value` or as NDJSON.
pub fn print_event(out: &mut impl Write, topic: &str, event: &Event, text: bool) -> std::io::Result<()> {
    if !text {
        let mut value = serde_json::to_value(event).unwrap_or_default();
        value["topic"] = serde_json::Value::from(event.topic.as_deref().unwrap_or(topic));
        return writeln!(out, "{value}");
    }
    let topic = event.topic.as_deref().unwrap_or(topic);
    let time = rfc3339(event.timestamp_ms);
    let key = event.key.as_deref().map(|k| format!(" key={k}")).unwrap_or_default();
    let headers: String = event.headers.iter().map(|(name, value)| format!(" {name}={value}")).collect();
    let value = match (&event.value, &event.value_base64) {
        (Some(value), _) => value.to_string(),
        (None, Some(b64)) => format!("base64:{b64}"),
        (None, None) => String::new(),
    };
    let headers = if headers.is_empty() { String::new() } else { format!(" [{}]", headers.trim_start()) };
    writeln!(out, "{topic}/{}@{} {time}{key}{headers} {value}", event.partition, event.offset)
}

/// A message, received or peeked: the event's line after its receive count, then (when
/// received) its receipt on a line of its own, for `sluice ack`; or NDJSON.
pub fn print_message(out: &mut impl Write, topic: &str, message: &Message, text: bool) -> std::io::Result<()> {
    if !text {
        let mut value = serde_json::to_value(message).unwrap_or_default();
        value["topic"] = serde_json::Value::from(topic);
        return writeln!(out, "{value}");
    }
    write!(out, "[receive {}] ", message.receive_count)?;
    print_event(out, topic, &message.event, true)?;
    if message.receipt.is_empty() {
        return Ok(());
    }
    writeln!(out, "  receipt {}", message.receipt)
}

/// Milliseconds since the epoch as RFC 3339 (the number itself if out of range).
pub fn rfc3339(ms: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| ms.to_string())
}

/// `earliest`, `latest`, or an RFC 3339 time as milliseconds since the epoch.
pub fn parse_time(flag: &str, text: &str) -> Result<i64, sluice_client::Error> {
    let time = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).map_err(|_| {
        sluice_client::Error::Invalid(format!(
            "{flag} {text}: not earliest, latest, an offset or an RFC 3339 time (e.g. 2026-12-01T00:00:00Z)"
        ))
    })?;
    Ok((time.unix_timestamp_nanos() / 1_000_000) as i64)
}
