//! Sluice's HTTP API (v1): one axum [`Router`] that `serve` runs on a socket and
//! the Lambda functions run under `lambda_http`, so a route behaves the same
//! everywhere. Handlers are thin: parse, call the [`Log`] (or the groups and queues
//! on it), render.

mod body;
mod cloudevents;
mod error;
mod groups;
mod health;
pub mod metrics;
mod openapi;
mod path;
mod peek;
mod publish;
mod queues;
mod read;
mod schedule;
mod topics;
mod trace;

use axum::extract::FromRef;
use axum::Router;
pub use error::ApiError;
use sluice_core::groups::{Groups, GroupsConfig};
use sluice_core::queues::Queues;
use sluice_core::{Code, Log};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// What the handlers work on, built once per process: the log, and the groups and
/// queues over it (each keeps its config and per-process state). Cheap to clone.
#[derive(Clone)]
pub struct App {
    pub log: Log,
    pub groups: Groups,
    pub queues: Queues,
}

impl App {
    pub fn new(log: Log, groups: GroupsConfig) -> Self {
        Self { groups: Groups::with_config(log.clone(), groups), queues: Queues::new(log.clone()), log }
    }
}

/// When a request's answer must be on its way, in milliseconds since the epoch on the
/// log's clock: what a Lambda function's runtime puts in the request's extensions (its
/// invocation's deadline, less time to answer). A request without one has no limit
/// (`serve`). Publishing honours it (a commit stops retrying in time: `503`, `Retry-After`);
/// a long poll (replay, receive, group poll) waits no later than it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline(pub i64);

impl Deadline {
    /// `wait_ms` shortened so that a wait starting at `now_ms` ends by `deadline` (none past
    /// it: `0`); without a deadline, or above the route's `max` (the core refuses it, as
    /// it would without a deadline), `wait_ms` as asked.
    pub fn cap_wait(deadline: Option<Deadline>, wait_ms: u64, max: u64, now_ms: i64) -> u64 {
        match deadline {
            Some(Deadline(at)) if wait_ms <= max => wait_ms.min(u64::try_from(at - now_ms).unwrap_or(0)),
            _ => wait_ms,
        }
    }
}

/// An app with the default groups config (tests and tools).
impl From<Log> for App {
    fn from(log: Log) -> Self {
        Self::new(log, GroupsConfig::default())
    }
}

impl FromRef<App> for Log {
    fn from_ref(app: &App) -> Log {
        app.log.clone()
    }
}

impl FromRef<App> for Groups {
    fn from_ref(app: &App) -> Groups {
        app.groups.clone()
    }
}

impl FromRef<App> for Queues {
    fn from_ref(app: &App) -> Queues {
        app.queues.clone()
    }
}

/// Publishing: `POST /v1/topics/{topic}/events`.
pub fn publish_router(app: impl Into<App>) -> Router {
    finish(publish_routes(), app.into())
}

fn publish_routes() -> OpenApiRouter<App> {
    OpenApiRouter::new().routes(routes!(publish::publish))
}

/// Reading: replay and offset lookup.
pub fn read_router(app: impl Into<App>) -> Router {
    finish(read_routes(), app.into())
}

fn read_routes() -> OpenApiRouter<App> {
    OpenApiRouter::new().routes(routes!(read::events)).routes(routes!(read::offsets))
}

/// Topic administration: create, list, describe, delete; and `GET /openapi.json`, the
/// document of every route.
pub fn admin_router(app: impl Into<App>) -> Router {
    finish(admin_routes().merge(openapi::routes()).merge(health_routes()), app.into())
}

fn admin_routes() -> OpenApiRouter<App> {
    OpenApiRouter::new().routes(routes!(topics::list)).routes(routes!(topics::create, topics::describe, topics::delete))
}

/// Consumer groups: poll, commit, leave, seek, list, describe, delete.
pub fn groups_router(app: impl Into<App>) -> Router {
    finish(groups_routes(), app.into())
}

fn groups_routes() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(groups::list))
        .routes(routes!(groups::describe, groups::delete))
        .routes(routes!(groups::poll))
        .routes(routes!(groups::commit))
        .routes(routes!(groups::leave))
        .routes(routes!(groups::seek))
}

/// Work queues: subscriptions of a topic, receive, peek, ack, nack, visibility, dead letters.
pub fn queues_router(app: impl Into<App>) -> Router {
    finish(queues_routes(), app.into())
}

fn queues_routes() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(queues::list))
        .routes(routes!(queues::create, queues::describe, queues::patch, queues::delete))
        .routes(routes!(queues::pause))
        .routes(routes!(queues::resume))
        .routes(routes!(queues::seek))
        .routes(routes!(queues::purge))
        .routes(routes!(queues::rotate_secret))
        .routes(routes!(queues::receive))
        .routes(routes!(peek::peek))
        .routes(routes!(queues::ack))
        .routes(routes!(queues::nack))
        .routes(routes!(queues::visibility))
        .routes(routes!(queues::dead_letters, queues::purge_dead_letters))
        .routes(routes!(queues::redrive))
        .routes(routes!(queues::delete_dead_letter))
}

/// Every v1 route, `GET /openapi.json`, `GET /healthz` and `GET /readyz`: what `serve` runs. Each Lambda function runs
/// the part it is for.
pub fn router(app: impl Into<App>) -> Router {
    finish(all_routes(), app.into())
}

/// Every route with its OpenAPI operation: the router and [`openapi_json`] are built from
/// this one list, so the document cannot leave a route out.
fn all_routes() -> OpenApiRouter<App> {
    let routes = OpenApiRouter::with_openapi(openapi::base()).merge(publish_routes()).merge(read_routes());
    let routes = routes.merge(admin_routes()).merge(groups_routes()).merge(queues_routes());
    routes.merge(openapi::routes()).merge(health_routes())
}

/// `GET /healthz` and `GET /readyz`, in [`router`] (what `serve` runs) and, on AWS, the admin function's.
fn health_routes() -> OpenApiRouter<App> {
    OpenApiRouter::new().routes(routes!(health::healthz)).routes(routes!(health::readyz))
}

/// The OpenAPI 3.1 document of every route of [`router`], as pretty JSON: what
/// `GET /openapi.json` answers and docs/openapi.json holds.
pub fn openapi_json() -> String {
    openapi::json(all_routes().into_openapi())
}

/// JSON answers for unknown routes and methods, and the body limit left to the handlers
/// (they refuse oversize bodies with a JSON 413 of their own).
fn finish(routes: OpenApiRouter<App>, app: App) -> Router {
    let (routes, _) = routes.split_for_parts();
    routes
        .fallback(|| async { ApiError::new(Code::NotFound, "no such route") })
        .method_not_allowed_fallback(|| async { ApiError::new(Code::MethodNotAllowed, "method not allowed here") })
        .layer(axum::extract::DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn(body::json_only))
        .layer(axum::middleware::from_fn(metrics::track))
        .with_state(app)
}
