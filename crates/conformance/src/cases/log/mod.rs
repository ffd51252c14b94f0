//! The log's conformance cases: the promises of the contract (dense offsets,
//! acknowledged events never lost, deletes that take effect at once), checked
//! through the real [`Log`](sluice_core::Log) on each backend, with other "processes" (separate
//! handles with their own caches) and injected storage faults.

mod create;
mod faults;
mod fixtures;
mod publish;
mod reads;
mod segments;
mod single;
mod topics;

/// Reading a partition whole, for tests outside the cases (moto_realism).
pub use fixtures::{read_all, values};

pub use create::*;
pub use faults::*;
pub use publish::*;
pub use reads::*;
pub use segments::*;
pub use single::*;
pub use topics::*;

/// Generates one `#[tokio::test]` per log case; `$backend` is an async expression yielding a [`Backend`](crate::Backend).
#[macro_export]
macro_rules! log_conformance_suite {
    ($backend:expr) => {
        $crate::log_conformance_suite!(@cases $backend;
            given_a_new_topic_of_150_partitions_when_cold_processes_publish_then_no_write_names_its_record,
            given_a_create_stopped_after_its_first_write_when_retried_then_its_heads_are_finished,
            given_a_topic_whose_heads_are_missing_when_published_then_offsets_start_at_zero,
            given_a_delete_of_150_partitions_stopped_after_its_first_write_when_retried_then_every_head_is_fenced,
            given_warm_process_when_topic_deleted_elsewhere_then_publish_404_and_recreated_topic_starts_clean,
            given_stale_head_after_earlier_index_items_removed_when_publish_then_retries_and_offsets_stay_dense,
            given_commit_applied_but_answer_lost_when_publish_then_answered_once_and_written_once,
            given_commit_failed_and_answer_lost_when_publish_then_retried_and_written_once,
            given_storage_down_when_publish_then_error_nothing_visible_and_keyed_retry_succeeds_once,
            given_throttling_and_conflicts_when_publish_then_retried_and_acknowledged,
            given_a_topic_delete_throttled_three_times_then_it_backs_off_retries_and_the_topic_is_gone,
            given_a_topic_delete_throttled_past_its_deadline_then_unavailable_and_nothing_changed,
            given_a_150_partition_publish_when_its_second_write_lands_and_its_answer_is_lost_then_read_back,
            given_keyed_groups_of_a_150_partition_publish_when_the_seconds_answer_is_lost_then_its_retry_answers_it,
            given_two_publishes_racing_under_one_key_then_written_once_and_both_answer_it,
            given_every_cached_head_stale_when_publish_then_one_failed_write_heals_them_all,
            given_publish_touching_150_partitions_then_committed_per_partition_or_refused_with_a_key,
            given_idempotency_key_then_retry_answers_the_same_and_other_request_is_refused,
            given_idempotency_record_older_than_its_ttl_then_key_can_be_reused,
            given_deleted_topic_with_many_index_items_then_janitor_purges_in_bounded_steps_and_nothing_shows,
            given_events_then_replay_from_any_offset_and_offset_lookup_by_time,
            given_a_reader_long_polling_when_an_event_is_published_then_the_publish_wakes_it,
            given_a_publish_in_flight_when_its_topic_is_deleted_then_it_is_refused_or_committed_before,
            given_stale_processes_when_they_publish_after_the_topic_was_deleted_then_not_found_and_nothing_stored,
            given_small_and_large_commits_then_small_ones_are_inline_and_replay_spans_both,
            given_a_commit_larger_than_a_part_then_a_read_of_a_few_events_fetches_one_part,
            given_one_commit_of_equal_inline_segments_on_two_partitions_then_each_partition_reads_its_own,
            given_single_write_commits_when_each_replaces_the_heads_entry_then_every_event_stays_readable,
            given_a_commit_stopped_between_writing_out_the_entry_and_its_head_then_later_commits_lose_nothing,
            given_a_write_out_landing_after_the_purge_with_its_answer_lost_then_nothing_is_left,
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn eight_concurrent_publishers_to_one_partition_get_dense_offsets() {
            let backend = $backend.await;
            $crate::cases::log::eight_concurrent_publishers_to_one_partition_get_dense_offsets(&backend).await;
        }
    };
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend.await;
                $crate::cases::log::$case(&backend).await;
            }
        )+
    };
}
