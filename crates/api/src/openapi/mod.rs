//! The OpenAPI 3.1 document of the v1 API, built from the code: each handler carries its
//! operation (`#[utoipa::path]`), the routers are built with `utoipa_axum`'s `routes!` from
//! the same handlers, so a route cannot be missing from the document. Request schemas are
//! derived from the types the handlers parse; the answers, which the handlers render by
//! hand, are described by sluice-wire's types ([`answers`]; a test replays the examples and
//! checks the answers against them); the error codes of each operation are listed in
//! [`errors`].

pub(crate) mod errors;
pub(crate) mod examples;
pub(crate) mod params;

/// The answers' shapes, which the client reads too.
pub(crate) use sluice_wire as answers;

use std::collections::BTreeMap;
use std::sync::LazyLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sluice_core::Code;
use utoipa::openapi::content::ContentBuilder;
use utoipa::openapi::example::ExampleBuilder;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Type};
use utoipa::openapi::tag::TagBuilder;
use utoipa::openapi::{ComponentsBuilder, InfoBuilder, LicenseBuilder, OpenApi, OpenApiBuilder, RefOr, Schema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;

/// Codes every operation may answer: storage throttling and faults.
const ALWAYS: &[Code] = &[Code::Throttled, Code::Internal, Code::Unavailable];

/// The groups operations are listed under, in the order of docs/API.md.
const TAGS: &[(&str, &str)] = &[
    ("topics", "Create, list, describe and delete topics"),
    ("publish", "Publish events: a JSON batch, or CloudEvents 1.0"),
    ("read", "Replay a partition, and find offsets"),
    ("groups", "Consumer groups: partitions shared among members, committed offsets"),
    ("queues", "Work queues: subscriptions of a topic, receive and settle messages, dead letters"),
    ("meta", "This document, and the server's liveness and readiness"),
];

/// The document's head: what the API is, its licence and tags; the paths come from the routers.
pub(crate) fn base() -> OpenApi {
    let info = InfoBuilder::new()
        .title("Sluice HTTP API")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(
            "Serverless event router: one HTTP publish, a replayable log and work queues. \
             The contract in prose, with what Sluice promises about stored events: docs/API.md.",
        ))
        .license(Some(LicenseBuilder::new().name("Apache-2.0").identifier(Some("Apache-2.0")).build()))
        .build();
    let tags = TAGS.iter().map(|(name, about)| TagBuilder::new().name(*name).description(Some(*about)).build());
    // What parameters refer to: `routes!` collects the schemas of bodies and answers only.
    let components = ComponentsBuilder::new()
        .schema_from::<params::Name>()
        .schema_from::<params::ReadFrom>()
        .schema_from::<params::FindBy>()
        .schema_from::<params::End>();
    OpenApiBuilder::new().info(info).tags(Some(tags.collect::<Vec<_>>())).components(Some(components.build())).build()
}

/// `GET /openapi.json`, in every router that serves topic administration.
pub(crate) fn routes() -> OpenApiRouter<App> {
    OpenApiRouter::new().routes(routes!(document))
}

/// The document, rendered once.
static DOCUMENT: LazyLock<String> = LazyLock::new(crate::openapi_json);

/// This document: the OpenAPI 3.1 description of every route.
#[utoipa::path(get, path = "/openapi.json", tag = "meta", operation_id = "openapi",
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json",
        body = Object)))]
async fn document() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT.as_str()).into_response()
}

/// The document as pretty JSON, ending with a newline.
pub(crate) fn json(mut doc: OpenApi) -> String {
    optional_bodies(&mut doc);
    close_answers(&mut doc);
    // Serializing maps of strings and numbers does not fail; were it to, the text says so.
    let mut text = doc.to_pretty_json().unwrap_or_else(|e| json!({ "error": e.to_string() }).to_string());
    text.push('\n');
    text
}

/// A body that may be left out (an empty body means all defaults) is a request body that is
/// not `required`; utoipa also makes its schema nullable, which would claim a JSON `null` is
/// accepted (it is refused). This keeps the schema of the body as sent.
fn optional_bodies(doc: &mut OpenApi) {
    let operations = doc.paths.paths.values_mut().flat_map(|item| {
        [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch].into_iter().flatten()
    });
    for body in operations.filter_map(|op| op.request_body.as_mut()) {
        if body.required == Some(utoipa::openapi::Required::True) {
            continue;
        }
        for content in body.content.values_mut() {
            if let Some(RefOr::T(Schema::OneOf(one_of))) = &content.schema {
                let not_null: Vec<_> = one_of.items.iter().filter(|s| !is_null(s)).cloned().collect();
                if let [only] = &not_null[..] {
                    content.schema = Some(only.clone());
                }
            }
        }
    }
}

