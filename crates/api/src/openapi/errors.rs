//! The error codes each operation answers, in one place: each set is a type whose
//! `IntoResponses` lists them, one response per status (see [`super::error_responses`]),
//! named in the handler's `#[utoipa::path(responses(…))]`. Throttling and faults
//! (`throttled`, `internal`, `unavailable`) are added to every set.

use std::collections::BTreeMap;

use sluice_core::Code;
use utoipa::openapi::{RefOr, Response};

/// Declares one operation's error set.
macro_rules! errors {
    ($($(#[$doc:meta])* $name:ident: [$($group:ident),*] $($code:ident),* ;)*) => {
        $(
            $(#[$doc])*
            pub(crate) struct $name;

            impl utoipa::IntoResponses for $name {
                fn responses() -> BTreeMap<String, RefOr<Response>> {
                    let codes: &[&[Code]] = &[$($group,)* &[$(Code::$code),*]];
                    super::error_responses(&codes.concat())
                }
            }
        )*
    };
}

/// A path parameter that is not valid UTF-8 once decoded, or a name that breaks the rules.
const PATH: &[Code] = &[Code::InvalidPath, Code::InvalidName];
/// A JSON body that is malformed, of the wrong shape, unreadable or too large.
const BODY: &[Code] =
    &[Code::InvalidJson, Code::InvalidRequest, Code::UnreadableBody, Code::RequestTooLarge, Code::UnsupportedMediaType];
/// A query string that does not parse, or names a parameter the route does not take.
const QUERY: &[Code] = &[Code::InvalidQuery];
/// A subscription that is not there.
const SUB: &[Code] = &[Code::TopicNotFound, Code::SubscriptionNotFound];

errors! {
    /// `createTopic`.
    CreateTopic: [PATH, BODY] InvalidPartitions, InvalidRetention, TopicExists;
    /// `readyz`: only the store's faults.
    Ready: [];
    /// `listTopics`.
    ListTopics: [];
    /// `describeTopic` and `deleteTopic`.
    OneTopic: [PATH] TopicNotFound;
    /// `publish`.
    Publish: [PATH, BODY] EmptyBatch, InvalidEvent, InvalidBase64, TooManyHeaders, PartitionOutOfRange,
        InvalidCloudevent, InvalidIdempotencyKey, TooManyPartitions, TopicNotFound, IdempotencyKeyReused,
        TooManyEvents, ValueTooLarge;
    /// `readEvents`.
    ReadEvents: [PATH, QUERY] InvalidPartition, InvalidOffset, InvalidLimit, InvalidMaxBytes, InvalidWait,
        TopicNotFound, PartitionNotFound, OffsetOutOfRange;
    /// `findOffset`.
    FindOffset: [PATH, QUERY] InvalidPartition, InvalidTimestamp, TopicNotFound, PartitionNotFound;
    /// `poll`.
    Poll: [PATH, BODY] InvalidTopics, InvalidSessionTimeout, InvalidMaxEvents, InvalidMaxBytes, InvalidWait,
        NoCommittedOffset, DuplicatePosition, TooManyPartitions, TopicNotFound, UnknownMember, OffsetOutOfRange;
    /// `commit`.
    Commit: [PATH, BODY] TooManyOffsets, DuplicateOffset, GroupNotFound, TopicNotFound, UnknownMember, StaleGeneration,
        NotAssigned, OffsetOutOfRange;
    /// `leave`.
    Leave: [PATH, BODY] GroupNotFound, UnknownMember;
    /// `seek`.
    Seek: [PATH, BODY] InvalidSeek, GroupNotFound, TopicNotFound, PartitionNotFound;
    /// `listGroups`.
    ListGroups: [];
    /// `describeGroup`.
    DescribeGroup: [PATH] GroupNotFound;
    /// `deleteGroup`.
    DeleteGroup: [PATH] GroupNotFound, GroupNotEmpty;
    /// `createSubscription`.
    CreateSubscription: [PATH, BODY] InvalidStart, InvalidVisibilityTimeout, InvalidMaxReceiveCount,
        InvalidDelay, InvalidBackoff, InvalidFilter, InvalidPush, TopicNotFound, SubscriptionExists;
    /// `patchSubscription`.
    PatchSubscription: [PATH, BODY, SUB] InvalidStart, InvalidVisibilityTimeout, InvalidMaxReceiveCount,
        InvalidDelay, InvalidBackoff, InvalidFilter, InvalidPush;
    /// `listSubscriptions`.
    ListSubscriptions: [PATH] TopicNotFound;
    /// `describeSubscription`, `deleteSubscription`, `purgeDeadLetters`.
    OneSubscription: [PATH, SUB];
    /// `pauseSubscription`, `resumeSubscription`, `purgeSubscription` (a body, if any, is `{}`).
    ChangeState: [PATH, BODY, SUB];
    /// `seekSubscription`.
    SeekSubscription: [PATH, BODY, SUB] InvalidSeek;
    /// `rotateSecret` (`invalid_request` also for a subscription without a secret: a pull one, or a function's).
    RotateSecret: [PATH, BODY, SUB] InvalidPush;
    /// `receive`.
    Receive: [PATH, BODY, SUB] InvalidMaxMessages, InvalidWait, InvalidVisibilityTimeout, TooManyReceipts,
        PushSubscription;
    /// `peek`.
    Peek: [PATH, QUERY, SUB] InvalidLimit;
    /// `ack`.
    Ack: [PATH, BODY, SUB] TooManyReceipts;
    /// `nack`.
    Nack: [PATH, BODY, SUB] TooManyReceipts, InvalidDelay;
    /// `changeVisibility`.
    Visibility: [PATH, BODY, SUB] TooManyReceipts, InvalidVisibilityTimeout;
    /// `listDeadLetters`.
    ListDeadLetters: [PATH, QUERY, SUB] InvalidLimit, InvalidDeadLetterId, PartitionNotFound;
    /// `redrive`.
    Redrive: [PATH, BODY, SUB];
    /// `deleteDeadLetter`.
    DeleteDeadLetter: [PATH, SUB] InvalidDeadLetterId, DeadLetterNotFound, PartitionNotFound;
}
