//! The OpenAPI document: docs/openapi.json is the one the code builds, `GET /openapi.json`
//! serves it, every example passes its schema, and the request examples, replayed in story
//! order against a fresh router, get the documented status and answers that pass the
//! documented schemas.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tower::ServiceExt;

/// What regenerates docs/openapi.json.
const REGENERATE: &str = "cargo run -p sluice-api --example openapi > docs/openapi.json";

/// Every operation, in the order the examples tell their story, with the status each answers.
const STORY: &[(&str, u16)] = &[
    ("healthz", 200),
    ("readyz", 200),
    ("createTopic", 201),
    ("listTopics", 200),
    ("describeTopic", 200),
    ("publish", 200),
    ("readEvents", 200),
    ("findOffset", 200),
    ("createSubscription", 201),
    ("listSubscriptions", 200),
    ("describeSubscription", 200),
    ("pauseSubscription", 200),
    ("resumeSubscription", 200),
    ("patchSubscription", 200),
    ("peek", 200),
    ("receive", 200),
    ("changeVisibility", 200),
    ("nack", 200),
    ("ack", 200),
    ("listDeadLetters", 200),
    ("deleteDeadLetter", 204),
    ("redrive", 200),
    ("purgeDeadLetters", 200),
    ("seekSubscription", 200),
    ("purgeSubscription", 200),
    // The story's subscription pulls: it has no secret to rotate.
    ("rotateSecret", 400),
    ("deleteSubscription", 204),
    ("poll", 200),
    ("commit", 204),
    ("seek", 200),
    ("leave", 204),
    ("describeGroup", 200),
    ("listGroups", 200),
    ("deleteGroup", 204),
    ("openapi", 200),
    ("deleteTopic", 204),
];

fn document() -> Value {
    serde_json::from_str(&sluice_api::openapi_json()).expect("the document is JSON")
}

/// The full router on a fresh embedded backend (the directory lives as long as the router).
fn app() -> (Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let clock: Arc<dyn sluice_core::Clock> = Arc::new(sluice_core::SystemClock);
    let (store, objects) = sluice_local::open(dir.path(), clock.clone()).unwrap();
    let log = sluice_core::Log::new(store, objects, clock, sluice_core::LogConfig::default());
    (sluice_api::router(log), dir)
}

/// Every operation of the document: its id, method, path template and description.
fn operations(doc: &Value) -> BTreeMap<String, (Method, String, Value)> {
    let mut out = BTreeMap::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("a path item") {
            let id = op["operationId"].as_str().expect("every operation has an id").to_owned();
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("a method");
            assert!(out.insert(id.clone(), (method, path.clone(), op.clone())).is_none(), "two operations {id}");
        }
    }
    out
}

/// Checks `instance` against one of the document's schemas (its `$ref`s resolve in the document).
fn check(doc: &Value, schema: &Value, instance: &Value) -> Result<(), String> {
    let mut root = schema.clone();
    root["components"] = doc["components"].clone();
    let validator = jsonschema::draft202012::new(&root).map_err(|e| format!("bad schema {schema}: {e}"))?;
    let errors: Vec<String> =
        validator.iter_errors(instance).map(|e| format!("{e} (at {})", e.instance_path())).collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("{instance}\ndoes not pass {schema}:\n{}", errors.join("\n")))
    }
}

#[test]
fn docs_openapi_json_is_the_document_the_code_builds() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == sluice_api::openapi_json(),
        "docs/openapi.json is not current: regenerate it with `{REGENERATE}`"
    );
}

#[test]
fn the_document_is_openapi_3_1_with_every_operation_in_the_story() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    let ids: Vec<String> = operations(&doc).into_keys().collect();
    let mut story: Vec<String> = STORY.iter().map(|(id, _)| (*id).to_owned()).collect();
    story.sort_unstable();
    assert_eq!(ids, story, "every operation once in STORY (the examples' replay below)");
}

