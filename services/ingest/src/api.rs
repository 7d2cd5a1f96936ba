//! Routes: `POST /v1/documents`, `GET /v1/jobs/{id}`, `GET /v1/documents/{id}/thumbnail`,
//! `GET /v1/search`, `GET /v1/analytics`, `GET /openapi.json`, `GET /healthz`, `GET /readyz`,
//! `GET /metrics`; the console and `/v1/admin/...` are in `admin`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequest, Multipart, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use docflow_events::{DocUploaded, stages, types::is_document_id};
use docflow_runtime::metrics::now_ms;
use docflow_runtime::producer::{SendError, send_event};
use docflow_runtime::trace::TraceContext;
use docflow_store::{Blobs, Checked, Committed, PageText, StageRun, StageStatus, Staged, Syncing};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::AppState;
use crate::error::ApiError;
use crate::sniff::{Kind, check_pdf, sniff};
use crate::timing::{Timing, timed};
use docflow_store::jobs::{Job, status};

type Shared = State<Arc<AppState>>;

/// The OpenAPI document of this API.
pub const OPENAPI: &str = include_str!("../openapi.json");

/// The API routes.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/documents", post(upload))
        .route("/v1/jobs/{id}", get(job))
        .route("/v1/documents/{id}/thumbnail", get(thumbnail))
        .route("/v1/search", get(search))
        .route("/v1/analytics", get(analytics))
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

/// The tenant of the request's bearer token: a token of the configuration, else one in the
/// database (`docflow tokens create`; revoked ones are refused).
async fn tenant(state: &AppState, headers: &HeaderMap) -> Result<String, ApiError> {
    let token = bearer(headers).ok_or(ApiError::Unauthorized)?;
    tenant_of(state, token).await?.ok_or(ApiError::Unauthorized)
}

/// The request's bearer token. The scheme is case-insensitive (RFC 7235 §2.1): `bearer`,
/// `BEARER` and `Bearer` alike.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim_start().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|t| !t.is_empty())
}

/// The tenant of `token`, if it is a tenant's token.
pub(crate) async fn tenant_of(state: &AppState, token: &str) -> Result<Option<String>, ApiError> {
    if let Some(tenant) = state.tokens.get(token) {
        return Ok(Some(tenant.clone()));
    }
    Ok(state.db_tokens.tenant_of(token).await?)
}

#[derive(Debug, Default, Deserialize)]
struct UploadQuery {
    #[serde(default)]
    reprocess: bool,
    filename: Option<String>,
    /// Request/reply: wait up to this long (`5s`, `1500ms`; capped) for every stage.
    wait: Option<String>,
}

/// The `?wait=` of a request, capped to `max`; `None` for no wait.
fn parse_wait(raw: Option<&str>, max: Duration) -> Result<Option<Duration>, ApiError> {
    let Some(raw) = raw.map(str::trim).filter(|r| !r.is_empty()) else {
        return Ok(None);
    };
    let d = if raw.bytes().all(|b| b.is_ascii_digit()) {
        // A bare number is seconds.
        raw.parse::<u64>().map(Duration::from_secs).ok()
    } else {
        humantime::parse_duration(raw).ok()
    }
    .ok_or_else(|| {
        ApiError::BadRequest(format!(
            "invalid wait {raw:?}: use a duration such as 5s or 1500ms"
        ))
    })?;
    Ok((!d.is_zero()).then(|| d.min(max)))
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

/// An upload being received: its bytes go to a staged blob as they arrive (a slow or large
/// upload holds a file, not memory), hashed on the way (the document id), with the first
/// bytes kept to tell its type.
struct Receiver {
    staged: Staged,
    hasher: Sha256,
    head: Vec<u8>,
    limit: u64,
}

/// Bytes of the head kept for sniffing.
const HEAD: usize = 16;

impl Receiver {
    async fn push(&mut self, chunk: &[u8]) -> Result<(), ApiError> {
        if self.staged.len() + chunk.len() as u64 > self.limit {
            return Err(ApiError::TooLarge { limit: self.limit });
        }
        self.hasher.update(chunk);
        let want = HEAD.saturating_sub(self.head.len()).min(chunk.len());
        self.head.extend_from_slice(&chunk[..want]);
        self.staged
            .write(chunk)
            .await
            .map_err(|e| ApiError::unavailable("object store", e))
    }
}

fn is_multipart(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("multipart/form-data"))
}

