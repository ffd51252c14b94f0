//! What the derives cannot say in the server's OpenAPI document: that the answers' schemas
//! are closed, and a name's pattern.

use std::borrow::Cow;

use utoipa::ToSchema;

pub use crate::name::Name;

use crate::groups::{
    GroupDescription, GroupEvent, GroupList, GroupPartition, Member, Moved, Polled, Sought, TopicPartition,
};
use crate::queues::{
    Backlog, DeadLetter, DeadLetters, Deliveries, Exponential, Message, PartitionBacklog, Peeked, PeekedMessage,
    Purged, Push, ReceiptError, ReceiptResult, Received, Record, Redriven, Settled, Subscription,
    SubscriptionDescription, SubscriptionList,
};
use crate::read::{Event, ReadPage};
use crate::topics::{Health, PartitionState, Position, Published, Topic, TopicDescription, TopicList, Upkeep};

/// The answers' object schemas, which the document closes (`additionalProperties: false`):
/// an answer that gains a field the document lacks then fails the replay of the document's
/// examples (crates/api/tests/openapi.rs) and schemathesis' response checks. The types do not
/// deny unknown fields themselves (serde's `deny_unknown_fields`, from which utoipa would
/// close them): the client reads answers with them, and ignores a field a newer server adds.
pub fn closed_schemas() -> Vec<Cow<'static, str>> {
    vec![
        Topic::name(),
        Health::name(),
        TopicList::name(),
        TopicDescription::name(),
        PartitionState::name(),
        Upkeep::name(),
        Position::name(),
        Published::name(),
        Event::name(),
        ReadPage::name(),
        TopicPartition::name(),
        GroupEvent::name(),
        Polled::name(),
        Moved::name(),
        Sought::name(),
        GroupList::name(),
        GroupDescription::name(),
        Member::name(),
        GroupPartition::name(),
        Subscription::name(),
        Push::name(),
        Deliveries::name(),
        SubscriptionList::name(),
        SubscriptionDescription::name(),
        Backlog::name(),
        PartitionBacklog::name(),
        Message::name(),
        Received::name(),
        Peeked::name(),
        PeekedMessage::name(),
        Settled::name(),
        ReceiptResult::name(),
        ReceiptError::name(),
        DeadLetters::name(),
        DeadLetter::name(),
        Record::name(),
        Redriven::name(),
        Purged::name(),
        Exponential::name(),
    ]
}
