//! The tenant API's routes and the OpenAPI document; `crate::routes` merges them with the
//! admin API's, health, readiness and metrics.

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use super::analytics::analytics;
use super::jobs::{job, thumbnail};
use super::search::search;
use super::upload::upload;
use crate::AppState;

/// The OpenAPI document of this API.
pub const OPENAPI: &str = include_str!("../../openapi.json");

/// The tenant API's routes.
pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/documents", post(upload))
        .route("/v1/jobs/{id}", get(job))
        .route("/v1/documents/{id}/thumbnail", get(thumbnail))
        .route("/v1/search", get(search))
        .route("/v1/analytics", get(analytics))
}
