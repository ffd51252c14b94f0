//! What a run asked for, what it measured, and the one JSON line it prints.

use std::sync::Mutex;

use super::meter::Meter;
use super::params;

/// The command line of `sluice-sim scale`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleArgs {
    pub workload: Workload,
    pub partitions: u32,
    pub clients: u32,
    pub seconds: u64,
    pub batch: u32,
    pub subscriptions: u32,
    /// Events per second offered, where a workload is paced.
    pub rate: f64,
    pub seed: u64,
    pub trace: bool,
    /// The stage's throttle, requests/s and burst (template.yaml's defaults unless given).
    pub stage: (f64, f64),
    /// The long-poll routes' throttle (group poll, queue receive), requests/s and burst.
    pub long_poll: (f64, f64),
    /// Push: the stream mapping's batching window, and a receiver's answer time.
    pub window_ms: u64,
    pub receiver_ms: f64,
    /// Push: `max_in_flight` of each subscription.
    pub max_in_flight: u32,
    /// Push: each subscription's `rate` (messages a second, the same burst), if any.
    pub sub_rate: Option<u32>,
    /// Publish: each event of a batch to a partition of its own draw (keyed events spread
    /// over the topic, docs/AWS.md's "batch 100 keyed over 8 partitions") instead of one
    /// partition per request.
    pub keyed: bool,
}

impl ScaleArgs {
    /// A run of `workload` with every other setting at its default: 8 partitions, 8
    /// clients, 10 s, batches of 1, one subscription, 1,000 events/s, seed 0, the
    /// template's throttles and push settings.
    pub fn new(workload: Workload) -> Self {
        Self {
            workload,
            partitions: 8,
            clients: 8,
            seconds: 10,
            batch: 1,
            subscriptions: 1,
            rate: 1000.0,
            seed: 0,
            trace: false,
            stage: params::APIGW_STAGE,
            long_poll: params::APIGW_LONG_POLL,
            window_ms: params::ESM_WINDOW_MS,
            receiver_ms: params::RECEIVER_MS,
            max_in_flight: sluice_core::queues::DEFAULT_PUSH_IN_FLIGHT,
            sub_rate: None,
            keyed: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    Publish,
    Queue,
    Group,
    Push,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Publish => "publish",
            Workload::Queue => "queue",
            Workload::Group => "group",
            Workload::Push => "push",
        }
    }
}

/// What the clients saw: the latency of each completed operation, the events it carried
/// (within the run's seconds), and the operations that failed.
#[derive(Debug, Default)]
pub struct Seen {
    pub latencies_ms: Vec<f64>,
    pub events: u64,
    pub errors: u64,
}

/// Shared between the clients of a run.
#[derive(Debug, Default)]
pub struct Tally(pub Mutex<Seen>);

impl Tally {
    /// A completed operation of `events` events, taking `ms`; counted in the throughput
    /// only if it completed within the run (`in_time`).
    pub fn ok(&self, ms: f64, events: u64, in_time: bool) {
        let mut s = self.0.lock().unwrap();
        s.latencies_ms.push(ms);
        if in_time {
            s.events += events;
        }
    }

    pub fn error(&self) {
        self.0.lock().unwrap().errors += 1;
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

/// The one JSON line, fields in the documented order.
pub fn line(args: &ScaleArgs, seen: &Seen, meter: &Meter) -> String {
    let mut sorted = seen.latencies_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let events = seen.events.max(1) as f64;
    // Written by hand: the documented field order (a JSON map would sort them).
    format!(
        concat!(
            r#"{{"workload":"{}","partitions":{},"clients":{},"batch":{},"seconds":{},"#,
            r#""throughput_per_s":{},"p50_ms":{},"p99_ms":{},"conflicts":{},"throttles":{},"#,
            r#""errors":{},"requests_per_event":{},"dollars_per_million":{}}}"#
        ),
        args.workload.name(),
        args.partitions,
        args.clients,
        args.batch,
        args.seconds,
        round(seen.events as f64 / args.seconds.max(1) as f64, 1),
        round(percentile(&sorted, 0.50), 1),
        round(percentile(&sorted, 0.99), 1),
        meter.conflicts,
        meter.throttles,
        seen.errors,
        round(meter.requests() as f64 / events, 3),
        round(meter.dollars() / events * 1e6, 3),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&xs, 0.5), 50.0);
        assert_eq!(percentile(&xs, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
