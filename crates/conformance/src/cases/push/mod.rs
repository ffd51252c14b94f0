//! Push delivery and content filter conformance cases, on every backend, with a
//! [`ManualClock`](sluice_core::ManualClock): the dispatcher (`sluice_core::push`) drives a scripted receiver (a
//! [`Deliver`](sluice_core::ports::deliver::Deliver) that answers as a flaky webhook or Lambda function would), so failures,
//! timeouts, partial batches and backoffs are exact and repeatable; the HTTP adapter is
//! tested against a real server in sluice-runtime and end to end against `serve`.

mod deletion;
mod delivery;
mod faults;
mod filters;
mod flow;
mod parallel;
mod patch;
mod pause;
mod rate;
mod receiver;
mod retries;
mod rotation;
mod schedule;
mod worker;

pub use deletion::*;
pub use delivery::*;
pub use faults::*;
pub use filters::*;
pub use flow::*;
pub use parallel::*;
pub use patch::*;
pub use pause::*;
pub use rate::*;
pub use retries::*;
pub use rotation::*;
pub use schedule::*;
pub use worker::*;

/// Generates one `#[tokio::test]` per push case; `$backend` is an async expression yielding a [`Backend`](crate::Backend).
#[macro_export]
macro_rules! push_conformance_suite {
    ($backend:expr) => {
        $crate::push_conformance_suite!(@cases $backend;
            given_a_flaky_receiver_then_every_matching_event_is_pushed_at_least_once_never_after_its_ack_and_poison_dead_letters_once,
            given_signed_deliveries_then_they_verify_the_id_is_stable_across_retries_and_retry_after_is_honoured,
            given_a_push_subscription_then_clients_cannot_receive_it_and_an_idle_one_sends_nothing,
            given_heads_read_a_moment_ago_then_an_event_published_since_by_this_process_is_pushed_at_once,
            given_a_paused_push_subscription_then_nothing_is_pushed_and_once_resumed_everything_is,
            given_a_running_dispatcher_when_its_subscription_is_paused_then_nothing_is_pushed_until_resumed,
            given_a_push_target_changed_then_no_delivery_after_the_answer_goes_to_the_old_one,
            // Secret rotation (`rotation.rs`).
            given_a_rotated_push_secret_then_both_sign_during_the_overlap_and_only_the_new_one_after,
            given_a_bad_rotation_or_a_subscription_without_a_secret_then_it_is_refused_and_nothing_changes,
            given_a_dispatcher_that_dies_mid_delivery_then_its_batch_is_pushed_again_after_the_window,
            given_a_filter_on_a_pull_subscription_then_only_matching_events_are_received_and_the_rest_counted,
            given_events_with_a_trace_context_then_a_delivery_carries_the_one_its_batch_shares,
            given_a_subscription_or_topic_deleted_mid_delivery_then_the_run_succeeds_and_the_others_are_delivered,
            given_failed_attempts_then_a_retry_pushes_the_same_batch_under_the_same_webhook_id_and_a_partial_failure_the_named_messages_alone,
            // Flow control and endpoint health (`flow.rs`).
            given_a_receiver_answering_429_with_retry_after_then_nothing_is_received_until_then_and_the_limit_halves_then_recovers,
            given_503s_and_timeouts_then_the_in_flight_limit_halves_down_to_one_and_a_success_adds_one,
            given_an_endpoint_failing_twenty_times_over_five_minutes_then_it_is_suspended_probed_once_a_minute_and_resumed,
            given_a_target_answering_410_gone_then_its_batch_is_dead_lettered_at_once_with_reason_gone,
            given_a_gone_message_sought_back_over_when_gone_again_then_its_dead_letter_is_kept_once,
            given_a_running_dispatcher_and_a_429_with_retry_after_then_nothing_is_received_until_then,
            given_a_push_subscription_with_a_rate_then_deliveries_follow_it_and_spend_no_receive_count,
            given_a_push_subscription_with_a_rate_then_a_batch_waits_for_its_tokens,
            given_a_rate_limited_backlog_on_a_quiet_topic_then_it_is_pushed_at_the_rate_neither_stalled_nor_spinning,
            // The push fault cases (`faults.rs`).
            given_the_ack_answer_after_a_2xx_is_lost_then_an_applied_ack_holds_and_a_lost_one_repushes_the_batch,
            given_a_push_receive_whose_answer_is_lost_then_nothing_is_pushed_until_its_window_ends_then_once,
            given_two_dispatchers_on_one_keyed_subscription_then_a_key_is_pushed_in_order_never_twice_at_once,
            given_a_dispatcher_stopped_while_a_receive_takes_a_batch_then_the_batch_is_delivered_and_settled,
            // Runs in parallel (`parallel.rs`).
            given_concurrent_runs_then_a_subscription_has_at_most_max_in_flight_and_subscriptions_run_in_parallel,
            given_a_backlog_then_one_run_delivers_max_in_flight_batches_at_once,
            // Scheduled delivery (`schedule.rs`).
            given_a_scheduled_event_on_a_push_subscription_then_it_is_pushed_at_its_time_and_not_before,
            given_a_quiet_topic_when_a_scheduled_message_comes_due_then_the_staying_sweep_pushes_it_at_its_time,
            given_a_scheduled_message_due_after_the_sweeps_stay_then_the_sweep_ends_without_waiting,
            given_a_message_due_before_the_next_sweep_then_the_stream_run_hands_it_over_and_it_is_pushed_at_its_time,
            given_thousands_due_at_once_on_a_quiet_topic_then_pushed_at_their_time_in_bounded_batches,
            given_a_running_dispatcher_when_a_scheduled_message_comes_due_then_it_is_pushed_at_that_instant,
            // The embedded dispatcher's workers (`worker.rs`).
            given_a_running_dispatcher_then_a_batchs_acks_ride_on_its_next_receive_one_queue_write_per_batch,
            given_a_running_dispatcher_waiting_for_a_retry_after_then_a_delivered_batchs_acks_are_written_not_held,
        );
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn given_ordering_by_key_under_four_pushers_then_per_key_in_offset_order_and_never_two_at_once() {
            let backend = $backend.await;
            $crate::cases::push::given_ordering_by_key_under_four_pushers_then_per_key_in_offset_order_and_never_two_at_once(&backend).await;
        }
    };
    (@cases $backend:expr; $($case:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let backend = $backend.await;
                $crate::cases::push::$case(&backend).await;
            }
        )+
    };
}
