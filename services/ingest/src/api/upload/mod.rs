//! `POST /v1/documents`, step by step, in the order of its effects:
//!
//! - `receive`: the body streamed to a staged blob, hashed on the way (the document id);
//! - `store`: the checks of the bytes (type, a PDF's structure) and the bytes under their key,
//!   the duplicate read beside them;
//! - `persist`: at once, the bytes made durable, the job recorded and `doc.uploaded` produced
//!   (or, for a duplicate, the upload only counted);
//! - `reply`: `202` with the job id, or with `?wait=`, `200` with the results.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::response::Response;
use docflow_runtime::metrics::now_ms;
use docflow_runtime::trace::TraceContext;
use docflow_store::Blobs;
use docflow_store::jobs::{Job, status};
use serde::Deserialize;
use sha2::Digest as _;

use super::Shared;
use crate::auth::tenant;
use crate::error::ApiError;
use crate::sniff::sniff;
use crate::timing::Timing;

mod persist;
mod receive;
mod reply;
mod store;

use receive::Received;
use reply::{parse_wait, reply};

#[derive(Debug, Default, Deserialize)]
pub(super) struct UploadQuery {
    #[serde(default)]
    reprocess: bool,
    filename: Option<String>,
    /// Request/reply: wait up to this long (`5s`, `1500ms`; capped) for every stage.
    wait: Option<String>,
}

// The tenant is read in the body, not by the `Tenant` extractor: its look-up is part of the
// `auth` step that `Server-Timing` reports.
pub(super) async fn upload(
    State(state): Shared,
    query: Result<Query<UploadQuery>, QueryRejection>,
    req: Request,
) -> Result<Response, ApiError> {
    let mut timing = Timing::start();
    let headers = req.headers().clone();
    // The caller's trace when it sent one (continued even without span export; see
    // `metrics::observe`).
    let trace = req
        .extensions()
        .get::<TraceContext>()
        .copied()
        .unwrap_or_else(TraceContext::new_root);
    // Who asks comes first: a bad query from an unknown client is a 401, not a 400.
    let tenant = tenant(&state, &headers).await?;
    let Query(q) =
        query.map_err(|e| ApiError::BadRequest(format!("query string: {}", e.body_text())))?;
    let wait = parse_wait(q.wait.as_deref(), state.max_wait)?;
    timing.mark("auth");

    let limit = state.max_upload_bytes;
    let multipart = receive::is_multipart(&headers);
    receive::check_length(&headers, multipart, limit)?;
    // A slot for the body while it is received and stored: at most --max-concurrent-uploads
    // bodies in flight, each streamed to a staged blob within --body-timeout.
    let slot = state
        .uploads
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::Busy)?;
    let Received {
        mut staged,
        hasher,
        head,
        part_name,
    } = receive::receive(&state, req, multipart, limit).await?;
    timing.mark("receive");

    let kind = sniff(&head).ok_or(ApiError::UnsupportedType)?;
    let id = hex::encode(hasher.finalize());
    // The duplicate check: the job read (after an `accepted` mark of this replica in flight
    // for the same bytes).
    let lookup = async {
        state.accepting.settled(&tenant, &id).await;
        state.jobs.get(&tenant, &id).await
    };
    // The key the server makes (tenant from the token, id from the bytes).
    let key = Blobs::key([tenant.as_str(), id.as_str()]);
    let size = staged.len();
    let (stored, existing) = store::check_and_store(
        &state,
        &mut timing,
        &mut staged,
        &key,
        kind,
        q.reprocess,
        lookup,
    )
    .await?;
    timing.mark("check");
    let file_name = clean_file_name(q.filename.or(part_name));

    if let Some(existing) = existing
        && existing.status == status::ACCEPTED
        && !q.reprocess
    {
        drop((staged, slot, stored));
        return persist::record_duplicate(&state, timing, &tenant, &id, &existing, wait).await;
    }

    tracing::Span::current().record("docflow.job_id", id.as_str());
    // 1. The bytes under their key (`store::commit`).
    let (committed, syncing) = store::commit(&state, &mut timing, stored, staged, &key).await?;
    drop(slot);
    let object_uri = state.blobs.uri(&key);

    // 2. At once, all three: the event produced and acked, the bytes and their directory
    //    entry made durable, and the job recorded (`stored`); see `persist::persist`.
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
    persist::persist(&state, &mut timing, &key, committed, syncing, &job, &trace).await?;
    // 3. `accepted`: written off the answer's path; reads of this job wait for it.
    state.accepting.mark(
        state.jobs.clone(),
        state.metrics.clone(),
        tenant.clone(),
        id.clone(),
        now_ms(),
    );
    state.metrics.upload_bytes.inc_by(size);
    tracing::info!(%tenant, job = %id, size, content_type = kind.mime(), "document accepted");
    let resp = reply(&state, &tenant, &id, status::ACCEPTED, false, wait).await?;
    timing.mark("reply");
    Ok(timing.attach(resp))
}

/// The file name kept with the job (the query's, else the multipart part's): without
/// control characters, at most 255 characters.
fn clean_file_name(name: Option<String>) -> Option<String> {
    name.map(|f| {
        f.chars()
            .filter(|c| !c.is_control())
            .take(255)
            .collect::<String>()
    })
}