/// A raw body, streamed into `rx`.
async fn read_raw(body: Body, rx: &mut Receiver) -> Result<Option<String>, ApiError> {
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::BadRequest(format!("reading the body failed: {e}")))?;
        rx.push(&chunk).await?;
    }
    Ok(None)
}

/// A `multipart/form-data` body: exactly one part named `file`, streamed into `rx` (the
/// limit is enforced while reading); returns the part's file name.
async fn read_multipart(req: Request, rx: &mut Receiver) -> Result<Option<String>, ApiError> {
    let limit = rx.limit;
    let bad = |e: axum::extract::multipart::MultipartError| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::TooLarge { limit }
        } else {
            ApiError::BadRequest(format!("malformed multipart body: {}", e.body_text()))
        }
    };
    let mut multipart = Multipart::from_request(req, &())
        .await
        .map_err(|e| ApiError::BadRequest(format!("multipart: {}", e.body_text())))?;
    let mut file: Option<Option<String>> = None;
    while let Some(mut field) = multipart.next_field().await.map_err(bad)? {
        if field.name() != Some("file") {
            return Err(ApiError::BadRequest(format!(
                "unexpected multipart part {:?}: send the document as the part named \"file\"",
                field.name().unwrap_or("")
            )));
        }
        if file.is_some() {
            return Err(ApiError::BadRequest(
                "more than one part named \"file\": one document per request".into(),
            ));
        }
        file = Some(field.file_name().map(str::to_owned));
        while let Some(chunk) = field.chunk().await.map_err(bad)? {
            rx.push(&chunk).await?;
        }
    }
    file.ok_or_else(|| ApiError::BadRequest("multipart body has no part named \"file\"".into()))
}

