//! A published event's schedule as the request gives it (`deliver_at_ms` or `delay_ms` in
//! a JSON batch; the `deliverat` and `delayms` CloudEvents extension attributes), stamped
//! on the event as the core keeps it (`sluice_core::schedule`). Its limits against the
//! topic's retention are the log's to check, before anything is written.

use sluice_core::schedule::{stamp, DELIVER_AT_HEADER};
use sluice_core::NewEvent;

/// Schedules `event` for `deliver_at` (ms since the epoch) or `delay` ms after `now` (the
/// log's clock), not both, nor a negative delay: the refusal says why.
pub(crate) fn apply(event: &mut NewEvent, deliver_at: Option<i64>, delay: Option<i64>, now: i64) -> Result<(), String> {
    let at = match (deliver_at, delay) {
        (Some(_), Some(_)) => return Err("give at most one of deliver_at_ms and delay_ms".into()),
        (None, Some(d)) if d < 0 => return Err(format!("delay_ms {d} is negative")),
        (None, Some(d)) => now.saturating_add(d),
        (Some(at), None) => at,
        (None, None) => return Ok(()),
    };
    stamp(event, at);
    Ok(())
}

/// Refuses a published header that would pass for a schedule.
pub(crate) fn check_headers<'a>(mut names: impl Iterator<Item = &'a String>) -> Result<(), String> {
    match names.any(|n| n == DELIVER_AT_HEADER) {
        true => Err(format!("header '{DELIVER_AT_HEADER}' is reserved: schedule with deliver_at_ms or delay_ms")),
        false => Ok(()),
    }
}
