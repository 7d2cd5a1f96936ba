//! A job as the API shows it: its JSON body (with its stages, pipeline state, text and
//! summary) and its thumbnail. Shared by the tenant API (`api`: `GET /v1/jobs/{id}`,
//! `GET /v1/documents/{id}/thumbnail`, the answer of an upload with `?wait=`) and the admin
//! API (`admin`: `/v1/admin/jobs/...`).

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use docflow_events::{stages, types::is_document_id};
use docflow_store::jobs::{Job, status};
use docflow_store::{PageText, StageRun, StageStatus};
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiError;

/// Whether every one of `stages` has a run among `runs` (done, failed or dead-lettered).
pub(crate) fn all_finished(stages: &[String], runs: &[StageRun]) -> bool {
    stages.iter().all(|s| runs.iter().any(|r| &r.stage == s))
}

fn stage_json(run: &StageRun) -> Value {
    json!({
        "stage": run.stage,
        "status": run.status.as_str(),
        "stage_version": run.stage_version,
        "attempts": run.attempts,
        "started_at_ms": run.started_at_ms,
        "finished_at_ms": run.finished_at_ms,
        "duration_ms": run.duration_ms(),
        "error": run.error,
        "output": run.output.as_deref().and_then(|o| serde_json::from_str::<Value>(o).ok()),
    })
}

/// A job with its stages: every configured stage (`pending` until it reports) and any other
/// stage that reported; the pipeline state; text, summary and thumbnail URL once there.
pub(crate) fn job_body(
    state: &AppState,
    job: &Job,
    runs: &[StageRun],
    pages: &[PageText],
) -> Result<Value, ApiError> {
    let mut stages: Vec<Value> = state
        .stages
        .iter()
        .map(|name| match runs.iter().find(|r| &r.stage == name) {
            Some(run) => stage_json(run),
            None => json!({"stage": name, "status": "pending"}),
        })
        .collect();
    stages.extend(
        runs.iter()
            .filter(|r| !state.stages.contains(&r.stage))
            .map(stage_json),
    );
    // A job whose mark failed after its event's ack stays `stored`; a stage's report shows
    // its event went out (see `accepting`).
    let produced =
        job.status == status::ACCEPTED || (job.status == status::STORED && !runs.is_empty());
    let pipeline = if !produced {
        "not_started"
    } else if !all_finished(&state.stages, runs) {
        "processing"
    } else if state.stages.iter().all(|s| {
        runs.iter()
            .any(|r| &r.stage == s && r.status == StageStatus::Done)
    }) {
        "done"
    } else {
        "failed"
    };
    let from_output = |field: &str| {
        runs.iter()
            .filter(|r| r.status == StageStatus::Done)
            .filter_map(|r| serde_json::from_str::<Value>(r.output.as_deref()?).ok())
            .find_map(|o| o.get(field).filter(|v| v.is_string()).cloned())
            .unwrap_or(Value::Null)
    };
    let thumbnail = runs
        .iter()
        .any(|r| r.stage == stages::THUMBNAILS && r.status == StageStatus::Done);
    let mut body = json!({
        "job_id": job.job_id,
        "status": job.status,
        "content_type": job.content_type,
        "size_bytes": job.size_bytes,
        "file_name": job.file_name,
        "uploads": job.uploads,
        "created_at_ms": job.created_at_ms,
        "produced_at_ms": job.produced_at_ms,
    });
    body["pipeline"] = json!(pipeline);
    body["stages"] = Value::Array(stages);
    body["text"] = from_output("text");
    body["summary"] = from_output("summary");
    if !pages.is_empty() {
        // The text stage's pages: the whole text, and each page with where it came from.
        let joined: Vec<&str> = pages.iter().map(|p| p.text.as_str()).collect();
        body["text"] = json!(joined.join("\n\n"));
        body["pages"] = pages
            .iter()
            .map(|p| {
                let mut page = json!({
                    "page": p.page,
                    "source": p.source.as_str(),
                    "confidence": p.confidence,
                    "text": p.text,
                });
                if let Some(layout) = &p.layout {
                    page["layout"] = json!(layout);
                }
                page
            })
            .collect();
    }
    body["thumbnail_url"] = if thumbnail {
        json!(format!("/v1/documents/{}/thumbnail", job.job_id))
    } else {
        Value::Null
    };
    Ok(body)
}

/// The pages the text stage stored for a document, once its run is done.
pub(crate) async fn job_pages(
    state: &AppState,
    tenant: &str,
    id: &str,
    runs: &[StageRun],
) -> Result<Vec<PageText>, ApiError> {
    let done = runs
        .iter()
        .any(|r| r.stage == stages::OCR_EMBEDDINGS && r.status == StageStatus::Done);
    if !done {
        return Ok(Vec::new());
    }
    Ok(state.text.pages(tenant, id, stages::OCR_EMBEDDINGS).await?)
}

/// The tenant's job `id`; another tenant's job is simply not found (no 403 that would leak
/// its existence).
async fn own_job(state: &AppState, tenant: &str, id: &str) -> Result<Job, ApiError> {
    if !is_document_id(id) {
        return Err(ApiError::NotFound(id.to_owned()));
    }
    state.accepting.settled(tenant, id).await;
    state
        .jobs
        .get(tenant, id)
        .await?
        .ok_or_else(|| ApiError::NotFound(id.to_owned()))
}

/// `GET /v1/jobs/{id}`'s body for the job `id` of `tenant`.
pub(crate) async fn job_json(state: &AppState, tenant: &str, id: &str) -> Result<Value, ApiError> {
    let job = own_job(state, tenant, id).await?;
    let runs = state.results.latest_runs(tenant, id).await?;
    let pages = job_pages(state, tenant, id, &runs).await?;
    job_body(state, &job, &runs, &pages)
}

/// The thumbnail of the job `id` of `tenant` (`304` when `If-None-Match` names it).
pub(crate) async fn thumbnail_of(
    state: &AppState,
    tenant: &str,
    id: &str,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    own_job(state, tenant, id).await?;
    let runs = state.results.latest_runs(tenant, id).await?;
    let run = runs.iter().find(|r| r.stage == stages::THUMBNAILS);
    let (run, result_ref) = match run {
        Some(run) if run.status == StageStatus::Done => match &run.result_ref {
            Some(r) => (run, r),
            None => return Err(ApiError::Internal("thumbnail run without a result".into())),
        },
        Some(run) => {
            return Err(ApiError::NotReady(format!(
                "no thumbnail: stage thumbnails v{} {} ({})",
                run.stage_version,
                run.status.as_str(),
                run.error.as_deref().unwrap_or("no detail")
            )));
        }
        None => {
            return Err(ApiError::NotReady(
                "thumbnail not ready yet: stage thumbnails is pending".into(),
            ));
        }
    };
    let etag = format!(
        "\"{}\"",
        run.idempotency_key
            .as_deref()
            .unwrap_or(result_ref.as_str())
    );
    if headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"))
    {
        return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response());
    }
    let key = object_store::path::Path::parse(result_ref)
        .map_err(|e| ApiError::failed("reading the thumbnail reference", e))?;
    let png = state
        .blobs
        .get(&key)
        .await
        .map_err(|e| ApiError::unavailable("object store", e))?
        .ok_or_else(|| ApiError::Internal(format!("thumbnail blob {result_ref} is missing")))?;
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "image/png".to_owned()),
            (header::ETAG, etag),
            (header::CACHE_CONTROL, "private, max-age=86400".to_owned()),
        ],
        png,
    )
        .into_response())
}