/// Every `$ref` in `value`.
fn refs<'v>(value: &'v Value, out: &mut Vec<&'v str>) {
    match value {
        Value::Object(map) => {
            out.extend(map.get("$ref").and_then(Value::as_str));
            map.values().for_each(|v| refs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[test]
fn every_reference_resolves() {
    let doc = document();
    let mut found = Vec::new();
    refs(&doc, &mut found);
    assert!(found.len() > 50, "{} references", found.len());
    for reference in found {
        let pointer = reference.strip_prefix('#').unwrap_or_else(|| panic!("{reference} is not in the document"));
        assert!(doc.pointer(pointer).is_some(), "{reference} is not in the document");
    }
}

#[test]
fn every_example_passes_its_schema() {
    let doc = document();
    let mut checked = 0;
    for (id, (_, _, op)) in operations(&doc) {
        let bodies = op["requestBody"]["content"].as_object().into_iter().flatten().map(|c| ("request", c));
        let responses =
            op["responses"].as_object().expect("responses").iter().flat_map(|(status, r)| {
                r["content"].as_object().into_iter().flatten().map(move |c| (status.as_str(), c))
            });
        for (what, (media, content)) in bodies.chain(responses) {
            let named = content["examples"].as_object().into_iter().flatten().map(|(_, e)| &e["value"]);
            for example in content.get("example").into_iter().chain(named) {
                let result = check(&doc, &content["schema"], example);
                assert!(result.is_ok(), "{id} {what} {media}: {}", result.unwrap_err());
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "only {checked} examples");
}

#[test]
fn every_error_answer_lists_codes_of_its_status() {
    let doc = document();
    for (id, (_, _, op)) in operations(&doc) {
        for (status, response) in op["responses"].as_object().unwrap() {
            let Ok(status) = status.parse::<u16>() else { continue };
            if status < 400 {
                continue;
            }
            let codes = &response["content"]["application/json"]["schema"]["properties"]["error"]["properties"]["code"];
            let codes = codes["enum"].as_array().unwrap_or_else(|| panic!("{id} {status}: no codes"));
            assert!(!codes.is_empty(), "{id} {status}");
            for code in codes {
                let code = code.as_str().unwrap();
                let known = sluice_core::Code::ALL.iter().find(|c| c.as_str() == code);
                assert_eq!(known.map(|c| c.status()), Some(status), "{id}: {code} under {status}");
            }
        }
    }
}

async fn send(
    app: &Router,
    method: Method,
    uri: &str,
    media: Option<&str>,
    body: Option<&Value>,
) -> (StatusCode, Vec<u8>) {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(media) = media {
        request = request.header(header::CONTENT_TYPE, media);
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let response = app.clone().oneshot(request.body(body).unwrap()).await.unwrap();
    let status = response.status();
    (status, axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap().to_vec())
}

#[tokio::test]
async fn serve_and_the_admin_function_answer_the_document() {
    let (app, dir) = app();
    let (status, body) = send(&app, Method::GET, "/openapi.json", None, None).await;
    assert_eq!((status, String::from_utf8(body).unwrap()), (StatusCode::OK, sluice_api::openapi_json()));
    let clock: Arc<dyn sluice_core::Clock> = Arc::new(sluice_core::SystemClock);
    let (store, objects) = sluice_local::open(dir.path(), clock.clone()).unwrap();
    let log = sluice_core::Log::new(store, objects, clock, sluice_core::LogConfig::default());
    let (status, body) = send(&sluice_api::admin_router(log.clone()), Method::GET, "/openapi.json", None, None).await;
    assert_eq!((status, String::from_utf8(body).unwrap()), (StatusCode::OK, sluice_api::openapi_json()));
    let (status, body) = send(&sluice_api::publish_router(log), Method::GET, "/openapi.json", None, None).await;
    let error: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, &error["error"]["code"]), (StatusCode::NOT_FOUND, &json!("not_found")), "only where admin is");
}

/// The request an operation's examples make: its path with the path parameters' examples, and
/// the query parameters' examples.
fn uri_of(template: &str, op: &Value) -> String {
    let mut path = template.to_owned();
    let mut query = Vec::new();
    for param in op["parameters"].as_array().into_iter().flatten() {
        let (name, example) = (param["name"].as_str().unwrap(), &param["example"]);
        let value = example.as_str().map_or_else(|| example.to_string(), str::to_owned);
        match (param["in"].as_str(), example.is_null()) {
            (Some("path"), false) => path = path.replace(&format!("{{{name}}}"), &value),
            (Some("path"), true) => panic!("{template}: path parameter {name} has no example"),
            (Some("query"), false) => query.push(format!("{name}={value}")),
            _ => {}
        }
    }
    if query.is_empty() {
        path
    } else {
        format!("{path}?{}", query.join("&"))
    }
}

/// Receipts are the server's to make: the replay sends those of the latest answer that gave some.
fn receipts_in(answer: &Value) -> Vec<Value> {
    let listed = answer["messages"].as_array().or(answer["results"].as_array());
    listed.into_iter().flatten().filter_map(|m| m.get("receipt").cloned()).collect()
}

#[tokio::test]
async fn the_request_examples_replay_with_the_documented_answers() {
    let doc = document();
    let operations = operations(&doc);
    let (app, _dir) = app();
    let mut receipts: Vec<Value> = Vec::new();
    for &(id, expected) in STORY {
        let (method, template, op) = &operations[id];
        let uri = uri_of(template, op);
        let bodies: Vec<(Option<&str>, Option<Value>)> = match op["requestBody"]["content"].as_object() {
            None => vec![(None, None)],
            Some(content) => {
                content.iter().map(|(media, c)| (Some(media.as_str()), Some(c["example"].clone()))).collect()
            }
        };
        for (media, mut body) in bodies {
            let label = format!("{id} ({method} {uri} {})", media.unwrap_or_default());
            if let Some(example) = body.as_mut() {
                assert!(!example.is_null(), "{label}: a body without an example");
                if example.get("receipts").is_some() {
                    assert!(!receipts.is_empty(), "{label}: no receipts received yet");
                    example["receipts"] = Value::Array(receipts.clone());
                }
            }
            let (status, answer) = send(&app, method.clone(), &uri, media, body.as_ref()).await;
            let text = String::from_utf8_lossy(&answer);
            assert_eq!(status.as_u16(), expected, "{label}: {text}");
            let response = &op["responses"][expected.to_string()];
            assert!(response.is_object(), "{label}: {expected} is not documented");
            match response["content"].as_object().and_then(|c| c.get("application/json")) {
                None => assert!(answer.is_empty(), "{label}: an undocumented body {text}"),
                Some(content) => {
                    let answer: Value =
                        serde_json::from_slice(&answer).unwrap_or_else(|e| panic!("{label}: {e}: {text}"));
                    check(&doc, &content["schema"], &answer).unwrap_or_else(|e| panic!("{label}: {e}"));
                    let given = receipts_in(&answer);
                    if !given.is_empty() {
                        receipts = given;
                    }
                }
            }
        }
    }
}
