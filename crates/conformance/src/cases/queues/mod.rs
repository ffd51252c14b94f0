//! Work queue conformance cases, on every backend, with a [`ManualClock`](sluice_core::ManualClock):
//! visibility timeouts, delays and backoffs pass by advancing it, never by sleeping.
//! Where a case runs concurrent workers, the clock stays put while they run, so any
//! second delivery of a message within a case's run is a bug, not a timeout.

mod cache;
mod delays;
mod describe;
mod faults;
mod hints;
mod long_poll;
mod lost_answers;
mod messages;
mod patch;
mod pause;
mod peek;
mod rate;
mod removed_dead;
mod riding;
mod schedule;
mod seek;
mod settings;
mod start;
mod workers;

pub use cache::*;
pub use delays::*;
pub use describe::*;
pub use faults::*;
pub use hints::*;
pub use long_poll::*;
pub use lost_answers::*;
pub use messages::*;
pub use patch::*;
pub use pause::*;
pub use peek::*;
pub use rate::*;
pub use removed_dead::*;
pub use riding::*;
pub use schedule::*;
pub use seek::*;
pub use settings::*;
pub use start::*;
pub use workers::*;

/// Generates one `#[tokio::test]` per queue case; `$backend` is an async expression yielding a [`Backend`](crate::Backend).
#[macro_export]
macro_rules! queue_conformance_suite {
    ($backend:expr) => {
        $crate::queue_conformance_suite!(@cases $backend;
            given_a_worker_that_never_acks_then_redelivered_after_the_timeout_extended_by_a_visibility_change_and_released_by_nack,
            given_a_peek_then_it_shows_the_visible_messages_and_changes_nothing,
            given_a_filtered_subscription_then_describe_reports_unmatched_events_as_unscanned_not_visible,
            given_a_poison_message_then_dead_lettered_once_after_max_receives_and_redrive_delivers_it_fresh,
            given_dead_letters_then_listed_in_pages_deleted_one_by_one_redriven_partly_and_purged,
            given_dead_letters_deleted_purged_or_redriven_then_their_old_receipts_are_stale,
            given_start_earliest_after_1000_events_on_four_partitions_then_each_received_exactly_once,
            given_start_timestamp_then_exactly_the_events_at_or_after_it_are_received,
            given_start_latest_then_only_events_published_after_creation_are_received,
            given_start_offsets_then_named_partitions_start_there_and_others_at_latest,
            given_delay_then_new_messages_visible_at_their_timestamp_plus_delay_and_not_before,
            given_out_of_order_timestamps_in_one_partition_when_delay_then_each_visible_at_its_own_time,
            given_an_event_stamped_in_the_future_then_the_events_after_it_are_not_held_behind_it,
            given_redelivery_backoff_then_the_nth_redelivery_waits_the_nth_step,
            given_create_twice_then_idempotent_with_same_settings_and_conflict_with_others_and_invalid_settings_refused,
            given_unknown_subscription_then_not_found_for_every_operation,
            given_tampered_or_foreign_receipts_then_invalid_and_nothing_changes,
            given_subscription_deleted_and_recreated_under_the_same_name_then_it_starts_fresh,
            given_a_deleted_subscription_and_a_deleted_topic_then_the_janitor_removes_every_queue_item,
            given_receive_applied_but_answer_lost_then_nobody_holds_it_until_the_timeout_and_it_comes_back_once,
            given_receive_failed_before_applying_then_the_message_is_still_visible,
            given_ack_applied_but_answer_lost_then_the_retry_is_ok_and_the_message_never_comes_back,
            given_nack_applied_but_answer_lost_then_the_retry_is_ok_until_the_message_is_received_again,
            given_long_poll_on_an_empty_queue_when_a_message_is_published_then_it_returns_the_message,
            given_long_poll_on_an_empty_queue_when_the_clock_passes_the_wait_then_it_returns_empty_not_before,
            given_long_poll_when_a_delayed_message_comes_due_then_it_returns_the_message,
            given_long_poll_when_the_only_messages_lease_ends_then_it_is_delivered_at_that_instant,
            given_undelivered_messages_when_the_log_start_passes_them_then_counted_expired_never_delivered_and_the_rest_are,
            given_a_describe_whose_first_read_is_torn_then_its_counts_are_still_exact,
            given_a_change_interrupted_after_its_marks_then_an_empty_change_lets_the_queue_deliver_again,
            given_a_receive_landing_between_a_describes_reads_then_its_counts_add_up,
            given_a_keyed_receive_whose_read_misses_a_moved_lease_then_the_key_still_waits,
            given_retention_passing_a_receive_in_flight_then_it_answers_from_the_new_start,
            given_a_slow_receive_then_the_visibility_window_counts_from_its_write,
            given_receives_acks_nacks_and_visibility_changes_then_only_acks_and_nacks_are_deferred,
            given_a_stale_delete_after_the_subscription_was_re_created_then_the_new_one_stays,
            given_a_receive_racing_its_subscriptions_purge_then_no_item_is_left_behind,
            given_a_moved_lease_hidden_by_a_torn_read_then_its_receipt_still_acks,
            given_a_dead_message_not_yet_buried_when_the_dlq_is_purged_then_it_is_purged,
            given_a_receive_answering_after_a_window_ended_then_it_leaves_those_messages_out,
            given_a_cached_subscription_deleted_elsewhere_then_no_write_acts_on_it,
            given_a_cached_subscription_re_created_elsewhere_then_requests_go_to_the_new_one,
            given_a_cached_subscription_re_created_elsewhere_then_acks_riding_on_its_receive_are_invalid,
            given_a_cached_subscriptions_topic_deleted_elsewhere_then_no_write_acts_on_it,
            given_a_cached_subscription_deleted_elsewhere_then_an_empty_receive_finds_out_within_the_ttl,
            given_a_cached_subscription_re_created_elsewhere_as_push_then_a_client_cannot_receive,
            given_acks_riding_on_receives_then_stale_ones_refused_and_acked_messages_never_come_back,
            given_two_messages_of_a_lease_held_longer_to_the_same_time_then_each_settles_alone,
            given_a_zero_visibility_timeout_then_every_receive_delivers_and_it_is_visible_again_at_once,
            given_a_keyed_queue_with_a_zero_window_then_a_keys_head_comes_again_before_its_next,
            given_a_paused_subscription_then_it_counts_new_messages_delivers_none_settles_what_is_out_and_resume_delivers_them,
            given_pause_or_resume_of_an_unknown_or_deleted_subscription_then_not_found,
            given_a_paused_subscription_then_a_long_poll_ends_empty_at_its_wait_and_one_waiting_is_woken_by_resume,
            given_a_cached_subscription_paused_elsewhere_then_no_receive_after_the_pause_grants_a_lease,
            given_acked_messages_when_sought_back_then_a_dry_run_counts_them_and_the_seek_redelivers_them,
            given_a_seek_forward_then_skipped_messages_never_come_and_their_leases_are_stale,
            given_a_filtered_subscription_when_sought_then_unmatched_messages_count_in_neither,
            given_held_messages_a_new_filter_does_not_match_when_sought_back_then_counted_once,
            given_a_dead_letter_sought_back_over_when_it_runs_out_again_then_buried_once,
            given_a_dead_lease_sought_back_over_when_max_receives_is_raised_then_delivered_once,
            given_dead_letters_when_purged_then_the_queue_is_empty_and_the_dlq_is_kept,
            given_a_patch_then_each_field_changes_and_describe_shows_it,
            given_a_changed_visibility_timeout_then_the_next_receive_uses_it_and_a_granted_lease_keeps_its_window,
            given_a_changed_filter_then_it_applies_from_filter_since_on_each_partition,
            given_a_patch_naming_start_ordering_or_a_push_target_on_a_pull_subscription_then_refused_and_unchanged,
            given_a_cached_subscription_patched_elsewhere_then_the_next_receive_uses_the_new_settings,
            given_a_change_failed_after_its_marks_when_one_naming_the_stored_settings_answers_then_all_deliver,
            given_a_partition_a_process_saw_idle_when_another_redrives_there_then_delivered_once_the_hint_lapses,
            given_a_partition_a_process_saw_idle_when_it_redrives_there_itself_then_delivered_at_once,
            given_a_rate_then_a_burst_then_exactly_per_second_times_t_messages_over_t,
            given_a_rate_then_a_long_poll_waits_for_the_next_token,
            given_two_processes_on_one_rate_then_they_share_its_bucket,
            given_a_throttled_subscription_then_waiting_messages_spend_no_receive_count,
            given_a_patch_adding_and_removing_a_rate_then_receives_follow_it,
            given_scheduled_events_then_none_is_delivered_early_and_each_comes_at_its_time,
            given_long_poll_when_a_scheduled_message_comes_due_then_it_returns_the_message_at_that_instant,
            given_long_poll_when_a_scheduled_message_is_published_during_the_wait_then_it_returns_it_at_its_time,
            given_thousands_scheduled_ahead_of_due_messages_then_those_are_not_held_back,
            given_a_subscription_created_after_a_scheduled_publish_then_it_honours_the_schedule,
            given_a_scheduled_event_then_replay_reads_it_at_once_with_its_schedule,
            given_a_schedule_beyond_the_topics_retention_then_refused_and_nothing_written,
            given_a_scheduled_message_moved_aside_when_sought_back_then_it_still_waits_and_comes_once,
        );
        $crate::queue_conformance_suite!(@concurrent $backend;
            given_eight_workers_draining_a_queue_then_every_message_acked_exactly_once_and_backlog_ends_empty,
            given_ordering_by_key_under_eight_workers_with_nacks_then_one_in_flight_per_key_and_acked_in_offset_order,
            given_concurrent_receives_acks_and_nacks_then_backlog_counts_match_a_model_of_what_happened,
            given_eight_workers_acking_on_their_next_receive_then_every_message_acked_exactly_once,
            given_sixteen_workers_on_one_partition_then_no_ack_is_refused_for_contention,
            given_receives_racing_a_pause_then_none_that_started_after_its_answer_grants_a_lease,
            given_receives_and_acks_racing_a_seek_then_none_after_its_answer_acts_on_a_passed_over_message,
            given_receives_racing_a_patch_then_none_that_started_after_its_answer_uses_the_old_setting,
            given_eight_receivers_racing_on_one_rate_then_together_they_get_exactly_the_burst,
        );
    };
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend.await;
                $crate::cases::queues::$case(&backend).await;
            }
        )+
    };
    (@concurrent $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let backend = $backend.await;
                $crate::cases::queues::$case(&backend).await;
            }
        )+
    };
}