/// The answers' schemas admit no property they do not list (see
/// [`sluice_wire::openapi::closed_schemas`]).
fn close_answers(doc: &mut OpenApi) {
    let Some(components) = doc.components.as_mut() else { return };
    for name in sluice_wire::openapi::closed_schemas() {
        if let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(name.as_ref()) {
            object.additional_properties = Some(Box::new(AdditionalProperties::FreeForm(false)));
        }
    }
}

fn is_null(schema: &RefOr<Schema>) -> bool {
    use utoipa::openapi::schema::SchemaType;
    matches!(schema, RefOr::T(Schema::Object(o)) if o.schema_type == SchemaType::Type(Type::Null))
}

/// What an error status means, for its response's description.
fn meaning(status: u16) -> &'static str {
    match status {
        400 => "Refused: the body, a parameter or a setting is invalid; nothing changed",
        404 => "Not found: the topic, partition, group, subscription or dead letter does not exist",
        409 => "Conflict with the current state; nothing changed",
        413 => "Over a size limit",
        415 => "Not JSON nor CloudEvents",
        416 => "Offset out of range: the error names the readable range",
        429 => "Storage is throttling: retry later",
        500 => "A fault (stored data failed its checks); details are logged, not answered",
        503 => "Storage unavailable: retry later",
        _ => "An error",
    }
}

/// The answers of an operation that fails with one of `codes` (and [`ALWAYS`]): one per status,
/// whose body is `{"error": {"code", "message"}}` with the code one of that status's, and an
/// example of each code.
pub(crate) fn error_responses(codes: &[Code]) -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
    let mut by_status: BTreeMap<u16, Vec<Code>> = BTreeMap::new();
    for &code in codes.iter().chain(ALWAYS) {
        let listed = by_status.entry(code.status()).or_default();
        if !listed.contains(&code) {
            listed.push(code);
        }
    }
    by_status
        .into_iter()
        .map(|(status, codes)| {
            let examples = codes.iter().map(|code| (code.as_str(), ExampleBuilder::new().value(Some(example(*code)))));
            let content = ContentBuilder::new().schema(Some(error_schema(status, &codes))).examples_from_iter(examples);
            let mut response =
                ResponseBuilder::new().description(meaning(status)).content("application/json", content.build());
            if matches!(status, 429 | 503) {
                let after = HeaderBuilder::new().schema(ObjectBuilder::new().schema_type(Type::Integer));
                response = response.header("Retry-After", after.description(Some("Seconds to wait: 1")).build());
            }
            (status.to_string(), RefOr::T(response.build()))
        })
        .collect()
}

/// An error answer with `code`, as the server renders it.
fn example(code: Code) -> serde_json::Value {
    let mut error = json!({ "code": code.as_str(), "message": format!("what went wrong ({code})") });
    if code == Code::OffsetOutOfRange {
        error["log_start_offset"] = json!(0);
        error["high_watermark"] = json!(42);
    }
    json!({ "error": error })
}

/// `{"error": {"code": one of codes, "message": …}}` (and, with 416, the readable range).
fn error_schema(status: u16, codes: &[Code]) -> Schema {
    let text = || ObjectBuilder::new().schema_type(Type::String);
    let count = || ObjectBuilder::new().schema_type(Type::Integer).minimum(Some(0));
    let mut error = ObjectBuilder::new()
        .property("code", text().enum_values(Some(codes.iter().map(|c| c.as_str()))))
        .required("code")
        .property("message", text().description(Some("For a person to read; may change")))
        .required("message")
        .additional_properties(Some(AdditionalProperties::FreeForm(false)));
    if status == 416 {
        error = error
            .property("log_start_offset", count())
            .required("log_start_offset")
            .property("high_watermark", count())
            .required("high_watermark");
    }
    let error = error.build();
    ObjectBuilder::new()
        .property("error", error)
        .required("error")
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        .into()
}
