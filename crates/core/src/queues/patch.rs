//! Changing a subscription in place: its timeouts, counts, backoff, delay, filter and push
//! settings (not where it starts, nor how it orders: those shape what is already queued).
//!
//! Why no receive that starts after a change has answered uses the old settings, on any
//! process, whatever it caches: the change first raises the settings' version marked on
//! every partition's cursor item (`CursorItem::config`), then writes the subscription record
//! with the new settings and that version, conditional on the version read. Every take
//! reads its partition's cursor item and names it, conditional on the version read, in the
//! write that grants leases (`take.rs`), so:
//! - a take that reads a mark newer than the record it holds takes nothing with it: the
//!   receive reads the record again and takes with the new one, or, if the record is still
//!   older (the change is under way), takes nothing there until it is written;
//! - a take that read the cursor before the mark fails its write, reads again, and finds it;
//! - a take that read the cursor after every mark and the record after it was written uses
//!   the new settings.
//!
//! So a change takes effect at once everywhere when its record write lands (what describe
//! reads), and on each partition nothing is taken between its mark and that write: the
//! cursor's position at the mark is exactly where a new filter starts (`filter_since`). A
//! change that fails between its marks and its record write leaves the marked partitions
//! taking nothing until a change is made again (retrying it is enough), as a pause would.
//! Alternatives considered: the record alone (a cached subscription would use the old
//! settings for up to the cache's lifetime), and a check of the record in every take (every
//! receive would name one item: on DynamoDB, transactions naming one item cancel one another).

use serde_json::Value;

use super::*;

/// A change of a subscription's settings: each field given replaces the one stored.
/// `start` and `ordering` cannot change: given, they must be what is stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SubscriptionPatch {
    pub start: Option<StartAt>,
    pub ordering: Option<Ordering>,
    pub visibility_timeout_ms: Option<u64>,
    pub max_receive_count: Option<u32>,
    pub delay_ms: Option<u64>,
    /// `Some(None)` removes the backoff.
    pub redelivery_backoff: Option<Option<Backoff>>,
    /// `Some(None)` removes the filter.
    pub filter: Option<Option<Value>>,
    /// Only for a push subscription.
    pub push: Option<PushPatch>,
    /// `Some(None)` removes the rate.
    pub rate: Option<Option<Rate>>,
}

/// A change of a push subscription's target and limits. The target's kind stays: a URL
/// for a URL (its secret kept), a function for a function.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushPatch {
    pub url: Option<String>,
    pub lambda: Option<String>,
    pub max_batch: Option<u32>,
    pub timeout_ms: Option<u64>,
    pub max_in_flight: Option<u32>,
}

/// What a change does to the stored settings.
// Made once per PATCH and taken apart at once: boxing the settings would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq)]
enum Planned {
    /// Nothing given differs from what is stored.
    Unchanged,
    Change {
        spec: SubscriptionSpec,
        filter_changed: bool,
    },
}

fn unchangeable(field: &str, why: &str) -> Error {
    Error::invalid(Code::InvalidRequest, format!("{field} cannot change ({why}): create another subscription"))
}

/// The settings `stored` becomes under `patch`, checked as a create checks them.
fn plan(stored: &SubscriptionSpec, patch: &SubscriptionPatch) -> Result<Planned, Error> {
    if patch.start.as_ref().is_some_and(|s| *s != stored.start) {
        return Err(unchangeable("start", "where the queue began is fixed at creation"));
    }
    if patch.ordering.is_some_and(|o| o != stored.ordering) {
        return Err(unchangeable("ordering", "messages already queued were taken under the ordering they have"));
    }
    let mut spec = SubscriptionSpec {
        visibility_timeout_ms: patch.visibility_timeout_ms.unwrap_or(stored.visibility_timeout_ms),
        max_receive_count: patch.max_receive_count.unwrap_or(stored.max_receive_count),
        delay_ms: patch.delay_ms.unwrap_or(stored.delay_ms),
        redelivery_backoff: patch.redelivery_backoff.clone().unwrap_or_else(|| stored.redelivery_backoff.clone()),
        filter: patch.filter.clone().unwrap_or_else(|| stored.filter.clone()),
        rate: patch.rate.unwrap_or(stored.rate),
        ..stored.clone()
    };
    if let Some(change) = &patch.push {
        let Some(push) = spec.push.as_mut() else {
            return Err(unchangeable("push", "a pull subscription does not become a push one, nor back"));
        };
        change.apply(push)?;
    }
    spec.validate()?;
    if spec == *stored {
        return Ok(Planned::Unchanged);
    }
    Ok(Planned::Change { filter_changed: spec.filter != stored.filter, spec })
}

