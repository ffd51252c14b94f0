//! What a workload run measured, and its printing: the figures as a table or as JSON, the
//! percentiles of its histograms, and a progress line a second while it runs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};

/// What one workload run measured.
pub struct Report {
    pub workload: &'static str,
    pub settings: Value,
    pub events: u64,
    pub bytes: u64,
    pub requests: u64,
    pub errors: u64,
    pub elapsed: Duration,
    /// Request latencies, microseconds.
    pub latency: Histogram<u64>,
    /// What `latency` times: each request, unless a workload says otherwise.
    pub latency_of: &'static str,
    /// Further counts of the workload, each also reported per second.
    pub counts: Vec<(&'static str, u64)>,
    /// Further latencies of the workload, microseconds.
    pub histograms: Vec<(&'static str, Histogram<u64>)>,
    /// Further findings, as JSON, each also printed as lines of text.
    pub extra: Vec<(&'static str, Value, Vec<String>)>,
    /// Why the run does not count (printed after the figures; the command then fails).
    pub failure: Option<String>,
}

/// Prints a line a second to stderr while a workload runs.
pub fn spawn_progress(counter: Arc<AtomicU64>, done: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let start = Instant::now();
        let mut last = 0;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        while !done.load(Ordering::Relaxed) {
            tick.tick().await;
            let now = counter.load(Ordering::Relaxed);
            eprintln!(
                "  {:>5.1}s  {:>12} events  {:>10.0} events/s",
                start.elapsed().as_secs_f64(),
                now,
                (now - last.min(now)) as f64
            );
            last = now;
        }
    })
}

impl Report {
    pub fn rate(&self, n: u64) -> f64 {
        n as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn quantile_ms(&self, q: f64) -> f64 {
        self.latency.value_at_quantile(q) as f64 / 1000.0
    }

    pub fn to_json(&self) -> Value {
        json!({
            "workload": self.workload,
            "settings": self.settings,
            "events": self.events,
            "bytes": self.bytes,
            "requests": self.requests,
            "errors": self.errors,
            "seconds": self.elapsed.as_secs_f64(),
            "events_per_sec": self.rate(self.events),
            "mb_per_sec": self.rate(self.bytes) / 1e6,
            "requests_per_sec": self.rate(self.requests),
            "latency_of": self.latency_of,
            "latency_ms": quantiles_ms(&self.latency),
            "counts": self.counts.iter().map(|(name, n)| (name.to_string(), json!({ "total": n, "per_sec": self.rate(*n) }))).collect::<serde_json::Map<_, _>>(),
            "latencies_ms": self.histograms.iter().map(|(name, h)| (name.to_string(), quantiles_ms(h))).collect::<serde_json::Map<_, _>>(),
            "extra": self.extra.iter().map(|(name, v, _)| (name.to_string(), v.clone())).collect::<serde_json::Map<_, _>>(),
            "failure": self.failure,
        })
    }

    pub fn print_table(&self) {
        println!("workload   {} {}", self.workload, self.settings);
        println!("{:<24}{:>14}", "events", self.events);
        println!("{:<24}{:>14}", "errors", self.errors);
        println!("{:<24}{:>14.2}", "seconds", self.elapsed.as_secs_f64());
        println!("{:<24}{:>14.0}", "events/s", self.rate(self.events));
        println!("{:<24}{:>14.1}", "MB/s", self.rate(self.bytes) / 1e6);
        println!("{:<24}{:>14.0}", "requests/s", self.rate(self.requests));
        let of = if self.latency_of == "request" { String::new() } else { format!("{} ", self.latency_of) };
        println!("{:<24}{:>14.3}", format!("{of}p50 ms"), self.quantile_ms(0.5));
        println!("{:<24}{:>14.3}", format!("{of}p99 ms"), self.quantile_ms(0.99));
        println!("{:<24}{:>14.3}", format!("{of}p99.9 ms"), self.quantile_ms(0.999));
        println!("{:<24}{:>14.3}", format!("{of}max ms"), self.latency.max() as f64 / 1000.0);
        for (name, n) in &self.counts {
            println!("{:<24}{:>14}{:>12.0}/s", name, n, self.rate(*n));
        }
        for (name, h) in &self.histograms {
            let q = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
            let max = h.max() as f64 / 1000.0;
            println!(
                "{:<24}{:>14.3}{:>10.3}{:>10.3}{:>10.3}  ms p50 p99 p99.9 max",
                name,
                q(0.5),
                q(0.99),
                q(0.999),
                max
            );
        }
        for (_, _, lines) in &self.extra {
            for line in lines {
                println!("{line}");
            }
        }
        if let Some(failure) = &self.failure {
            println!("FAILED            {failure}");
        }
    }
}

/// p50, p99, p99.9 and max of a histogram of microseconds, in milliseconds.
fn quantiles_ms(h: &Histogram<u64>) -> Value {
    let q = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    json!({ "p50": q(0.5), "p99": q(0.99), "p999": q(0.999), "max": h.max() as f64 / 1000.0 })
}
