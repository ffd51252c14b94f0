//! The [`StateStore`](sluice_core::ports::state::StateStore) port's conformance cases, written once: a backend's test
//! file invokes [`store_conformance_suite!`](crate::store_conformance_suite),
//! which makes one `#[tokio::test]` of each case.
//!
//! Every case works in collections (`pk`s) of its own, so cases can share a
//! table or a data directory and run in parallel.

mod counter;
mod expiry;
mod fixtures;
mod queries;
mod writes;

pub use counter::*;
pub use expiry::*;
pub use queries::*;
pub use writes::*;

/// What a backend's [`StateStore::purge_expired`](sluice_core::ports::state::StateStore::purge_expired) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purge {
    /// Deletes expired items and counts them (SQLite).
    Deletes,
    /// Answers 0: the store removes expired items by itself (DynamoDB's TTL).
    LeavesToStore,
}

/// Generates one `#[tokio::test]` per state-store case. `$backend` is an async
/// expression yielding a [`Backend`](crate::Backend); `$purge` is the backend's [`Purge`].
#[macro_export]
macro_rules! store_conformance_suite {
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend.await;
                $crate::store::$case(&backend).await;
            }
        )+
    };
    ($backend:expr, $purge:expr) => {
        $crate::store_conformance_suite!(@cases $backend;
            given_put_then_get_round_trips_value_and_expiry_and_versions_count_1_2_3,
            given_existing_item_when_put_absent_then_condition_failed_and_value_kept,
            given_version_mismatch_when_put_then_condition_failed_and_nothing_written,
            given_op_2_fails_when_write_then_condition_failed_on_op_2_and_ops_0_and_1_not_applied,
            given_check_op_when_write_then_its_condition_decides_and_it_changes_nothing,
            given_deferred_writes_among_writes_then_each_applies_as_a_write_does,
            given_delete_when_write_then_item_removed_only_if_its_condition_holds,
            given_two_ops_on_one_key_when_write_then_invalid_and_nothing_written,
            given_101_ops_when_write_then_invalid_and_nothing_written,
            given_100_ops_when_write_then_all_applied,
            given_bounds_when_query_then_inclusive_range_in_either_direction,
            given_limit_when_paging_with_next_then_collection_walked_exactly_once_in_order,
            given_reads_when_read_many_then_each_answered_in_order_as_a_get_or_query_alone,
            given_expiry_passed_then_item_invisible_and_absent_put_recreates_it_at_version_1,
            given_expired_items_among_live_ones_when_paging_then_only_live_items_and_walk_completes,
            given_60_keys_when_delete_many_then_all_gone_and_other_items_kept,
        );
        #[tokio::test]
        async fn given_expired_items_when_purge_expired_then_they_stay_invisible_and_live_items_stay() {
            let backend = $backend.await;
            $crate::store::given_expired_items_when_purge_expired_then_they_stay_invisible_and_live_items_stay(
                &backend, $purge,
            )
            .await;
        }
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn given_8_handles_incrementing_one_counter_under_version_conditions_then_no_update_lost() {
            let backend = $backend.await;
            $crate::store::given_8_handles_incrementing_one_counter_under_version_conditions_then_no_update_lost(
                &backend,
            )
            .await;
        }
    };
}
