//! The schema of a name (a topic's, a group's, a subscription's), which the request types
//! name in their derives and the server's document uses for its path parameters.

use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

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
