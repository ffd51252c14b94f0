use super::*;

const S: SuspendAfter = DEFAULT_SUSPEND_AFTER;

fn slowed(retry_after_ms: Option<u64>) -> Outcome {
    Outcome::Slowed { retry_after_ms }
}

#[test]
fn answers_are_read_as_flow_control_reads_them() {
    let status = |status, retry_after_ms| Answer::Status { status, retry_after_ms, body: vec![] };
    let cases = [
        (status(200, None), Outcome::Delivered),
        (status(204, Some(5)), Outcome::Delivered),
        (status(429, Some(2_000)), slowed(Some(2_000))),
        (status(503, None), slowed(None)),
        (status(500, Some(2_000)), Outcome::Failed),
        (status(410, None), Outcome::Failed),
        (Answer::TimedOut, slowed(None)),
        (Answer::Failed("could not connect: refused".into()), Outcome::Failed),
    ];
    for (answer, want) in cases {
        assert_eq!(Outcome::of(&answer), want, "{answer:?}");
    }
}

#[test]
fn the_limit_halves_on_overload_and_grows_by_one_per_success_under_its_ceiling() {
    // Outcomes in order, from a fresh record with ceiling 8 -> the limit after each.
    let steps = [
        (slowed(None), 4),
        (slowed(None), 2),
        (Outcome::Failed, 2),
        (slowed(None), 1),
        (slowed(None), 1),
        (Outcome::Delivered, 2),
        (Outcome::Delivered, 3),
        (slowed(None), 1),
        (Outcome::Delivered, 2),
    ];
    let mut r = FlowRecord::default();
    assert_eq!(r.limit(8), 8, "a fresh record runs at the ceiling");
    for (i, (outcome, want)) in steps.into_iter().enumerate() {
        r.settle(outcome, i as i64, 8, S);
        assert_eq!(r.limit(8), want, "after step {i}: {outcome:?}");
    }
    for i in 0..20 {
        r.settle(Outcome::Delivered, 100 + i, 8, S);
    }
    assert_eq!(r.limit(8), 8, "success never lifts it past the ceiling");
    assert_eq!(r.limit(3), 3, "a lower ceiling (a changed max_in_flight) caps it at once");
}

#[test]
fn the_gate_holds_back_for_retry_after_and_for_the_limit() {
    let mut r = FlowRecord::default();
    r.settle(slowed(Some(30_000)), 1_000, 4, S);
    // (now, in flight) -> gate; the limit is 2 now.
    let cases = [
        ((1_000, 0), Gate::Wait { until_ms: 31_000 }),
        ((30_999, 0), Gate::Wait { until_ms: 31_000 }),
        ((31_000, 0), Gate::Go),
        ((31_000, 1), Gate::Go),
        ((31_000, 2), Gate::Full),
    ];
    for ((now, in_flight), want) in cases {
        assert_eq!(r.gate(now, in_flight, 4), want, "now {now}, {in_flight} out");
    }
    // A later Retry-After extends it, an earlier one never shortens it; a huge one is capped.
    r.settle(slowed(Some(1_000)), 2_000, 4, S);
    assert_eq!(r.not_before_ms, Some(31_000));
    r.settle(slowed(Some(u64::MAX)), 3_000, 4, S);
    assert_eq!(r.not_before_ms, Some(3_000 + MAX_RETRY_AFTER_MS as i64));
}

