//! `GET /v1/jobs/{id}` and `GET /v1/documents/{id}/thumbnail`: a tenant's own jobs. What
//! they show is `crate::jobs`'s, shared with the admin API.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::Shared;
use crate::auth::{Tenant, tenant};
use crate::error::ApiError;
use crate::jobs::{job_json, thumbnail_of};

// The tenant is read in the body, not by the `Tenant` extractor: the job id goes on the
// request's span first, a refused request's too.
pub(super) async fn job(
    State(state): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    tracing::Span::current().record("docflow.job_id", id.as_str());
    let tenant = tenant(&state, &headers).await?;
    let body = job_json(&state, &tenant, &id).await?;
    Ok((StatusCode::OK, axum::Json(body)).into_response())
}

/// The first-page thumbnail (PNG) of the newest thumbnails run; `304` when the client's
/// `If-None-Match` already names it.
pub(super) async fn thumbnail(
    State(state): Shared,
    Path(id): Path<String>,
    Tenant(tenant): Tenant,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    thumbnail_of(&state, &tenant, &id, &headers).await
}
