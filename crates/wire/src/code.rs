//! The API's error codes: each one's name on the wire and its HTTP status.

/// Declares [`Code`]: each error code, its name on the wire and its HTTP status.
macro_rules! codes {
    ($($variant:ident = $name:literal => $status:literal,)*) => {
        /// Every error code the API answers, stable and snake_case on the wire. docs/API.md's
        /// table lists exactly these (a test checks it).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Code {
            $($variant,)*
        }

        impl Code {
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// The code as clients see it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Code::$variant => $name,)*
                }
            }

            /// The HTTP status it is answered with (200: inside a per-item result).
            pub fn status(self) -> u16 {
                match self {
                    $(Code::$variant => $status,)*
                }
            }
        }
    };
}

codes! {
    InvalidJson = "invalid_json" => 400,
    InvalidRequest = "invalid_request" => 400,
    UnreadableBody = "unreadable_body" => 400,
    InvalidName = "invalid_name" => 400,
    InvalidPartitions = "invalid_partitions" => 400,
    InvalidRetention = "invalid_retention" => 400,
    EmptyBatch = "empty_batch" => 400,
    InvalidEvent = "invalid_event" => 400,
    InvalidBase64 = "invalid_base64" => 400,
    TooManyHeaders = "too_many_headers" => 400,
    PartitionOutOfRange = "partition_out_of_range" => 400,
    InvalidCloudevent = "invalid_cloudevent" => 400,
    InvalidIdempotencyKey = "invalid_idempotency_key" => 400,
    TooManyPartitions = "too_many_partitions" => 400,
    InvalidPath = "invalid_path" => 400,
    InvalidQuery = "invalid_query" => 400,
    InvalidPartition = "invalid_partition" => 400,
    InvalidOffset = "invalid_offset" => 400,
    InvalidLimit = "invalid_limit" => 400,
    InvalidMaxBytes = "invalid_max_bytes" => 400,
    InvalidWait = "invalid_wait" => 400,
    InvalidTimestamp = "invalid_timestamp" => 400,
    InvalidTopics = "invalid_topics" => 400,
    InvalidSessionTimeout = "invalid_session_timeout" => 400,
    InvalidMaxEvents = "invalid_max_events" => 400,
    NoCommittedOffset = "no_committed_offset" => 400,
    TooManyOffsets = "too_many_offsets" => 400,
    DuplicateOffset = "duplicate_offset" => 400,
    DuplicatePosition = "duplicate_position" => 400,
    InvalidSeek = "invalid_seek" => 400,
    InvalidStart = "invalid_start" => 400,
    InvalidVisibilityTimeout = "invalid_visibility_timeout" => 400,
    InvalidMaxReceiveCount = "invalid_max_receive_count" => 400,
    InvalidDelay = "invalid_delay" => 400,
    InvalidBackoff = "invalid_backoff" => 400,
    InvalidMaxMessages = "invalid_max_messages" => 400,
    TooManyReceipts = "too_many_receipts" => 400,
    InvalidDeadLetterId = "invalid_dead_letter_id" => 400,
    InvalidFilter = "invalid_filter" => 400,
    InvalidPush = "invalid_push" => 400,
    TopicNotFound = "topic_not_found" => 404,
    PartitionNotFound = "partition_not_found" => 404,
    GroupNotFound = "group_not_found" => 404,
    SubscriptionNotFound = "subscription_not_found" => 404,
    DeadLetterNotFound = "dead_letter_not_found" => 404,
    NotFound = "not_found" => 404,
    MethodNotAllowed = "method_not_allowed" => 405,
    TopicExists = "topic_exists" => 409,
    IdempotencyKeyReused = "idempotency_key_reused" => 409,
    UnknownMember = "unknown_member" => 409,
    StaleGeneration = "stale_generation" => 409,
    NotAssigned = "not_assigned" => 409,
    GroupNotEmpty = "group_not_empty" => 409,
    SubscriptionExists = "subscription_exists" => 409,
    PushSubscription = "push_subscription" => 409,
    RequestTooLarge = "request_too_large" => 413,
    TooManyEvents = "too_many_events" => 413,
    ValueTooLarge = "value_too_large" => 413,
    UnsupportedMediaType = "unsupported_media_type" => 415,
    OffsetOutOfRange = "offset_out_of_range" => 416,
    Throttled = "throttled" => 429,
    Internal = "internal" => 500,
    Unavailable = "unavailable" => 503,
    InvalidReceipt = "invalid_receipt" => 200,
    StaleReceipt = "stale_receipt" => 200,
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
