//! What the derives cannot say in the server's OpenAPI document: that the answers' schemas
//! are closed, and a name's pattern.

use std::borrow::Cow;

use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::groups::{
    GroupDescription, GroupEvent, GroupList, GroupPartition, Member, Moved, Polled, Sought, TopicPartition,
};
use crate::queues::{
    Backlog, DeadLetter, DeadLetters, Deliveries, Exponential, Message, PartitionBacklog, Purged, Push, ReceiptError,
    ReceiptResult, Received, Record, Redriven, Settled, Subscription, SubscriptionDescription, SubscriptionList,
};
use crate::read::{Event, ReadPage};
use crate::topics::{PartitionState, Position, Published, Topic, TopicDescription, TopicList, Upkeep};

/// The answers' object schemas, which the document closes (`additionalProperties: false`):
/// an answer that gains a field the document lacks then fails the replay of the document's
/// examples (crates/api/tests/openapi.rs) and schemathesis' response checks. The types do not
/// deny unknown fields themselves (serde's `deny_unknown_fields`, from which utoipa would
/// close them): the client reads answers with them, and ignores a field a newer server adds.
pub fn closed_schemas() -> Vec<Cow<'static, str>> {
    vec![
        Topic::name(),
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

/// A name of a topic, group or subscription: `[A-Za-z0-9._-]{1,249}`, neither `.` nor `..`.
pub struct Name;

impl PartialSchema for Name {
    fn schema() -> RefOr<Schema> {
        // Three ways not to be `.` nor `..`: no leading dot, one dot then another character, two then anything.
        let pattern =
            r"^(?:[A-Za-z0-9_-][A-Za-z0-9._-]{0,248}|\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,247}|\.\.[A-Za-z0-9._-]{1,247})$";
        let description = "`[A-Za-z0-9._-]{1,249}`, neither `.` nor `..`";
        ObjectBuilder::new().schema_type(Type::String).pattern(Some(pattern)).description(Some(description)).into()
    }
}

impl ToSchema for Name {}
