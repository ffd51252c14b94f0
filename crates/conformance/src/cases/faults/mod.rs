//! Lost answers on every write path: the write is applied, then its answer is lost
//! ([`Fault::LoseAnswer`](crate::cases::support::faults::Fault::LoseAnswer): the store says `Unavailable`, the outcome unknown), and the
//! client retries as a client would (or the next step runs). Each case names the path and
//! the promise a user relies on after the retry: nothing applied twice, nothing lost,
//! counts right, one holder per message, offsets that never regress. Two cases put a
//! rival's commit between the lost answer and its resolution.
//!
//! The janitor's cases run a janitor whose view is scoped to the case's own topic and
//! objects (`ScopedStore`, `ScopedObjects`), so they can share one moto server with
//! every other case without compacting or collecting under anyone else's expectations.

mod fixtures;
mod groups;
mod janitor;
mod log;
mod queues;
mod scope;

pub use groups::*;
pub use janitor::*;
pub use log::*;
pub use queues::*;

/// Generates one `#[tokio::test]` per lost-answer case; `$backend` is an async expression yielding a [`Backend`](crate::Backend).
#[macro_export]
macro_rules! lost_answer_conformance_suite {
    ($backend:expr) => {
        $crate::lost_answer_conformance_suite!(@cases $backend;
            given_a_publish_commit_applied_but_its_answer_lost_and_a_rival_commit_then_it_answers_its_own_offsets,
            given_a_failed_commit_then_a_rival_on_one_partition_then_a_lost_retry_then_it_answers_the_retrys_offsets,
            given_a_publish_commit_applied_but_its_answer_lost_and_its_segment_moved_then_it_answers_its_own_offsets,
            given_an_s3_put_applied_but_its_answer_lost_then_the_keyed_retry_is_acknowledged_once_and_replay_is_exact,
            given_a_nack_applied_but_its_answer_lost_then_the_retry_is_stale_or_ok_and_the_message_comes_back_once,
            given_a_visibility_change_applied_but_its_answer_lost_then_the_retry_keeps_one_holder,
            given_a_redrive_applied_but_its_answer_lost_then_the_retry_never_leases_a_dead_letter_twice,
            given_a_dead_letter_delete_applied_but_its_answer_lost_then_the_retry_leaves_the_count_right,
            given_a_dlq_purge_applied_but_its_answer_lost_then_the_retry_leaves_the_count_right,
            given_a_subscription_create_applied_but_its_answer_lost_then_the_retry_answers_it_and_nothing_is_doubled,
            given_a_subscription_delete_applied_but_its_answer_lost_then_the_retry_is_done_and_it_stays_deleted,
            given_a_topic_create_applied_but_its_answer_lost_then_the_retry_answers_the_same_topic,
            given_a_topic_delete_applied_but_its_answer_lost_then_the_retry_is_done_and_it_was_deleted_once,
            given_a_group_join_applied_but_its_answer_lost_then_no_event_is_lost_and_the_ghosts_partitions_come_back,
            given_a_group_commit_applied_but_its_answer_lost_then_the_retry_commits_once_and_never_regresses,
            given_a_group_commit_lost_and_a_rival_commit_after_a_rebalance_then_the_offset_never_regresses,
            given_a_seek_applied_but_its_answer_lost_then_the_retry_leaves_the_offsets_at_the_target,
            given_a_leave_applied_but_its_answer_lost_then_the_retry_is_done_and_the_partitions_are_reassigned,
            given_retentions_head_move_applied_but_its_answer_lost_then_the_next_run_finishes_and_replay_is_exact,
            given_retentions_item_removal_applied_but_its_answer_lost_then_the_next_run_finishes_and_replay_is_exact,
            given_a_compaction_swap_applied_but_its_answer_lost_then_the_next_run_finishes_and_replay_is_exact,
            given_a_collectors_doom_applied_but_its_answer_lost_then_the_next_run_collects_and_replay_is_exact,
            given_commits_segments_when_settled_then_each_moves_once_replay_is_exact_and_their_objects_go,
        );
    };
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend.await;
                $crate::cases::faults::$case(&backend).await;
            }
        )+
    };
}
