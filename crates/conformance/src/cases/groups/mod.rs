//! Consumer group conformance cases, on every backend, with a [`ManualClock`](sluice_core::ManualClock):
//! session timeouts pass by advancing it, never by sleeping.

mod assignment;
mod churn;
mod expiry;
mod faults;
mod log_start;
mod membership;
mod never_committed;
mod offsets;
mod polls;
mod reads;

pub use assignment::*;
pub use churn::*;
pub use expiry::*;
pub use faults::*;
pub use log_start::*;
pub use membership::*;
pub use never_committed::*;
pub use offsets::*;
pub use polls::*;
pub use reads::*;

/// Generates one `#[tokio::test]` per group case; `$backend` is an async expression yielding a [`Backend`](crate::Backend).
#[macro_export]
macro_rules! group_conformance_suite {
    ($backend:expr) => {
        $crate::group_conformance_suite!(@cases $backend;
            given_three_members_on_six_partitions_then_two_each_and_leave_and_eviction_rebalance,
            given_a_member_that_committed_nothing_then_describe_lists_its_partitions_with_null_and_full_lag,
            given_the_last_member_left_then_describe_still_lists_every_partition_of_its_topic,
            given_evicted_member_when_commit_then_refused_and_unowned_partition_refused,
            given_member_killed_between_poll_and_commit_then_new_owner_gets_its_events,
            given_two_groups_then_independent_and_a_late_group_replays_everything_from_earliest,
            given_seek_by_timestamp_then_first_event_at_or_after_and_lag_is_watermark_minus_committed,
            given_reset_none_without_offsets_when_poll_then_refused_and_nothing_written,
            given_long_polling_member_when_event_published_then_poll_returns_it_without_waiting_out,
            given_member_owning_120_partitions_when_auto_commit_then_every_partition_commits,
            given_session_ending_during_a_long_poll_then_unknown_member_and_not_brought_back,
            given_partition_back_at_its_old_owner_then_it_resumes_from_the_commit_not_its_old_position,
            given_a_group_positioned_below_the_new_log_start_then_earliest_resumes_at_the_start,
            given_a_group_positioned_below_the_new_log_start_then_latest_jumps_to_the_end,
            given_a_group_positioned_below_the_new_log_start_then_none_refuses_with_offset_out_of_range,
            given_groups_whose_last_member_left_then_offsets_expire_after_the_retention_and_not_before,
            given_a_group_with_a_live_member_then_its_offsets_never_expire_and_after_it_leaves_they_do,
            given_a_poll_answer_lost_when_retried_with_positions_then_same_events_and_commit_stays,
            given_a_heartbeat_applied_but_unanswered_then_the_poll_still_answers_its_events,
            given_a_heartbeat_refused_then_the_poll_answers_and_the_next_one_delivers_again,
            given_auto_commit_with_events_ready_then_one_write_commits_and_heartbeats,
            given_auto_commit_and_nothing_new_then_it_commits_before_the_long_poll_waits,
            given_a_rebalance_before_a_riding_auto_commit_then_the_commit_is_dropped_and_the_poll_answers,
            given_a_member_joining_and_committing_while_its_group_is_deleted_then_its_commit_stays,
            given_a_wide_group_deleted_while_a_member_commits_then_that_commit_stays,
            given_a_member_joining_between_a_wide_groups_delete_phases_then_no_old_offset_is_inherited,
            given_a_group_delete_whose_offsets_read_misses_one_then_a_group_made_anew_inherits_nothing,
            given_a_member_joining_between_a_wide_groups_expiry_phases_then_no_old_offset_is_inherited,
            given_a_group_over_three_topics_of_1024_partitions_then_it_rebalances_and_commits,
            given_a_static_join_answer_lost_when_retried_then_the_same_member_and_no_ghost,
            given_a_member_silent_for_exactly_its_session_then_evicted_and_not_a_millisecond_before,
            given_members_joining_and_leaving_then_the_assignment_is_sticky,
            given_a_group_with_a_live_member_then_delete_refused_and_once_it_left_deleted_with_its_offsets,
            given_segments_of_very_different_sizes_then_polls_of_any_size_deliver_every_offset_once_in_order,
            given_a_topic_re_created_since_a_process_last_read_it_then_its_polls_and_commits_see_the_new_one,
            given_a_member_polling_on_from_its_last_poll_then_its_reads_are_one_batch_where_batches_are_cheap,
            given_more_members_than_partitions_then_one_assigned_nothing_reads_no_heads_where_reads_are_billed,
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn given_members_joining_and_leaving_while_publishers_write_then_every_acked_event_delivered() {
            let backend = $backend.await;
            $crate::cases::groups::given_members_joining_and_leaving_while_publishers_write_then_every_acked_event_delivered(&backend).await;
        }
    };
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend.await;
                $crate::cases::groups::$case(&backend).await;
            }
        )+
    };
}
