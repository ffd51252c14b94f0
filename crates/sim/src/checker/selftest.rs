//! The checker is not lenient: fed a history in which the core refused what it had to
//! accept (a held receipt's ack, a commit of the group's current generation) or delivered a
//! key's message while an earlier one was not done, it flags it; fed the same answer where
//! it was due, it does not.

use bytes::Bytes;
use sluice_core::groups::{PollRequest, ResetPolicy};
use sluice_core::keys::dead_key;
use sluice_core::ports::state::{StateStore, WriteOp};
use sluice_core::queues::ReceiptError;
use sluice_core::{Clock, Code, Error};

use crate::model::EventInfo;
use crate::world::{Act, Done, Held, Options, Res, SettleHow, World, GROUP, SUB_QK, TOPIC_A};

/// A quiet world, set up (topics, subscriptions, clients), and `test` run in it.
fn in_a_world(test: impl AsyncFnOnce(&mut World)) {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        let mut world = World::new(5, Options { no_faults: true, ..Options::default() });
        world.setup().await;
        test(&mut world).await;
    });
}

/// A done op of client 0 over seqs `seq..seq + 1`, from `start_ms` to `end_ms`.
fn done(act: Act, seq: u64, start_ms: i64, end_ms: i64, res: Res) -> Done {
    Done { client: 0, act, start_seq: seq, end_seq: seq + 1, start_ms, end_ms, topic0: None, touch0: 0, res }
}

/// A delivery of SUB_QK's 0@0 with a window of 10 s, recorded as a receive's answer was, and
/// an ack of it refused as stale `ack_after_ms` after the receive.
fn refused_ack(world: &mut World, ack_after_ms: i64) {
    let sub_id = world.learn_sub(SUB_QK).expect("SUB_QK exists");
    let now = world.clock.now_ms();
    let receive = done(Act::Receive { sub: SUB_QK, visibility: 10_000 }, 1, now, now, Res::Crashed);
    world.check_delivery(&receive, sub_id, 0, 0, 7, 1, 10_000);
    let held = Held { receipt: "r".into(), sub_id, partition: 0, offset: 0, nonce: 7, count: 1 };
    // As a worker's ack marks its delivery when it starts.
    let d = world.delivery_mut(&held).unwrap();
    d.release_seq = Some(3);
    d.ack_seq = Some(3);
    let (start, end) = (now + ack_after_ms - 10, now + ack_after_ms);
    let act = Act::Settle { sub: SUB_QK, how: SettleHow::Ack, held: vec![held.clone()] };
    world.handle(done(act, 3, start, end, Res::Acks(Ok(vec![Err(ReceiptError::Stale)]))));
}

#[test]
fn given_a_held_receipt_when_its_ack_is_refused_then_the_checker_flags_it() {
    in_a_world(async |world| {
        refused_ack(world, 2_000);
        let v = world.violation.clone().expect("a refused ack of a held receipt is flagged");
        assert_eq!(v.property, "ack-refused", "{v:?}");
    });
}

#[test]
fn given_a_window_that_may_have_ended_when_the_ack_is_refused_then_the_checker_allows_it() {
    in_a_world(async |world| {
        refused_ack(world, 10_000);
        assert!(world.violation.is_none(), "{:?}", world.violation);
    });
}

/// A member joined to GROUP through the core, and a commit of its partitions at
/// `generation + skew` answered `refusal`; the stored group unchanged meanwhile.
async fn refused_commit(world: &mut World, skew: u64, refusal: Code) {
    let groups = world.procs[0].groups.clone();
    let req = PollRequest {
        group: GROUP.into(),
        member_id: None,
        topics: vec![TOPIC_A.into()],
        max_events: 1,
        max_bytes: 1 << 20,
        wait_ms: 0,
        reset: ResetPolicy::Earliest,
        session_timeout_ms: Some(10_000),
        auto_commit: false,
        instance_id: None,
        positions: None,
    };
    let joined = groups.poll(&req).await.expect("a join in a quiet world");
    let generation = joined.generation + skew;
    let offsets: Vec<(u32, u64)> = joined.assignment.iter().map(|tp| (tp.partition, 0)).collect();
    let member = joined.member_id.clone();
    let snap = world.group_snap(&member);
    world.commit_snaps.insert(3, snap);
    let now = world.clock.now_ms();
    let refused = Res::Unit(Err(Error::Conflict { code: refusal, message: "fenced".into() }));
    world.handle(done(Act::Commit { generation, offsets, member }, 3, now, now + 10, refused));
}