async fn upload(
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
    let multipart = is_multipart(&headers);
    // A raw body announces its size: refuse before reading. (A multipart length includes
    // the framing, so its limit is checked on the part itself.)
    if !multipart
        && let Some(len) = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
        && len > limit
    {
        return Err(ApiError::TooLarge { limit });
    }
    // A slot for the body while it is received and stored: at most --max-concurrent-uploads
    // bodies in flight, each streamed to a staged blob within --body-timeout.
    let slot = state
        .uploads
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::Busy)?;
    let staged = state.blobs.stage_buffered(HELD_BODY_BYTES);
    let mut rx = Receiver {
        staged,
        hasher: Sha256::new(),
        head: Vec::with_capacity(HEAD),
        limit,
    };
    let read = async {
        if multipart {
            read_multipart(req, &mut rx).await
        } else {
            read_raw(req.into_body(), &mut rx).await
        }
    };
    let part_name = tokio::time::timeout(state.body_timeout, read)
        .await
        .map_err(|_| ApiError::BodyTimeout(state.body_timeout))??;
    let Receiver {
        mut staged,
        hasher,
        head,
        ..
    } = rx;
    if staged.is_empty() {
        return Err(ApiError::BadRequest(
            "empty body: send the document bytes".into(),
        ));
    }
    timing.mark("receive");
    let kind = sniff(&head).ok_or(ApiError::UnsupportedType)?;
    let id = hex::encode(hasher.finalize());
    // The duplicate check: the job read (after an `accepted` mark of this replica in flight
    // for the same bytes).
    let lookup = async {
        state.accepting.settled(&tenant, &id).await;
        state.jobs.get(&tenant, &id).await
    };
    let store_error = |e| ApiError::unavailable("object store", e);
    // The key the server makes (tenant from the token, id from the bytes).
    let key = Blobs::key([tenant.as_str(), id.as_str()]);
    let size = staged.len();
    // A body held in memory is checked, written and put under its key on this thread
    // (`block_in_place`: no thread to wake and wait for; the check first, so refused bytes
    // never reach the disk), and its fsync starts on a blocking thread. Only when its key
    // held a blob already is the job read: a job is recorded only after its bytes are under
    // their key, and blobs are never removed, so a key that was free has no job to find
    // (a blob removed by hand, or a link lost in a crash of the machine, makes its next
    // upload new again: its record only counts it). Without a thread to wake for
    // the store, the read beside it was what this step waited for; now a new upload has
    // neither (this step 0.19-0.28 -> 0.10-0.16 ms at p50, 0.41-0.83 -> 0.18-0.30 at p99 over
    // seven alternating runs of ingest-bench). A bigger body is read back from its file to be
    // checked, then put under its key, the job read beside both. Only the answer waits for
    // the fsync.
    let held = staged.held();
    let write_part = if held.is_some() {
        "check.store"
    } else {
        "check.write"
    };
    // `stored` is the first failure of the checks and the file (a refusal, or a store that
    // is away), `existing` the duplicate read's (`None` in the times: it did not run).
    let (stored, existing, [pdf_ms, write_ms], lookup_ms) = match held {
        Some(bytes) => {
            let max_pages = state.max_pages;
            let store = async {
                let _permit = if kind == Kind::Pdf {
                    let permit = state.pdf_checks.acquire().await;
                    Some(permit.map_err(|e| ApiError::failed("checking the PDF", e))?)
                } else {
                    None
                };
                let check = move || {
                    let started = Instant::now();
                    if kind == Kind::Pdf {
                        // A bug in the check is this server's fault (500), not a refusal of
                        // the bytes and not a store that is away (503: retried for ever).
                        let checked = std::panic::catch_unwind(|| check_pdf(&bytes, max_pages))
                            .map_err(|_| ApiError::Internal("the PDF check failed".into()))?;
                        checked?;
                    }
                    Ok::<_, ApiError>(started.elapsed().as_secs_f64() * 1e3)
                };
                let checked = state.blobs.check_and_commit(&mut staged, &key, check);
                checked.await.map_err(store_error)
            };
            let (stored, store_ms) = timed(store).await;
            let (stored, pdf_ms) = match stored {
                Ok(Checked::Kept {
                    passed,
                    committed,
                    syncing,
                }) => (Ok(Stored::Linked(committed, syncing)), passed),
                Ok(Checked::Refused(e)) | Err(e) => (Err(e), 0.0),
            };
            // (With `?reprocess=true` a job found changes nothing; while job reads or records
            // fail, the database is asked first, whatever the key.)
            let failing = state.jobs_failing.load(Ordering::Relaxed);
            let (existing, lookup_ms) = match &stored {
                Ok(Stored::Linked(committed, _))
                    if failing || (*committed == Committed::Existing && !q.reprocess) =>
                {
                    let (existing, ms) = timed(lookup).await;
                    (existing, Some(ms))
                }
                _ => (Ok(None), None),
            };
            (stored, existing, [pdf_ms, store_ms], lookup_ms)
        }
        None => {
            // The file is complete before it is read back, the duplicate read beside both.
            let read_back = async {
                let (syncing, write_ms) = timed(staged.flush()).await;
                let syncing = syncing.map(Stored::Flushed).map_err(store_error);
                let (checked, pdf_ms) = timed(async {
                    if kind == Kind::Pdf && syncing.is_ok() {
                        check_pdf_file(&state, staged.path().to_owned()).await?;
                    }
                    Ok::<_, ApiError>(())
                })
                .await;
                (syncing, write_ms, checked, pdf_ms)
            };
            let ((stored, write_ms, checked, pdf_ms), (existing, lookup_ms)) =
                tokio::join!(read_back, timed(lookup));
            // (The check runs only once the file is whole.)
            let stored = stored.and_then(|s| checked.map(|()| s));
            (stored, existing, [pdf_ms, write_ms], Some(lookup_ms))
        }
    };
    if kind == Kind::Pdf {
        timing.part("check.pdf", pdf_ms);
    }
    timing.part(write_part, write_ms);
    if let Some(lookup_ms) = lookup_ms {
        timing.part("check.lookup", lookup_ms);
        state
            .jobs_failing
            .store(existing.is_err(), Ordering::Relaxed);
    }
    let stored = stored?;
    let existing = existing?;
    timing.mark("check");
    let file_name = q.filename.or(part_name).map(|f| {
        f.chars()
            .filter(|c| !c.is_control())
            .take(255)
            .collect::<String>()
    });

    if let Some(existing) = existing
        && existing.status == status::ACCEPTED
        && !q.reprocess
    {
        drop((staged, slot, stored));
        state.jobs.record_upload(&existing).await?;
        timing.mark("record");
        tracing::info!(%tenant, job = %id, "duplicate upload; no new work");
        let resp = reply(&state, &tenant, &id, &existing.status, true, wait).await?;
        timing.mark("reply");
        return Ok(timing.attach(resp));
    }

    tracing::Span::current().record("docflow.job_id", id.as_str());
    // 1. The bytes under their key: visible there before the event is produced, so a stage
    //    finds them (while the machine stays up; after a crash of the machine, only an
    //    answered upload's bytes are sure to be there). A blob already under the key is
    //    kept when it holds these bytes, and replaced when it does not (a crash of the
    //    machine before its fsync left it short or zero-filled): the upload then goes on as
    //    a new one, its event produced again.
    let (committed, syncing) = match stored {
        Stored::Linked(committed, syncing) => {
            // A duplicate's staged copy goes now, not when the answer is sent.
            drop(staged);
            (committed, syncing)
        }
        Stored::Flushed(syncing) => {
            let committed = state
                .blobs
                .commit(staged, &key)
                .await
                .map_err(store_error)?;
            timing.mark("store");
            (committed, syncing)
        }
    };
    drop(slot);
    let object_uri = state.blobs.uri(&key);

    // 2. At once, all three: the event produced and acked, the bytes and their directory
    //    entry made durable, and the job recorded (`stored`). The answer waits for all of
    //    them. With the send no longer lingering 1 ms (`request_producer`), the fsyncs and
    //    the record after them had become the longest branch (1.25-1.32 ms against the
    //    produce's 0.84-0.96 at p50); beside them it is 0.99-1.04 ms, and the POST
    //    1.87-2.02 -> 1.60-1.72 ms at p50, 3.31-3.55 -> 2.68-2.91 at p99 (four runs against
    //    two; the record itself is slower sharing the disk, 0.45 -> 0.68 ms, but no longer
    //    waits for the fsyncs; bench/results/ingest.md). So a `stored` record no longer
    //    means the bytes are on disk: a crash of the machine before the answer, or an fsync
    //    that fails (503), can leave one whose bytes are not. No client was told `202` for
    //    it; its retry puts the bytes under the key again (a broken blob there is replaced)
    //    and records the upload again (a second record only counts it). When one fails the
    //    request fails, even if the event went out: the client's retry produces it again
    //    and the stages absorb the duplicate (a result is keyed by the bytes). A failed
    //    produce is answered first (503 naming the broker), whatever else failed.
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
    let ((durable, fsync_ms), (recorded, record_ms), (produced, produce_ms)) = tokio::join!(
        timed(state.blobs.sync_committed(&key, committed, syncing)),
        timed(state.jobs.record_upload(&job)),
        timed(produce(&state, &job, &trace))
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
                .set_status(&tenant, &id, status::PRODUCE_FAILED, None)
                .await;
        }
        return Err(e);
    }
    durable.map_err(store_error)?;
    recorded?;
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

