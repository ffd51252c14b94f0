//! Retention, compaction and the collector, through the real [`Log`](sluice_core::Log) and [`Janitor`](sluice_core::upkeep::Janitor)
//! on each backend, with a fake clock: what the policy removes and only that, readers
//! that never see a gap while segments are merged and removed under them, and objects
//! deleted only when nothing indexed needs them.

mod collection;
mod compaction;
mod counting;
mod fixtures;
mod janitor;
mod limits;
mod rewritten;
mod torn;

pub use collection::*;
pub use compaction::*;
pub use counting::*;
pub use janitor::*;
pub use limits::*;
pub use rewritten::*;
pub use torn::*;

/// Generates one `#[tokio::test]` per retention case; `$backend` is an async expression yielding a [`Backend`](crate::Backend).
#[macro_export]
macro_rules! retention_conformance_suite {
    ($backend:expr) => {
        $crate::retention_conformance_suite!(@cases $backend;
            given_retention_ms_then_exactly_the_expired_segments_go_and_reads_below_the_start_get_416,
            given_retention_bytes_then_each_partition_stays_under_its_bound,
            given_many_one_event_segments_then_compaction_keeps_every_event_and_replay_reads_few_objects,
            given_a_compacted_run_removed_by_size_retention_then_the_byte_count_stays_exact,
            given_a_merge_racing_retention_then_the_byte_count_stays_what_the_segments_hold,
            given_a_write_out_inside_the_last_segment_retention_takes_then_no_merge_crosses_the_start,
            given_a_stale_committer_rewriting_an_entry_compaction_merged_then_reads_stay_dense_and_exact,
            given_a_write_out_covered_by_an_item_straddling_the_log_start_then_compaction_removes_it,
            given_orphan_blob_then_collected_after_the_grace_period_and_never_a_committed_one,
            given_deleted_topic_then_its_objects_are_collected_and_objects_shared_with_live_topics_stay,
            given_an_index_query_torn_by_a_swap_then_retention_stops_at_the_hole,
            given_compacted_segments_then_offset_by_time_uses_the_time_index_and_answers_exactly,
            given_a_later_index_page_torn_by_a_swap_then_offset_by_time_still_answers_exactly,
            given_a_topic_purged_during_a_janitor_pass_then_the_pass_leaves_none_of_its_items,
            given_a_deadline_when_the_janitor_runs_until_it_then_it_stops_there_and_the_next_run_finishes,
            given_intake_past_a_bytes_bound_when_a_retention_interval_passes_then_the_partition_is_within_it_before_any_round,
            given_a_pacer_when_the_janitor_compacts_then_every_rewrite_waits_for_it_first,
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn given_readers_replaying_during_compaction_and_retention_then_no_error_no_gap_same_bytes() {
            let backend = $backend.await;
            $crate::cases::retention::given_readers_replaying_during_compaction_and_retention_then_no_error_no_gap_same_bytes(&backend).await;
        }
    };
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend.await;
                $crate::cases::retention::$case(&backend).await;
            }
        )+
    };
}
