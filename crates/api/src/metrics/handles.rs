//! Handles of the metrics recorded on every request, kept by label values. The `metrics`
//! macros build a key (cloning its labels), hash it and look it up in the recorder's
//! registry on every call: about a sixth of a single-event publish's instructions at 64
//! connections. A handle kept here is the same counter or histogram the macro would find.
//!
//! Off until the process says its recorder is installed ([`keep_handles`]): a handle taken
//! before that would be a no-op for good. Both recorders Sluice installs keep what they
//! registered (Prometheus forgets idle gauges only; the EMF collector resets counters to
//! zero when it writes them, and keeps them), so a kept handle never goes stale.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, PoisonError, RwLock};

use metrics::{counter, histogram, Counter, Histogram};
use sluice_core::metrics as m;

static ON: AtomicBool = AtomicBool::new(false);

/// Label sets a cache holds at most; past that it starts over (handles are registered again).
const MAX_KEPT: usize = 4096;

/// Says the process's recorder is installed: from now on handles are kept.
pub fn keep_handles() {
    ON.store(true, Ordering::Release);
}

/// Handles by a string label (a route, a topic): `find` picks one among those kept under it.
struct Kept<V>(LazyLock<RwLock<HashMap<String, Vec<V>>>>);

impl<V: Clone> Kept<V> {
    const fn new() -> Self {
        Kept(LazyLock::new(|| RwLock::new(HashMap::new())))
    }

    fn get(&self, key: &str, find: impl Fn(&V) -> bool, make: impl FnOnce() -> V) -> V {
        if !ON.load(Ordering::Acquire) {
            return make();
        }
        let kept = self.0.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(v) = kept.get(key).and_then(|vs| vs.iter().find(|v| find(v))) {
            return v.clone();
        }
        drop(kept);
        let made = make();
        let mut kept = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if kept.len() >= MAX_KEPT {
            kept.clear();
        }
        kept.entry(key.to_owned()).or_default().push(made.clone());
        made
    }
}

/// A request's duration histogram and its count by status.
#[derive(Clone)]
pub(super) struct RequestHandles {
    method: &'static str,
    status: u16,
    pub duration: Histogram,
    pub requests: Counter,
}

pub(super) fn request(route: &str, method: &'static str, status: u16) -> RequestHandles {
    static KEPT: Kept<RequestHandles> = Kept::new();
    KEPT.get(
        route,
        |h| h.method == method && h.status == status,
        || RequestHandles {
            method,
            status,
            duration: histogram!(m::HTTP_DURATION, "route" => route.to_owned(), "method" => method),
            requests: counter!(m::HTTP_REQUESTS, "route" => route.to_owned(), "method" => method,
                "status" => status.to_string()),
        },
    )
}

/// What an acknowledged publish to a topic adds to.
#[derive(Clone)]
pub(super) struct PublishHandles {
    pub requests: Counter,
    pub events: Counter,
    pub bytes: Counter,
    pub commit: Histogram,
}

pub(super) fn published(topic: &str) -> PublishHandles {
    static KEPT: Kept<PublishHandles> = Kept::new();
    KEPT.get(
        topic,
        |_| true,
        || PublishHandles {
            requests: counter!(m::PUBLISH_REQUESTS, "topic" => topic.to_owned(), "outcome" => "ok"),
            events: counter!(m::EVENTS_PUBLISHED, "topic" => topic.to_owned()),
            bytes: counter!(m::BYTES_PUBLISHED, "topic" => topic.to_owned()),
            commit: histogram!(m::PUBLISH_COMMIT, "topic" => topic.to_owned()),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_kept_handle_is_made_once_per_label_set() {
        keep_handles();
        let kept: Kept<(u16, u32)> = Kept::new();
        let made = Cell::new(0);
        let get = |key: &str, status: u16| {
            kept.get(
                key,
                |v| v.0 == status,
                || {
                    made.set(made.get() + 1);
                    (status, made.get())
                },
            )
        };
        assert_eq!(get("/a", 200), (200, 1));
        assert_eq!(get("/a", 200), (200, 1), "kept");
        assert_eq!(get("/a", 404), (404, 2), "another label set under the same key");
        assert_eq!(get("/b", 200), (200, 3));
        assert_eq!((get("/a", 404), get("/b", 200), made.get()), ((404, 2), (200, 3), 3));
    }
}
