//! Sluice's HTTP API (v1): one axum [`Router`] that `serve` runs on a socket and
//! the Lambda functions run under `lambda_http`, so a route behaves the same
//! everywhere. Handlers are thin: parse, call the [`Log`] (or the groups and queues
//! on it), render.

mod backend;
mod cloudevents;
pub mod config;
mod error;
mod groups;
mod path;
mod publish;
mod queues;
mod read;
mod topics;

use std::sync::Arc;

use axum::routing::{delete, get, post, put};
use axum::Router;
pub use backend::{janitor, open_backend, BackendChoice, IncompleteAwsConfig, OpenError};
pub use config::Config;
pub use error::ApiError;
use sluice_core::{Clock, Log, SystemClock};

/// Opens the embedded backend under `config.data_dir` and starts the log on it.
pub fn open_embedded(config: &Config) -> Result<Log, sluice_core::StorageError> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let (store, objects) = sluice_local::open(&config.data_dir, clock.clone())?;
    Ok(Log::new(store, objects, clock, config.log_config(false)))
}

/// Publishing: `POST /v1/topics/{topic}/events`.
pub fn publish_router(log: Log) -> Router {
    finish(publish_routes(), log)
}

fn publish_routes() -> Router<Log> {
    Router::new().route("/v1/topics/{topic}/events", post(publish::publish))
}

/// Reading: replay and offset lookup.
pub fn read_router(log: Log) -> Router {
    finish(read_routes(), log)
}

fn read_routes() -> Router<Log> {
    Router::new()
        .route("/v1/topics/{topic}/partitions/{partition}/events", get(read::events))
        .route("/v1/topics/{topic}/partitions/{partition}/offsets", get(read::offsets))
}

/// Topic administration: create, list, describe, delete.
pub fn admin_router(log: Log) -> Router {
    finish(admin_routes(), log)
}

fn admin_routes() -> Router<Log> {
    Router::new()
        .route("/v1/topics", get(topics::list))
        .route("/v1/topics/{topic}", put(topics::create).get(topics::describe).delete(topics::delete))
}

/// Consumer groups: poll, commit, leave, seek, list, describe, delete.
pub fn groups_router(log: Log) -> Router {
    finish(groups_routes(), log)
}

fn groups_routes() -> Router<Log> {
    Router::new()
        .route("/v1/groups", get(groups::list))
        .route("/v1/groups/{group}", get(groups::describe).delete(groups::delete))
        .route("/v1/groups/{group}/poll", post(groups::poll))
        .route("/v1/groups/{group}/commit", post(groups::commit))
        .route("/v1/groups/{group}/leave", post(groups::leave))
        .route("/v1/groups/{group}/seek", post(groups::seek))
}

/// Work queues: subscriptions of a topic, receive, ack, nack, visibility, dead letters.
pub fn queues_router(log: Log) -> Router {
    finish(queues_routes(), log)
}

fn queues_routes() -> Router<Log> {
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
pub fn router(log: Log) -> Router {
    let routes = publish_routes().merge(read_routes()).merge(admin_routes()).merge(groups_routes());
    finish(routes.merge(queues_routes()), log)
}

/// JSON answers for unknown routes and methods, and the body limit left to the handlers
/// (they refuse oversize bodies with a JSON 413 of their own).
fn finish(routes: Router<Log>, log: Log) -> Router {
    routes
        .fallback(|| async { ApiError::new(axum::http::StatusCode::NOT_FOUND, "not_found", "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(axum::http::StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "method not allowed here")
        })
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(log)
}
