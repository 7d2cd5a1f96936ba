//! Persisting an upload whose bytes are under their key: the bytes made durable, the job
//! recorded and `doc.uploaded` produced, at once; or, for a duplicate, the upload counted.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::response::Response;
use docflow_events::DocUploaded;
use docflow_runtime::metrics::now_ms;
use docflow_runtime::producer::{SendError, send_event};
use docflow_runtime::trace::TraceContext;
use docflow_store::jobs::{Job, status};
use docflow_store::{Committed, Syncing};
use object_store::path::Path as Key;

use super::reply::reply;
use super::store::store_error;
use crate::AppState;
use crate::error::ApiError;
use crate::metrics::ProduceResult;
use crate::timing::{Timing, timed};

/// At once, all three: the event produced and acked, the bytes and their directory
/// entry made durable, and the job recorded (`stored`). The answer waits for all of
/// them. With the send no longer lingering 1 ms (`request_producer`), the fsyncs and
/// the record after them had become the longest branch (1.25-1.32 ms against the
/// produce's 0.84-0.96 at p50); beside them it is 0.99-1.04 ms, and the POST
/// 1.87-2.02 -> 1.60-1.72 ms at p50, 3.31-3.55 -> 2.68-2.91 at p99 (four runs against
/// two; the record itself is slower sharing the disk, 0.45 -> 0.68 ms, but no longer
/// waits for the fsyncs; bench/results/ingest.md). So a `stored` record no longer
/// means the bytes are on disk: a crash of the machine before the answer, or an fsync
/// that fails (503), can leave one whose bytes are not. No client was told `202` for
/// it; its retry puts the bytes under the key again (a broken blob there is replaced)
/// and records the upload again (a second record only counts it). When one fails the
/// request fails, even if the event went out: the client's retry produces it again
/// and the stages absorb the duplicate (a result is keyed by the bytes). A failed
/// produce is answered first (503 naming the broker), whatever else failed.
pub(super) async fn persist(
    state: &AppState,
    timing: &mut Timing,
    key: &Key,
    committed: Committed,
    syncing: Syncing,
    job: &Job,
    trace: &TraceContext,
) -> Result<(), ApiError> {
    let ((durable, fsync_ms), (recorded, record_ms), (produced, produce_ms)) = tokio::join!(
        timed(state.blobs.sync_committed(key, committed, syncing)),
        timed(state.jobs.record_upload(job)),
        timed(produce(state, job, trace))
    );
    state
        .jobs_failing
        .store(recorded.is_err(), Ordering::Relaxed);
    timing.part("persist.fsync", fsync_ms);
    timing.part("persist.record", record_ms);
    timing.part("persist.produce", produce_ms);
    timing.mark("persist");
    if let Err(e) = produced {
        if recorded.is_ok() {
            // Best effort: the record says `stored`; mark why it went no further.
            let _ = state
                .jobs
                .set_status(&job.tenant_id, &job.job_id, status::PRODUCE_FAILED, None)
                .await;
        }
        return Err(e);
    }
    durable.map_err(store_error)?;
    recorded?;
    Ok(())
}

/// The same bytes again, their job `accepted` (`existing`), without `?reprocess=true`: the
/// upload is only counted, no new work; answered as [`reply`] does, marked a duplicate.
pub(super) async fn record_duplicate(
    state: &AppState,
    mut timing: Timing,
    tenant: &str,
    id: &str,
    existing: &Job,
    wait: Option<Duration>,
) -> Result<Response, ApiError> {
    state.jobs.record_upload(existing).await?;
    timing.mark("record");
    tracing::info!(%tenant, job = %id, "duplicate upload; no new work");
    let resp = reply(state, tenant, id, &existing.status, true, wait).await?;
    timing.mark("reply");
    Ok(timing.attach(resp))
}

async fn produce(state: &AppState, job: &Job, trace: &TraceContext) -> Result<(), ApiError> {
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
    let started = std::time::Instant::now();
    let sent = send_event(
        &state.producer,
        &state.codec,
        &state.topic,
        &job.job_id,
        &event,
        trace,
        state.produce_timeout,
    )
    .await;
    let result = if sent.is_ok() {
        ProduceResult::Ok
    } else {
        ProduceResult::Error
    };
    state
        .metrics
        .observe_produce(result, started.elapsed().as_secs_f64());
    sent.map_err(|e| match e {
        SendError::Encode(e) if e.is_permanent() => ApiError::failed("encoding doc.uploaded", e),
        SendError::Encode(e) => ApiError::unavailable("schema registry", e),
        e @ SendError::Timeout { waiting_for, .. } => ApiError::unavailable(waiting_for, e),
        e @ SendError::Produce { .. } => ApiError::unavailable("broker", e),
    })
}