#[test]
fn twenty_failures_spanning_five_minutes_suspend_then_one_probe_a_minute_and_a_success_resumes() {
    let mut r = FlowRecord::default();
    // 19 failures over 10 minutes, then a success: the run of failures starts again.
    for i in 0..19 {
        assert_eq!(r.settle(Outcome::Failed, i * 30_000, 4, S), None);
    }
    r.settle(Outcome::Delivered, 600_000, 4, S);
    assert_eq!((r.failures, r.failing_since_ms), (0, None));
    // 25 failures within a minute: not yet (the span is short); the 20th+ past 5 minutes: suspended.
    let t0 = 1_000_000;
    for i in 0..25 {
        assert_eq!(r.settle(Outcome::Failed, t0 + i * 1_000, 4, S), None, "failure {i}");
    }
    assert_eq!(r.settle(Outcome::Failed, t0 + 300_000, 4, S), Some(Health::Suspended));
    assert_eq!(r.suspended_since_ms, Some(t0 + 300_000));
    assert_eq!(r.limit(4), 1);
    let probe_at = t0 + 300_000 + PROBE_EVERY_MS;
    assert_eq!(r.gate(t0 + 300_001, 0, 4), Gate::Wait { until_ms: probe_at });
    assert_eq!(r.gate(probe_at, 0, 4), Gate::Go);
    assert_eq!(r.gate(probe_at, 1, 4), Gate::Full, "one probe batch at a time");
    // A failed probe: the next a minute after it; still suspended since the first time.
    assert_eq!(r.settle(Outcome::Failed, probe_at + 500, 4, S), None);
    assert_eq!(r.gate(probe_at + 1_000, 0, 4), Gate::Wait { until_ms: probe_at + 500 + PROBE_EVERY_MS });
    assert_eq!(r.suspended_since_ms, Some(t0 + 300_000));
    // A successful probe resumes it, at a limit of 2 (1 while suspended, plus one).
    assert_eq!(r.settle(Outcome::Delivered, probe_at + 60_500, 4, S), Some(Health::Resumed));
    assert_eq!((r.suspended_since_ms, r.last_probe_ms, r.failures), (None, None, 0));
    assert_eq!(r.limit(4), 2);
    assert_eq!(r.gate(probe_at + 60_501, 0, 4), Gate::Go);
}

#[test]
fn a_subscription_s_own_suspend_after_is_honoured() {
    let quick = SuspendAfter { failures: 2, spanning_ms: 0 };
    let mut r = FlowRecord::default();
    assert_eq!(r.settle(Outcome::Failed, 0, 4, quick), None);
    assert_eq!(r.settle(slowed(None), 0, 4, quick), Some(Health::Suspended));
}

#[test]
fn a_record_is_stored_small_and_an_old_one_reads_as_fresh() {
    let fresh: FlowRecord = serde_json::from_str("{}").unwrap();
    assert_eq!(fresh, FlowRecord::default());
    let r = FlowRecord { limit: 3, failures: 1, failing_since_ms: Some(5), ..FlowRecord::default() };
    assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"limit":3,"failures":1,"failing_since_ms":5}"#);
}

#[tokio::test]
async fn a_waiting_worker_starts_when_its_time_comes_or_a_slot_frees_and_stops_on_stop() {
    let clock = Arc::new(crate::ManualClock::new(0));
    let flows = Flows::default();
    let (tx, stop) = watch::channel(false);
    let waiter = |flows: &Flows| {
        let (flows, clock, mut stop) = (flows.clone(), clock.clone(), stop.clone());
        tokio::spawn(async move { flows.start(1, 1, clock.as_ref(), &mut stop).await.map(std::mem::forget) })
    };
    flows.settle(1, slowed(Some(10_000)), 0, 1, S);
    let first = waiter(&flows);
    tokio::task::yield_now().await;
    assert!(!first.is_finished(), "it waits for Retry-After");
    clock.advance(10_000);
    assert!(first.await.unwrap().is_some(), "it starts once the time comes");
    // Its permit was forgotten: the one slot (limit 1) stays taken.
    assert_eq!(flows.try_start(1, 10_000, 1).err(), Some(Gate::Full));
    let second = waiter(&flows);
    tokio::task::yield_now().await;
    assert!(!second.is_finished(), "it waits for a slot");
    drop(Permit { flows: flows.clone(), sub_id: 1 });
    assert!(second.await.unwrap().is_some(), "a freed slot wakes a waiting worker");
    let third = waiter(&flows);
    tokio::task::yield_now().await;
    tx.send(true).unwrap();
    assert!(third.await.unwrap().is_none(), "stop ends the wait with no slot");
}
