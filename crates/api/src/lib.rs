//! Sluice's HTTP API (v1): one axum [`Router`] that `serve` runs on a socket and
//! the Lambda functions run under `lambda_http`, so a route behaves the same
//! everywhere. Handlers are thin: parse, call the [`Log`] (or the groups and queues
//! on it), render.

mod body;
mod cloudevents;
mod error;
mod groups;
mod path;
mod publish;
mod queues;
mod read;
mod topics;

use axum::extract::FromRef;
use axum::routing::{delete, get, post, put};
use axum::Router;
pub use error::ApiError;
use sluice_core::groups::{Groups, GroupsConfig};
use sluice_core::queues::Queues;
use sluice_core::{Code, Log};

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

fn publish_routes() -> Router<App> {
    Router::new().route("/v1/topics/{topic}/events", post(publish::publish))
}

/// Reading: replay and offset lookup.
pub fn read_router(app: impl Into<App>) -> Router {
    finish(read_routes(), app.into())
}

fn read_routes() -> Router<App> {
    Router::new()
        .route("/v1/topics/{topic}/partitions/{partition}/events", get(read::events))
        .route("/v1/topics/{topic}/partitions/{partition}/offsets", get(read::offsets))
}

/// Topic administration: create, list, describe, delete.
pub fn admin_router(app: impl Into<App>) -> Router {
    finish(admin_routes(), app.into())
}

fn admin_routes() -> Router<App> {
    Router::new()
        .route("/v1/topics", get(topics::list))
        .route("/v1/topics/{topic}", put(topics::create).get(topics::describe).delete(topics::delete))
}

/// Consumer groups: poll, commit, leave, seek, list, describe, delete.
pub fn groups_router(app: impl Into<App>) -> Router {
    finish(groups_routes(), app.into())
}

fn groups_routes() -> Router<App> {
    Router::new()
        .route("/v1/groups", get(groups::list))
        .route("/v1/groups/{group}", get(groups::describe).delete(groups::delete))
        .route("/v1/groups/{group}/poll", post(groups::poll))
        .route("/v1/groups/{group}/commit", post(groups::commit))
        .route("/v1/groups/{group}/leave", post(groups::leave))
        .route("/v1/groups/{group}/seek", post(groups::seek))
}

/// Work queues: subscriptions of a topic, receive, ack, nack, visibility, dead letters.
pub fn queues_router(app: impl Into<App>) -> Router {
    finish(queues_routes(), app.into())
}

fn queues_routes() -> Router<App> {
    Router::new()
        .route("/v1/topics/{topic}/subscriptions", get(queues::list))
        .route(
            "/v1/topics/{topic}/subscriptions/{sub}",
            put(queues::create).get(queues::describe).delete(queues::delete),
        )
        .route("/v1/topics/{topic}/subscriptions/{sub}/receive", post(queues::receive))
        .route("/v1/topics/{topic}/subscriptions/{sub}/ack", post(queues::ack))
        .route("/v1/topics/{topic}/subscriptions/{sub}/nack", post(queues::nack))
        .route("/v1/topics/{topic}/subscriptions/{sub}/visibility", post(queues::visibility))
        .route(
            "/v1/topics/{topic}/subscriptions/{sub}/dlq",
            get(queues::dead_letters).delete(queues::purge_dead_letters),
        )
        .route("/v1/topics/{topic}/subscriptions/{sub}/dlq/redrive", post(queues::redrive))
        .route("/v1/topics/{topic}/subscriptions/{sub}/dlq/{id}", delete(queues::delete_dead_letter))
}

/// Every v1 route: what `serve` runs. Each Lambda function runs the part it is for.
pub fn router(app: impl Into<App>) -> Router {
    let routes = publish_routes().merge(read_routes()).merge(admin_routes()).merge(groups_routes());
    finish(routes.merge(queues_routes()), app.into())
}

/// JSON answers for unknown routes and methods, and the body limit left to the handlers
/// (they refuse oversize bodies with a JSON 413 of their own).
fn finish(routes: Router<App>, app: App) -> Router {
    routes
        .fallback(|| async { ApiError::new(Code::NotFound, "no such route") })
        .method_not_allowed_fallback(|| async { ApiError::new(Code::MethodNotAllowed, "method not allowed here") })
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(app)
}