/// Where an upload's bytes are once checked.
enum Stored {
    /// Under their key already (a held body): what the commit did, and the fsync running.
    Linked(Committed, Syncing),
    /// In their staged file (a streamed body), the fsync running: put under the key next.
    Flushed(Syncing),
}

/// Bodies up to this size are held in memory while they arrive (at most
/// --max-concurrent-uploads of them, 32 MiB by default), checked there and written to their
/// staged file in one go; bigger ones stream to the file as they arrive.
const HELD_BODY_BYTES: usize = 1 << 20;

/// The page and structure checks of a PDF in its staged file (a body too big to hold):
/// read back and parsed off the async threads, at most --pdf-checks at a time (each may
/// hold the document and up to [`crate::sniff::MAX_INFLATED`] of inflated object streams).
/// A held body is checked by the thread that writes it (`upload`), under the same limit.
async fn check_pdf_file(state: &AppState, path: std::path::PathBuf) -> Result<usize, ApiError> {
    let _permit = state
        .pdf_checks
        .acquire()
        .await
        .map_err(|e| ApiError::failed("checking the PDF", e))?;
    let max_pages = state.max_pages;
    let checked = tokio::task::spawn_blocking(move || {
        let bytes = std::fs::read(&path)?;
        Ok::<_, std::io::Error>(check_pdf(&bytes, max_pages))
    })
    .await
    .map_err(|e| ApiError::failed("checking the PDF", e))?
    .map_err(|e| ApiError::unavailable("object store", e))?;
    Ok(checked?)
}

