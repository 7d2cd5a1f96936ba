//! The whole HTTP API: the tenant API ([`crate::api`]), the console and admin API
//! ([`crate::admin`]), the OpenAPI document, health, readiness and metrics, behind the
//! request metrics. The two APIs are siblings: neither imports the other.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::routing::get;

use crate::AppState;
use crate::api::OPENAPI;

/// Every route of ingest, with `state`.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .merge(crate::api::routes())
        .merge(crate::admin::routes())
        .route(
            "/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
        // Liveness: the process serves HTTP. Readiness: it can take an upload now.
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(crate::ready::readyz))
        .route(
            "/metrics",
            get(|State(s): State<Arc<AppState>>| async move { s.metrics.render() }),
        )
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::metrics::observe,
        ))
        // The size limit is enforced by `upload` with a JSON 413; lift axum's default.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state)
}