#[test]
fn given_the_current_generation_when_a_commit_is_refused_as_stale_then_the_checker_flags_it() {
    in_a_world(async |world| {
        refused_commit(world, 0, Code::StaleGeneration).await;
        let v = world.violation.clone().expect("an over-fenced commit is flagged");
        assert_eq!(v.property, "commit-over-fenced", "{v:?}");
    });
}

#[test]
fn given_an_older_generation_when_a_commit_is_refused_as_stale_then_the_checker_allows_it() {
    in_a_world(async |world| {
        refused_commit(world, 1, Code::StaleGeneration).await;
        assert!(world.violation.is_none(), "{:?}", world.violation);
    });
}

/// SUB_QK's 0@0 and 0@1, of one key, as published; 0@0 delivered once (its subscription's
/// `max_receive_count` is at least 2) and never settled; then, if `dead_in_store`, 0@0 a
/// dead letter in the store (as a receive answering its other partitions' messages makes
/// one after a take whose write's answer was lost); then 0@1 delivered.
async fn key_after_an_unsettled_message(world: &mut World, dead_in_store: bool) {
    let sub_id = world.learn_sub(SUB_QK).expect("SUB_QK exists");
    let topic_id = world.live_topic_id(TOPIC_A).expect("TOPIC_A exists");
    for offset in 0..2 {
        let event = 1000 + offset;
        let info = EventInfo {
            topic: TOPIC_A,
            key: Some(Bytes::from_static(b"k")),
            ts: None,
            ts_window: (0, 0),
            value: Bytes::new(),
            partition: Some(0),
            idempotent: false,
            refused: false,
            sched: None,
        };
        world.events.insert(event, info);
        world.facts.insert((topic_id, 0, offset), event);
    }
    let now = world.clock.now_ms();
    let receive = |seq| done(Act::Receive { sub: SUB_QK, visibility: 1_000 }, seq, now, now, Res::Crashed);
    world.check_delivery(&receive(1), sub_id, 0, 0, 7, 1, 1_000);
    if dead_in_store {
        let dead = WriteOp::create(dead_key(sub_id, 0, 0), Bytes::from_static(b"dead"));
        world.mem.write(vec![dead]).await.expect("a write to the quiet store");
    }
    world.check_delivery(&receive(3), sub_id, 0, 1, 8, 1, 1_000);
}

#[test]
fn given_an_earlier_message_of_the_key_unsettled_when_the_next_is_delivered_then_the_checker_flags_it() {
    in_a_world(async |world| {
        key_after_an_unsettled_message(world, false).await;
        let v = world.violation.clone().expect("a key's message delivered before the one before it is done");
        assert_eq!(v.property, "key-order", "{v:?}");
    });
}

#[test]
fn given_an_earlier_message_of_the_key_a_dead_letter_in_the_store_then_the_checker_allows_the_next() {
    in_a_world(async |world| {
        key_after_an_unsettled_message(world, true).await;
        assert!(world.violation.is_none(), "{:?}", world.violation);
    });
}

/// Two overlapping receives of SUB_QK's 0@0 answered out of the order of their takes: #1
/// (window `first_window`, seqs 1..4) answered at +20 ms, after #2 (seqs 2..3, window 10 s)
/// was answered at +10 ms.
fn answered_out_of_order(world: &mut World, first_window: u64) {
    let sub_id = world.learn_sub(SUB_QK).expect("SUB_QK exists");
    let now = world.clock.now_ms();
    let receive = |window, seqs: (u64, u64), end_ms| Done {
        start_seq: seqs.0,
        end_seq: seqs.1,
        ..done(Act::Receive { sub: SUB_QK, visibility: window }, 0, now, end_ms, Res::Crashed)
    };
    world.check_delivery(&receive(10_000, (2, 3), now + 10), sub_id, 0, 0, 8, 2, 10_000);
    world.check_delivery(&receive(first_window, (1, 4), now + 20), sub_id, 0, 0, 7, 1, first_window);
}

#[test]
fn given_a_window_of_0_answered_after_the_next_take_then_the_checker_allows_it() {
    in_a_world(async |world| {
        answered_out_of_order(world, 0);
        assert!(world.violation.is_none(), "{:?}", world.violation);
    });
}

#[test]
fn given_a_window_still_open_when_the_next_take_answered_then_the_checker_flags_it() {
    in_a_world(async |world| {
        answered_out_of_order(world, 10_000);
        let v = world.violation.clone().expect("#2 answered inside #1's window is flagged");
        assert_eq!(v.property, "two-holders", "{v:?}");
    });
}
