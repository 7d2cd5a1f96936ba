//! `GET /v1/search`: semantic search over the tenant's documents.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::Shared;
use crate::AppState;
use crate::auth::Tenant;
use crate::error::ApiError;

/// Query of `GET /v1/search`.
#[derive(Debug, Deserialize)]
pub(super) struct SearchQuery {
    q: Option<String>,
    k: Option<usize>,
}

/// Longest query accepted, characters (the model reads at most 256 tokens of it anyway).
const MAX_QUERY_CHARS: usize = 2_000;
/// Most results a search returns.
const MAX_RESULTS: usize = 100;

/// The query embedder, loaded on first use.
async fn search_model(state: &AppState) -> Result<Arc<docflow_embed::Embedder>, ApiError> {
    state
        .search_model
        .get_or_try_init(|| async {
            let dir = state.embed_model_dir.clone();
            let loaded =
                tokio::task::spawn_blocking(move || docflow_embed::Embedder::load(&dir, "cpu"))
                    .await
                    .map_err(|e| ApiError::Internal(format!("loading the embedding model: {e}")))?;
            loaded.map(Arc::new).map_err(|e| ApiError::Unavailable {
                dependency: "embedding model",
                source: Box::new(e),
            })
        })
        .await
        .cloned()
}

/// Semantic search over the tenant's documents: the `k` page chunks (from the
/// ocr-embeddings stage) closest in meaning to `q`, best first.
pub(super) async fn search(
    State(state): Shared,
    query: Result<Query<SearchQuery>, QueryRejection>,
    Tenant(tenant): Tenant,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let q = query.q.unwrap_or_default();
    let q = q.trim().to_owned();
    if q.is_empty() {
        return Err(ApiError::BadRequest(
            "`q` (the query text) is required".into(),
        ));
    }
    if q.chars().count() > MAX_QUERY_CHARS {
        return Err(ApiError::BadRequest(format!(
            "`q` is longer than {MAX_QUERY_CHARS} characters"
        )));
    }
    let k = query.k.unwrap_or(10);
    if !(1..=MAX_RESULTS).contains(&k) {
        return Err(ApiError::BadRequest(format!(
            "`k` must be 1 to {MAX_RESULTS}"
        )));
    }
    let model = search_model(&state).await?;
    let text = q.clone();
    let vector = tokio::task::spawn_blocking(move || model.embed(&[text.as_str()]))
        .await
        .map_err(|e| ApiError::Internal(format!("embedding the query: {e}")))?
        .map_err(|e| ApiError::Internal(format!("embedding the query: {e}")))?
        .pop()
        .unwrap_or_default();
    let hits = state.search.search(&tenant, &vector, k).await?;
    let results: Vec<Value> = hits
        .into_iter()
        .map(|h| {
            json!({
                "document_id": h.document_id,
                "job_url": format!("/v1/jobs/{}", h.document_id),
                "page": h.page,
                "score": h.score,
                "text": h.text,
            })
        })
        .collect();
    Ok((
        StatusCode::OK,
        axum::Json(json!({"query": q, "k": k, "results": results})),
    )
        .into_response())
}