impl PushPatch {
    fn apply(&self, push: &mut PushSpec) -> Result<(), Error> {
        let kind = |m: &str| Err(Error::invalid(Code::InvalidPush, m.to_owned()));
        match (&mut push.target, &self.url, &self.lambda) {
            (_, Some(_), Some(_)) => return kind("push: name at most one of url and lambda"),
            (PushTarget::Url { url, .. }, Some(new), None) => new.clone_into(url),
            (PushTarget::Lambda { function }, None, Some(new)) => new.clone_into(function),
            (PushTarget::Lambda { .. }, Some(_), None) => {
                return kind("push.url: this subscription pushes to a function; its target's kind cannot change")
            }
            (PushTarget::Url { .. }, None, Some(_)) => {
                return kind("push.lambda: this subscription pushes to a URL; its target's kind cannot change")
            }
            (_, None, None) => {}
        }
        push.max_batch = self.max_batch.unwrap_or(push.max_batch);
        push.timeout_ms = self.timeout_ms.unwrap_or(push.timeout_ms);
        push.max_in_flight = self.max_in_flight.unwrap_or(push.max_in_flight);
        Ok(())
    }
}

/// The write marking one partition's queue, as read, with settings' version `config`, and,
/// if the change sets a new filter, where it applies from: the cursor's position (nothing
/// is taken between the mark and the record write). `None` if already marked (or marked
/// by a newer change: this one's record write will fail). A partition whose cursor item
/// was never written is at its `start`, and the write creates it (conditional on absence).
fn announce(state: &mut QueueState, sub_id: u64, partition: u32, config: u64, filter_changed: bool) -> Option<WriteOp> {
    let marks = &mut state.marks;
    if marks.config > config {
        return None;
    }
    let since_missing = filter_changed && !marks.filter_since.iter().any(|[c, _]| *c == config);
    if marks.config == config && !since_missing {
        return None;
    }
    marks.config = config;
    if since_missing {
        marks.filter_since.push([config, state.cursor.next]);
        let extra = marks.filter_since.len().saturating_sub(FILTER_SINCE_KEPT);
        marks.filter_since.drain(..extra);
    }
    Some(state.cursor_write(sub_id, partition, state.cursor, &[]))
}

impl Queues {
    /// Changes a subscription's settings (an empty or same change answers it unchanged,
    /// having written them again only over the marks of a change that failed):
    /// once this answers, every receive or delivery that starts uses the new ones. Leases
    /// already granted keep their windows; a new filter applies on each partition from its
    /// cursor at the change (`filter_since`). Answers the subscription.
    pub async fn patch(&self, topic: &str, name: &str, patch: &SubscriptionPatch) -> Result<Subscription, Error> {
        let (mut attempt, mut checked) = (0, None);
        while attempt < MAX_ATTEMPTS {
            let sub = self.sub(topic, name).await?;
            let (spec, filter_changed) = match plan(&sub.record.spec, patch)? {
                Planned::Change { spec, filter_changed } => (spec, filter_changed),
                // A change that failed after marking partitions left them taking nothing:
                // one that asks for nothing new finishes it, with the settings as they are.
                Planned::Unchanged if self.interrupted(&sub).await? => (sub.record.spec.clone(), false),
                Planned::Unchanged => return Ok(sub.describe()),
            };
            if spec.push != sub.record.spec.push && checked != spec.push {
                if let Some(push) = &spec.push {
                    super::push::check_target(push, self.targets.as_deref()).await?;
                }
                checked = spec.push.clone();
            }
            let config = sub.record.config + 1;
            // The cursor item alone is read (the first item of the partition's collection);
            // a deleted subscription's fence answers not found.
            self.change_cursors(&sub, Some(1), |partition, mut state| {
                let op = announce(&mut state, sub.record.id, partition, config, filter_changed);
                std::future::ready(Ok(op.map_or(Change::Keep(()), |op| Change::Write(vec![op], ()))))
            })
            .await?;
            let filter_config = if filter_changed { config } else { sub.record.filter_config };
            let record = SubscriptionRecord { spec, config, filter_config, ..sub.record.clone() };
            let key = crate::keys::subscription_key(sub.topic.id, name);
            match self.store().write(vec![WriteOp::replace(key, layout::encode(&record), Some(sub.version))]).await {
                Ok(()) => {
                    self.forget_sub(topic, name);
                    tracing::info!(topic, subscription = name, config, "subscription changed");
                    return Ok(Sub { record, version: sub.version + 1, ..sub }.describe());
                }
                Err(e) => self.lost_race(e, &mut attempt).await?,
            }
        }
        Err(contended(name))
    }
}

