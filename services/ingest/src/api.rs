//! Routes: `POST /v1/documents`, `GET /v1/jobs/{id}`, `GET /openapi.json`, `GET /healthz`.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use docflow_events::{DocUploaded, document_id, types::is_document_id};
use docflow_runtime::trace::{TRACEPARENT, TraceContext};
use object_store::{PutOptions, PutPayload};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use serde::Deserialize;
use serde_json::json;

use crate::AppState;
use crate::error::ApiError;
use crate::jobs::{Job, status};
use crate::sniff::{Kind, check_pdf, sniff};

type Shared = State<Arc<AppState>>;

/// The OpenAPI document of this API.
pub const OPENAPI: &str = include_str!("../openapi.json");

/// The API routes.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/documents", post(upload))
        .route("/v1/jobs/{id}", get(job))
        .route(
            "/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/metrics",
            get(|State(s): Shared| async move { s.metrics.render() }),
        )
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::metrics::observe,
        ))
        // The size limit is enforced by `upload` with a JSON 413; lift axum's default.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn tenant(state: &AppState, headers: &HeaderMap) -> Result<String, ApiError> {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or(ApiError::Unauthorized)?;
    state
        .tokens
        .get(token)
        .cloned()
        .ok_or(ApiError::Unauthorized)
}

#[derive(Debug, Default, Deserialize)]
struct UploadQuery {
    #[serde(default)]
    reprocess: bool,
    filename: Option<String>,
}

fn accepted(id: &str, status: &str, duplicate: bool) -> Response {
    (
        StatusCode::ACCEPTED,
        [(header::LOCATION, format!("/v1/jobs/{id}"))],
        axum::Json(json!({
            "job_id": id,
            "status_url": format!("/v1/jobs/{id}"),
            "status": status,
            "duplicate": duplicate,
        })),
    )
        .into_response()
}

async fn upload(
    State(state): Shared,
    Query(q): Query<UploadQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let tenant = tenant(&state, &headers)?;
    let limit = state.max_upload_bytes;
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > limit
    {
        return Err(ApiError::TooLarge { limit });
    }
    let bytes = axum::body::to_bytes(body, usize::try_from(limit).unwrap_or(usize::MAX))
        .await
        .map_err(|_| ApiError::TooLarge { limit })?;
    if bytes.is_empty() {
        return Err(ApiError::BadRequest(
            "empty body: send the document bytes".into(),
        ));
    }
    let kind = sniff(&bytes).ok_or(ApiError::UnsupportedType)?;
    if kind == Kind::Pdf {
        check_pdf(&bytes, state.max_pages)?;
    }
    let file_name = q.filename.map(|f| {
        f.chars()
            .filter(|c| !c.is_control())
            .take(255)
            .collect::<String>()
    });
    let id = document_id(&bytes);

    if let Some(existing) = state.jobs.get(&tenant, &id).await?
        && existing.status == status::ACCEPTED
        && !q.reprocess
    {
        state.jobs.record_upload(&existing).await?;
        tracing::info!(%tenant, job = %id, "duplicate upload; no new work");
        return Ok(accepted(&id, &existing.status, true));
    }

    // 1. The bytes, under a key the server makes (tenant from the token, id from the bytes).
    let key = object_store::path::Path::from(format!("{tenant}/{id}"));
    let size = bytes.len();
    state
        .blobs
        .put_opts(&key, PutPayload::from(bytes), PutOptions::default())
        .await
        .map_err(|e| ApiError::Unavailable(format!("object store: {e}")))?;
    let object_uri = format!("file://{}/{tenant}/{id}", state.object_root.display());

    // 2. The record, before the event: a stored blob always has one.
    let job = Job {
        job_id: id.clone(),
        tenant_id: tenant.clone(),
        status: status::STORED.into(),
        object_uri: object_uri.clone(),
        content_type: kind.mime().into(),
        size_bytes: i64::try_from(size).unwrap_or(i64::MAX),
        file_name: file_name.clone(),
        uploads: 1,
        created_at_ms: now_ms(),
        produced_at_ms: None,
    };
    state.jobs.record_upload(&job).await?;

    // 3. The event; the answer waits for the broker's ack.
    match produce(&state, &job).await {
        Ok(()) => {
            state
                .jobs
                .set_status(&tenant, &id, status::ACCEPTED, Some(now_ms()))
                .await?;
            state.metrics.upload_bytes.inc_by(size as u64);
            tracing::info!(%tenant, job = %id, size, content_type = kind.mime(), "document accepted");
            Ok(accepted(&id, status::ACCEPTED, false))
        }
        Err(e) => {
            // Best effort: the record already says `stored`; mark why it went no further.
            let _ = state
                .jobs
                .set_status(&tenant, &id, status::PRODUCE_FAILED, None)
                .await;
            Err(e)
        }
    }
}

async fn produce(state: &AppState, job: &Job) -> Result<(), ApiError> {
    let event = DocUploaded {
        document_id: job.job_id.clone(),
        tenant_id: job.tenant_id.clone(),
        object_uri: job.object_uri.clone(),
        content_type: job.content_type.clone(),
        size_bytes: job.size_bytes,
        original_file_name: job.file_name.clone(),
        uploaded_at: now_ms(),
        producer_version: concat!("docflow-ingest/", env!("CARGO_PKG_VERSION")).to_owned(),
    };
    let payload = state.codec.encode(&event).await.map_err(|e| {
        if e.is_permanent() {
            ApiError::Internal(format!("encoding doc.uploaded: {e}"))
        } else {
            ApiError::Unavailable(format!("schema registry: {e}"))
        }
    })?;
    let trace = TraceContext::new_root().to_string();
    let headers = OwnedHeaders::new().insert(Header {
        key: TRACEPARENT,
        value: Some(trace.as_bytes()),
    });
    let started = std::time::Instant::now();
    let sent = state
        .producer
        .send(
            FutureRecord::to(&state.topic)
                .key(&job.job_id)
                .payload(&payload)
                .headers(headers),
            state.produce_timeout,
        )
        .await;
    let result = if sent.is_ok() { "ok" } else { "error" };
    state
        .metrics
        .produce
        .with_label_values(&[result])
        .observe(started.elapsed().as_secs_f64());
    sent.map_err(|(e, _)| ApiError::Unavailable(format!("broker: {e}")))?;
    Ok(())
}

async fn job(
    State(state): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tenant = tenant(&state, &headers)?;
    if !is_document_id(&id) {
        return Err(ApiError::NotFound(id));
    }
    // Another tenant's job is simply not found: no 403 that would leak its existence.
    let job = state
        .jobs
        .get(&tenant, &id)
        .await?
        .ok_or_else(|| ApiError::NotFound(id.clone()))?;
    let mut body = serde_json::to_value(&job).map_err(|e| ApiError::Internal(e.to_string()))?;
    body["stages"] = json!([]);
    Ok((StatusCode::OK, axum::Json(body)).into_response())
}