/// `202` with the job id; or, when the request asked to wait and every stage finished in
/// time, `200` with the job's results.
async fn reply(
    state: &AppState,
    tenant: &str,
    id: &str,
    status: &str,
    duplicate: bool,
    wait: Option<Duration>,
) -> Result<Response, ApiError> {
    if let Some(wait) = wait
        && let Some(body) = wait_for_stages(state, tenant, id, wait).await?
    {
        return Ok((StatusCode::OK, axum::Json(body)).into_response());
    }
    Ok(accepted(id, status, duplicate))
}

/// Reads the result store until every configured stage has finished with the document
/// (done, failed or dead-lettered), `wait` is over, or the server begins to shut down. It
/// reads again whenever a stage announces a result for the document on `doc.processed`
/// (see [`crate::wakeups`]), and otherwise every `--wait-poll`, so an answer never depends
/// on the listener.
async fn wait_for_stages(
    state: &AppState,
    tenant: &str,
    id: &str,
    wait: Duration,
) -> Result<Option<Value>, ApiError> {
    let deadline = Instant::now() + wait;
    let watch = state.wakeups.watch(id);
    let mut cause = "first";
    loop {
        state.metrics.wait_reads.with_label_values(&[cause]).inc();
        // Registered before the read: an announcement that lands during it still wakes us.
        let woken = watch.notify().notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let runs = state.results.latest_runs(tenant, id).await?;
        if all_finished(&state.stages, &runs) {
            state.accepting.settled(tenant, id).await;
            let job = state
                .jobs
                .get(tenant, id)
                .await?
                .ok_or_else(|| ApiError::NotFound(id.to_owned()))?;
            let pages = job_pages(state, tenant, id, &runs).await?;
            return Ok(Some(job_body(state, &job, &runs, &pages)?));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        tokio::select! {
            () = &mut woken => cause = "event",
            () = tokio::time::sleep(state.wait_poll.min(left)) => cause = "poll",
            // Shutting down: answer with the job id now rather than hold the shutdown.
            () = state.stopping.cancelled() => return Ok(None),
        }
    }
}

fn all_finished(stages: &[String], runs: &[StageRun]) -> bool {
    stages.iter().all(|s| runs.iter().any(|r| &r.stage == s))
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
    let result = if sent.is_ok() { "ok" } else { "error" };
    state
        .metrics
        .produce
        .with_label_values(&[result])
        .observe(started.elapsed().as_secs_f64());
    sent.map_err(|e| match e {
        SendError::Encode(e) if e.is_permanent() => ApiError::failed("encoding doc.uploaded", e),
        SendError::Encode(e) => ApiError::unavailable("schema registry", e),
        e @ SendError::Timeout { waiting_for, .. } => ApiError::unavailable(waiting_for, e),
        e @ SendError::Produce { .. } => ApiError::unavailable("broker", e),
    })
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
async fn job_pages(
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

/// Query of `GET /v1/search`.
#[derive(Debug, Deserialize)]
struct SearchQuery {
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
async fn search(
    State(state): Shared,
    query: Result<Query<SearchQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tenant = tenant(&state, &headers).await?;
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

/// Query of `GET /v1/analytics`.
#[derive(Debug, Deserialize)]
struct AnalyticsQuery {
    from: Option<String>,
    to: Option<String>,
    granularity: Option<String>,
}

/// Most buckets one analytics answer holds (a year of days, or 92 days of hours).
const MAX_ANALYTICS_BUCKETS: i64 = 24 * 92;

fn unix_ms(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// An RFC 3339 time (`2026-12-04T10:00:00Z`) as Unix ms.
fn parse_time(value: &str, name: &str) -> Result<i64, ApiError> {
    humantime::parse_rfc3339_weak(value)
        .map(unix_ms)
        .map_err(|e| {
            ApiError::BadRequest(format!("`{name}` is not an RFC 3339 time ({e}): {value:?}"))
        })
}

fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(t).to_string()
}

fn bucket_json(b: &docflow_store::Bucket) -> Value {
    json!({
        "start": rfc3339(b.start_ms),
        "documents": b.documents,
        "bytes": b.bytes,
        "by_content_type": b.by_content_type,
        "stages": b.stages,
        "dead_lettered": b.dead_lettered,
    })
}

/// The tenant's rollup (from the analytics-rollup consumer group): uploads, bytes, content
/// types, stage outcomes and dead-lettered records per hour or day in [`from`, `to`).
async fn analytics(
    State(state): Shared,
    query: Result<Query<AnalyticsQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    use docflow_store::Granularity;
    let tenant = tenant(&state, &headers).await?;
    let Query(q) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let granularity: Granularity = q
        .granularity
        .as_deref()
        .unwrap_or("hour")
        .parse()
        .map_err(ApiError::BadRequest)?;
    let to = match &q.to {
        Some(v) => parse_time(v, "to")?,
        None => unix_ms(std::time::SystemTime::now()),
    };
    let from = match &q.from {
        Some(v) => parse_time(v, "from")?,
        None => to.saturating_sub(match granularity {
            Granularity::Hour => docflow_store::analytics::DAY_MS,
            Granularity::Day => 30 * docflow_store::analytics::DAY_MS,
        }),
    };
    let (from, to) = (granularity.floor(from), granularity.ceil(to));
    if from >= to {
        return Err(ApiError::BadRequest("`from` must be before `to`".into()));
    }
    if (to - from) / granularity.millis() > MAX_ANALYTICS_BUCKETS {
        return Err(ApiError::BadRequest(format!(
            "at most {MAX_ANALYTICS_BUCKETS} buckets per request: narrow `from`..`to` or use granularity=day"
        )));
    }
    let buckets = state
        .analytics
        .rollup(Some(&tenant), from, to, granularity)
        .await?;
    let totals = docflow_store::analytics::totals(&buckets);
    let granularity = match granularity {
        Granularity::Hour => "hour",
        Granularity::Day => "day",
    };
    Ok((
        StatusCode::OK,
        axum::Json(json!({
            "tenant": tenant,
            "granularity": granularity,
            "from": rfc3339(from),
            "to": rfc3339(to),
            "totals": {
                "documents": totals.documents,
                "bytes": totals.bytes,
                "by_content_type": totals.by_content_type,
                "stages": totals.stages,
                "dead_lettered": totals.dead_lettered,
            },
            "buckets": buckets.iter().map(bucket_json).collect::<Vec<_>>(),
        })),
    )
        .into_response())
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

async fn job(
    State(state): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    tracing::Span::current().record("docflow.job_id", id.as_str());
    let tenant = tenant(&state, &headers).await?;
    let body = job_json(&state, &tenant, &id).await?;
    Ok((StatusCode::OK, axum::Json(body)).into_response())
}

/// `GET /v1/jobs/{id}`'s body for the job `id` of `tenant`.
pub(crate) async fn job_json(state: &AppState, tenant: &str, id: &str) -> Result<Value, ApiError> {
    let job = own_job(state, tenant, id).await?;
    let runs = state.results.latest_runs(tenant, id).await?;
    let pages = job_pages(state, tenant, id, &runs).await?;
    job_body(state, &job, &runs, &pages)
}

/// The first-page thumbnail (PNG) of the newest thumbnails run; `304` when the client's
/// `If-None-Match` already names it.
async fn thumbnail(
    State(state): Shared,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tenant = tenant(&state, &headers).await?;
    thumbnail_of(&state, &tenant, &id, &headers).await
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_is_parsed_and_capped() {
        let max = Duration::from_secs(30);
        assert_eq!(parse_wait(None, max).unwrap(), None);
        assert_eq!(parse_wait(Some(""), max).unwrap(), None);
        assert_eq!(parse_wait(Some("0s"), max).unwrap(), None);
        assert_eq!(
            parse_wait(Some("5s"), max).unwrap(),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            parse_wait(Some("1500ms"), max).unwrap(),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_wait(Some("7"), max).unwrap(),
            Some(Duration::from_secs(7))
        );
        assert_eq!(parse_wait(Some("1h"), max).unwrap(), Some(max));
        assert!(matches!(
            parse_wait(Some("soon"), max),
            Err(ApiError::BadRequest(_))
        ));
    }
}