impl Queues {
    /// Whether a change of `sub`'s settings marked a partition and never wrote them (or is
    /// writing them now): that partition takes nothing until the settings' version catches up.
    async fn interrupted(&self, sub: &Sub) -> Result<bool, Error> {
        for partition in 0..sub.topic.spec.partitions {
            if self.load(sub, partition, Some(1)).await?.marks.config > sub.record.config {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

impl QueueState {
    /// What a take answers from a partition it may not take from: paused, look again as at
    /// a blocked one; announcing settings newer than `sub`'s, the same if `sub` was read
    /// for this request (after it started: the change is under way, or answered since
    /// the request started), and if it came from the cache, that it is stale, so the
    /// request reads it again (`Queues::stale`) and takes with the new settings.
    pub(super) fn held_back(&self, sub: &Sub) -> Result<Taken, Error> {
        if sub.guarded && self.marks.config > sub.record.config {
            return Err(sub.not_found());
        }
        Ok(Taken { blocked: true, ..Taken::default() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::queues::state::Marks;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    fn push_spec() -> SubscriptionSpec {
        SubscriptionSpec {
            push: Some(PushSpec::url("https://a.example/hook", Some(SECRET.into()))),
            ..Default::default()
        }
    }

    fn code(r: Result<Planned, Error>) -> String {
        match r {
            Err(Error::Invalid { code, message }) => format!("{} {message}", code.as_str()),
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn a_plan_replaces_what_is_given_and_keeps_the_rest() {
        let stored = SubscriptionSpec { filter: Some(json!({"type": ["a"]})), ..Default::default() };
        let cases: [(SubscriptionPatch, Planned); 5] = [
            (SubscriptionPatch::default(), Planned::Unchanged),
            (SubscriptionPatch { visibility_timeout_ms: Some(30_000), ..Default::default() }, Planned::Unchanged),
            (SubscriptionPatch { start: Some(StartAt::Latest), ..Default::default() }, Planned::Unchanged),
            (
                SubscriptionPatch { visibility_timeout_ms: Some(5), max_receive_count: Some(2), ..Default::default() },
                Planned::Change {
                    spec: SubscriptionSpec { visibility_timeout_ms: 5, max_receive_count: 2, ..stored.clone() },
                    filter_changed: false,
                },
            ),
            (
                SubscriptionPatch { filter: Some(None), delay_ms: Some(9), ..Default::default() },
                Planned::Change {
                    spec: SubscriptionSpec { filter: None, delay_ms: 9, ..stored.clone() },
                    filter_changed: true,
                },
            ),
        ];
        for (patch, want) in cases {
            assert_eq!(plan(&stored, &patch).unwrap(), want, "{patch:?}");
        }
        let url = PushPatch { url: Some("https://b.example/".into()), max_in_flight: Some(9), ..Default::default() };
        let Planned::Change { spec, .. } =
            plan(&push_spec(), &SubscriptionPatch { push: Some(url), ..Default::default() }).unwrap()
        else {
            panic!("a change")
        };
        let push = spec.push.unwrap();
        assert_eq!(push.target, PushTarget::Url { url: "https://b.example/".into(), secret: SECRET.into() });
        assert_eq!(push.max_in_flight, 9);
    }

    #[test]
    fn a_plan_refuses_what_cannot_change_and_what_create_refuses() {
        let pull = SubscriptionSpec::default();
        let lambda = PushPatch { lambda: Some("f".into()), ..Default::default() };
        let cases = [
            (
                &pull,
                SubscriptionPatch { start: Some(StartAt::Earliest), ..Default::default() },
                "invalid_request start",
            ),
            (
                &pull,
                SubscriptionPatch { ordering: Some(Ordering::Key), ..Default::default() },
                "invalid_request ordering",
            ),
            (
                &pull,
                SubscriptionPatch { push: Some(PushPatch::default()), ..Default::default() },
                "invalid_request push",
            ),
            (
                &pull,
                SubscriptionPatch { max_receive_count: Some(0), ..Default::default() },
                "invalid_max_receive_count",
            ),
            (
                &pull,
                SubscriptionPatch { visibility_timeout_ms: Some(MAX_VISIBILITY_TIMEOUT_MS + 1), ..Default::default() },
                "invalid_visibility_timeout",
            ),
            (&pull, SubscriptionPatch { filter: Some(Some(json!({"a": 1}))), ..Default::default() }, "invalid_filter"),
            (&pull, SubscriptionPatch { delay_ms: Some(MAX_DELAY_MS + 1), ..Default::default() }, "invalid_delay"),
            (
                &pull,
                SubscriptionPatch { redelivery_backoff: Some(Some(Backoff::Steps(vec![]))), ..Default::default() },
                "invalid_backoff",
            ),
            (&push_spec(), SubscriptionPatch { push: Some(lambda), ..Default::default() }, "invalid_push push.lambda"),
            (
                &push_spec(),
                SubscriptionPatch {
                    push: Some(PushPatch { max_batch: Some(0), ..Default::default() }),
                    ..Default::default()
                },
                "invalid_push push.max_batch",
            ),
        ];
        for (stored, patch, want) in cases {
            let got = code(plan(stored, &patch));
            assert!(got.starts_with(want), "{patch:?}: {got}");
        }
    }

    fn item(next: u64, config: u64, since: &[[u64; 2]]) -> CursorItem {
        CursorItem {
            config,
            filter_since: since.to_vec(),
            ..CursorItem::new(CursorRecord { next, dead: 1, ..Default::default() }, vec![], vec![])
        }
    }

    /// A partition's queue as `load` reads it: its cursor item, if `stored`, else its start.
    fn state(stored: Option<&CursorItem>, start: u64) -> QueueState {
        let item = stored.cloned().unwrap_or_default();
        QueueState {
            cursor: if stored.is_some() { item.cursor() } else { CursorRecord { next: start, ..Default::default() } },
            cursor_version: stored.map(|_| 5),
            leases: Vec::new(),
            inline_changed: false,
            keyed: false,
            written: Vec::new(),
            paused: item.paused,
            marks: Marks { config: item.config, filter_since: item.filter_since, sought: item.sought },
        }
    }

    #[test]
    fn an_announcement_marks_the_version_and_where_a_new_filter_starts() {
        let fresh = CursorItem { dead: 0, ..item(7, 1, &[[1, 7]]) };
        let paused = CursorItem { paused: true, ..item(4, 0, &[]) };
        // (stored, start, config, filter changed) → the item written, if any.
        let cases = [
            (Some(item(4, 0, &[])), 0, 1, false, Some(item(4, 1, &[]))),
            (Some(item(4, 0, &[])), 0, 1, true, Some(item(4, 1, &[[1, 4]]))),
            (Some(item(4, 1, &[])), 0, 1, false, None),
            // Another change of the same version got here first without a filter: this
            // one's filter needs its position (the record says which applies).
            (Some(item(4, 1, &[])), 0, 1, true, Some(item(4, 1, &[[1, 4]]))),
            (Some(item(4, 1, &[[1, 4]])), 0, 1, true, None),
            (Some(item(4, 2, &[])), 0, 1, true, None),
            (Some(item(9, 2, &[[1, 4], [2, 6]])), 0, 3, true, Some(item(9, 3, &[[2, 6], [3, 9]]))),
            (None, 7, 1, true, Some(fresh)),
            (Some(paused.clone()), 0, 1, false, Some(CursorItem { config: 1, ..paused })),
        ];
        for (stored, start, config, filter_changed, want) in cases {
            let version = stored.as_ref().map(|_| 5);
            let op = announce(&mut state(stored.as_ref(), start), 7, 0, config, filter_changed);
            let want = want.map(|item| WriteOp::replace(cursor_key(7, 0), item.encode(), version));
            assert_eq!(op, want, "{stored:?} → {config}");
        }
    }
}
