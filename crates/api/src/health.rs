//! `GET /healthz` (the process answers) and `GET /readyz` (the store answers a read): what a
//! load balancer, a container runtime or a person checks before sending work.

use axum::extract::State;
use axum::Json;
use sluice_core::Log;

use crate::openapi::{answers, errors};
use crate::ApiError;

/// Liveness: the process answers HTTP. Reads nothing, so a slow store never fails it.
#[utoipa::path(get, path = "/healthz", tag = "meta", operation_id = "healthz",
    responses((status = 200, description = "The process answers", body = answers::Health,
        example = json!({"status": "ok"}))))]
pub async fn healthz() -> Json<answers::Health> {
    Json(answers::Health { status: "ok".into() })
}

/// Readiness: the store answers a read; else the store's error (`503 unavailable`, …).
#[utoipa::path(get, path = "/readyz", tag = "meta", operation_id = "readyz",
    responses((status = 200, description = "The store answers a read", body = answers::Health,
        example = json!({"status": "ready"})), errors::Ready))]
pub async fn readyz(State(log): State<Log>) -> Result<Json<answers::Health>, ApiError> {
    log.ready().await?;
    Ok(Json(answers::Health { status: "ready".into() }))
}
