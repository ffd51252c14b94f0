//! An HTTP client for the AWS adapters that breaks chosen requests on their way to moto, the
//! way AWS and a network break them, and records every request it sees:
//! - [`Fault::Refuse`]: a `500` before the request reaches the service (nothing applied);
//! - [`Fault::LoseAnswer`]: the request is applied, and its answer replaced by a `500`;
//! - [`Fault::NoListBucket`]: S3 as a caller without `s3:ListBucket` sees it: `403
//!   AccessDenied` for a GET of a missing key and for every listing;
//! - [`Fault::DenyGet`]: every S3 GET refused with `403 AccessDenied` (a real refusal).
//!
//! DynamoDB's `ClientRequestToken` is honoured here as AWS documents it and moto does not
//! (moto ignores the token): a `TransactWriteItems` carrying the token of one that was
//! applied is answered as that one was, and not sent on.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;

/// How a request is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Refuse,
    LoseAnswer,
    NoListBucket,
    DenyGet,
}

/// A request as it was sent: its operation (`"dynamodb:GetItem"`, `"s3:GetObject"`, …) and body.
#[derive(Debug, Clone)]
pub struct Seen {
    pub operation: String,
    pub body: String,
}

#[derive(Debug, Default)]
struct State {
    /// Faults still to inject: an operation, its fault, how many more times.
    rules: Vec<(String, Fault, usize)>,
    seen: Vec<Seen>,
    /// Tokens of transactions applied.
    applied: HashSet<String>,
}

/// The faults to inject and the requests seen, shared by every client built from it.
#[derive(Debug, Clone, Default)]
pub struct Faults(Arc<Mutex<State>>);

impl Faults {
    /// Breaks the next `times` requests of `operation` with `fault`.
    pub fn inject(&self, operation: &str, fault: Fault, times: usize) {
        self.state().rules.push((operation.to_owned(), fault, times));
    }

    /// Stops injecting anything.
    pub fn clear(&self) {
        self.state().rules.clear();
    }

    /// Every request sent so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state().seen.clone()
    }

    /// An HTTP client for the SDK that sends through `inner`, breaking requests as told.
    pub fn client(&self, inner: SharedHttpClient) -> SharedHttpClient {
        SharedHttpClient::new(FaultyClient { inner, faults: self.clone() })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a request and takes the fault it meets, if any.
    fn meet(&self, operation: &str, body: &str) -> Option<Fault> {
        let mut state = self.state();
        state.seen.push(Seen { operation: operation.to_owned(), body: body.to_owned() });
        let rule = state.rules.iter_mut().find(|(op, _, left)| op == operation && *left > 0)?;
        rule.2 -= 1;
        Some(rule.1)
    }
}

#[derive(Debug)]
struct FaultyClient {
    inner: SharedHttpClient,
    faults: Faults,
}

impl HttpClient for FaultyClient {
    fn http_connector(&self, settings: &HttpConnectorSettings, components: &RuntimeComponents) -> SharedHttpConnector {
        let inner = self.inner.http_connector(settings, components);
        SharedHttpConnector::new(FaultyConnector { inner, faults: self.faults.clone() })
    }
}

#[derive(Debug)]
struct FaultyConnector {
    inner: SharedHttpConnector,
    faults: Faults,
}

impl HttpConnector for FaultyConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let operation = operation(&request);
        let body = request.body().bytes().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
        let fault = self.faults.meet(&operation, &body);
        let token = client_request_token(&body);
        let (inner, faults) = (self.inner.clone(), self.faults.clone());
        HttpConnectorFuture::new(async move {
            if let Some(token) = &token {
                if faults.state().applied.contains(token) {
                    return Ok(answer(200, "{}"));
                }
            }
            if fault == Some(Fault::Refuse) {
                return Ok(internal_error(&operation));
            }
            if fault == Some(Fault::NoListBucket) && operation == "s3:ListObjectsV2" {
                return Ok(access_denied());
            }
            let response = inner.call(request).await?;
            if let (Some(token), 200) = (token, response.status().as_u16()) {
                faults.state().applied.insert(token);
            }
            Ok(match fault {
                Some(Fault::LoseAnswer) => internal_error(&operation),
                Some(Fault::NoListBucket) if response.status().as_u16() == 404 => access_denied(),
                Some(Fault::DenyGet) => access_denied(),
                _ => response,
            })
        })
    }
}

/// The operation a request is: DynamoDB names it in `X-Amz-Target`, S3 by method and query.
fn operation(request: &HttpRequest) -> String {
    if let Some(target) = request.headers().get("x-amz-target") {
        return format!("dynamodb:{}", target.rsplit('.').next().unwrap_or(target));
    }
    let name = match request.method() {
        "GET" if request.uri().contains("list-type=2") => "ListObjectsV2",
        "GET" => "GetObject",
        "PUT" => "PutObject",
        "DELETE" => "DeleteObject",
        other => other,
    };
    format!("s3:{name}")
}

/// The `ClientRequestToken` of a `TransactWriteItems` body, if it has one.
fn client_request_token(body: &str) -> Option<String> {
    let json: serde_json::Value = serde_json::from_str(body).ok()?;
    json.get("ClientRequestToken")?.as_str().map(str::to_owned)
}

fn answer(status: u16, body: &str) -> HttpResponse {
    let status = StatusCode::try_from(status).unwrap_or_else(|_| unreachable!("a valid status"));
    HttpResponse::new(status, SdkBody::from(body.to_owned()))
}

/// A `500` as the service sends it.
fn internal_error(operation: &str) -> HttpResponse {
    if operation.starts_with("dynamodb:") {
        let mut r =
            answer(500, r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"injected"}"#);
        r.headers_mut().insert("content-type", "application/x-amz-json-1.0");
        r
    } else {
        let mut r = answer(500, "<Error><Code>InternalError</Code><Message>injected</Message></Error>");
        r.headers_mut().insert("content-type", "application/xml");
        r
    }
}

fn access_denied() -> HttpResponse {
    let mut r = answer(403, "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>");
    r.headers_mut().insert("content-type", "application/xml");
    r
}
