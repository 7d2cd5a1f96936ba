//! The admin API behind the operators' console (`/v1/admin/...`, admin tokens only: a
//! tenant's token gets 403), and the console's page (`/console`).
//!
//! - `GET /v1/admin/groups`: per watched consumer group, the broker's view (state, members
//!   and their partitions, per-partition committed offset, log start/end, lag in records and
//!   seconds, DLQ depth), the replicas' own reports (paused partitions, records in flight) and the result store's (runs done and failed in the last minute,
//!   throughput, p50/p99 run time over five minutes, dead letters redriven), and its health
//!   verdict (`health`: Burrow's OK/WARN/ERR for the group, OK/WARN/STOP/STALL/REWIND per
//!   partition, each with its reason; see `crate::health`).
//! - `GET /v1/admin/groups/{group}/history`: the group's lag (total and per partition, in
//!   records and seconds) at each health sample, the last `--console-history`.
//! - `GET /v1/admin/groups/{group}/dead-letters?limit=N`: the newest dead letters, newest
//!   first, with their provenance headers and whether each was redriven.
//! - `POST /v1/admin/groups/{group}/dead-letters/redrive` (`{"error_class": ...}` optional):
//!   `docflow replay dlq --execute` for the group; answers what it did.
//! - `POST /v1/admin/groups/{group}/dead-letters/{partition}/{offset}/discard`
//!   (`{"by": "who"}`): marks one dead letter handled without redriving it.
//! - `GET /v1/admin/jobs?limit=N[&q=...]`: the newest jobs of every tenant with each stage's
//!   status; with `q`, those whose document id starts with it or whose file name contains it.
//! - `GET /v1/admin/jobs/{tenant}/{id}` and `.../thumbnail`: one job as its tenant sees it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use docflow_runtime::dlq::headers as h;
use docflow_runtime::metrics::now_ms;
use docflow_store::Redrives;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::AppState;
use crate::auth::{bearer, tenant_of};
use crate::console::assets;
use crate::error::ApiError;
use crate::jobs::{job_body, job_json, thumbnail_of};

type Shared = State<Arc<AppState>>;

/// How long an overview is reused: browsers polling at once share one set of broker reads.
const OVERVIEW_TTL: Duration = Duration::from_millis(900);
/// Window of the throughput figure.
const RATE_WINDOW_MS: i64 = 60_000;
/// Window of the run-time quantiles.
const LATENCY_WINDOW_MS: i64 = 300_000;
/// Most jobs and dead letters one request lists.
const MAX_LIST: u32 = 200;

/// The console page and the admin API.
pub(crate) fn routes() -> Router<Arc<AppState>> {
    let asset = |content_type: &'static str, body: &'static str| {
        get(move || async move {
            (
                [
                    (header::CONTENT_TYPE, content_type),
                    (header::CACHE_CONTROL, "no-cache"),
                    // Only its own script, style and the thumbnails it loads as blobs; never
                    // framed.
                    (
                        header::CONTENT_SECURITY_POLICY,
                        "default-src 'self'; img-src 'self' blob:; frame-ancestors 'none'",
                    ),
                    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                ],
                body,
            )
        })
    };
    Router::new()
        .route("/console", asset("text/html; charset=utf-8", assets::INDEX))
        .route(
            "/console/app.js",
            asset("text/javascript; charset=utf-8", assets::APP_JS),
        )
        .route(
            "/console/app.css",
            asset("text/css; charset=utf-8", assets::APP_CSS),
        )
        .route("/v1/admin/groups", get(groups))
        .route("/v1/admin/groups/{group}/history", get(history))
        .route("/v1/admin/groups/{group}/dead-letters", get(dead_letters))
        .route(
            "/v1/admin/groups/{group}/dead-letters/redrive",
            post(redrive),
        )
        .route(
            "/v1/admin/groups/{group}/dead-letters/{partition}/{offset}/discard",
            post(discard),
        )
        .route("/v1/admin/jobs", get(jobs))
        .route("/v1/admin/jobs/{tenant}/{id}", get(job))
        .route("/v1/admin/jobs/{tenant}/{id}/thumbnail", get(thumbnail))
}

/// Lets admin tokens through: no or an unknown token is 401, a tenant's token 403.
async fn admin(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let token = bearer(headers).ok_or(ApiError::Unauthorized)?;
    if state.admin_tokens.contains(token) {
        return Ok(());
    }
    if tenant_of(state, token).await?.is_some() {
        return Err(ApiError::Forbidden(
            "the admin API takes an admin token (--admin-token); a tenant's token cannot use it"
                .into(),
        ));
    }
    if state.admin_tokens.is_empty() {
        return Err(ApiError::Forbidden(
            "the admin API is off: ingest has no --admin-token".into(),
        ));
    }
    Err(ApiError::Unauthorized)
}

/// A blocking broker read on its own thread.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, docflow_replay::ReplayError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(format!("broker read: {e}")))?
        .map_err(replay_error)
}

#[allow(clippy::cast_precision_loss)]
fn per_second(n: u64, window_ms: i64) -> f64 {
    n as f64 * 1000.0 / window_ms as f64
}

/// `GET /v1/admin/groups`.
async fn groups(State(state): Shared, headers: HeaderMap) -> Result<Response, ApiError> {
    admin(&state, &headers).await?;
    let mut last = state.console.last.lock().await;
    if let Some((at, body)) = last.as_ref()
        && at.elapsed() < OVERVIEW_TTL
    {
        return Ok(axum::Json(body.clone()).into_response());
    }
    let now = now_ms();
    let redrives = Redrives::new(state.results.pool().clone());
    let app = state.clone();
    // Without the reports the page still shows everything the broker says.
    let mut replicas = match blocking(move || app.console.replicas()).await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e, "console: replica reports unreadable");
            HashMap::new()
        }
    };
    // The groups' broker reads at once: one slow group does not hold the others up.
    let reads = state.console.groups.iter().map(|w| {
        let app = state.clone();
        let group = w.group.clone();
        blocking(move || app.console.group(&group))
    });
    let reads = futures::future::join_all(reads).await;
    let mut groups = Vec::new();
    for (w, read) in state.console.groups.iter().zip(reads) {
        let reports = replicas.remove(&w.group).unwrap_or_default();
        // One group's broker failure is shown on that group, not the whole page.
        let (broker, dlq_waiting) = match read {
            Ok(b) => {
                let b = b.with_replicas(reports);
                // Dead letters still in the topics and not redriven yet.
                let mut waiting = 0;
                for (topic, p, start, end) in &b.dlq_partitions {
                    waiting +=
                        (end - start).max(0) - redrives.count_in(topic, *p, *start, *end).await?;
                }
                let json = serde_json::to_value(b)
                    .map_err(|e| ApiError::Internal(format!("overview: {e}")))?;
                (json, Some(waiting.max(0)))
            }
            Err(e) => (json!({"error": e.to_string()}), None),
        };
        let runs = state
            .results
            .window(&w.stage, now - LATENCY_WINDOW_MS, now - RATE_WINDOW_MS)
            .await?;
        let health = serde_json::to_value(state.console.verdict(&w.group, now))
            .map_err(|e| ApiError::Internal(format!("verdict: {e}")))?;
        groups.push(json!({
            "group": w.group,
            "stage": w.stage,
            "topics": w.topics,
            "health": health,
            "broker": broker,
            "results": {
                "done_last_minute": runs.recent_done,
                "failed_last_minute": runs.recent_failed,
                "throughput_per_second": per_second(runs.recent_done, RATE_WINDOW_MS),
                "p50_ms": runs.p50_ms,
                "p99_ms": runs.p99_ms,
                "latency_window_s": LATENCY_WINDOW_MS / 1000,
                "latency_runs": runs.done,
                "latency_runs_truncated": runs.truncated,
            },
            "dlq_waiting": dlq_waiting,
        }));
    }
    let body = json!({
        "topic": state.console.topic,
        "now_ms": now,
        "groups": groups,
    });
    *last = Some((Instant::now(), body.clone()));
    Ok(axum::Json(body).into_response())
}

/// `GET /v1/admin/groups/{group}/history`: the group's lag at each sample of the health
/// sampler, oldest first (`--console-history` of them at most).
async fn history(
    State(state): Shared,
    headers: HeaderMap,
    Path(group): Path<String>,
) -> Result<Response, ApiError> {
    admin(&state, &headers).await?;
    watched(&state, &group)?;
    let interval_ms = i64::try_from(state.console.health_interval.as_millis()).unwrap_or(i64::MAX);
    Ok(axum::Json(json!({
        "group": group,
        "interval_ms": interval_ms,
        "kept": state.console.history_len(),
        "points": state.console.lag_history(&group),
    }))
    .into_response())
}

#[derive(Debug, Deserialize)]
struct ListQuery {
    limit: Option<u32>,
    /// Jobs only: a document id's start or a part of a file name.
    q: Option<String>,
}

/// Longest job search.
const MAX_QUERY: usize = 200;

/// The watched group `group`, or 404.
fn watched(state: &AppState, group: &str) -> Result<(), ApiError> {
    state
        .console
        .watched(group)
        .map(|_| ())
        .ok_or_else(|| ApiError::UnknownGroup(group.to_owned()))
}

/// A replay error as the API says it: the broker's or the database's.
fn replay_error(e: docflow_replay::ReplayError) -> ApiError {
    match e {
        docflow_replay::ReplayError::Store(_) => ApiError::unavailable("database", e),
        _ => ApiError::unavailable("broker", e),
    }
}

/// The group's redrive lock, taken, or 409 while a redrive of it runs (`then`: what the
/// caller may do instead).
fn redrive_slot(
    state: &AppState,
    group: &str,
    then: &str,
) -> Result<tokio::sync::OwnedMutexGuard<()>, ApiError> {
    let lock = state
        .console
        .redrive_lock(group)
        .ok_or_else(|| ApiError::UnknownGroup(group.to_owned()))?;
    lock.try_lock_owned()
        .map_err(|_| ApiError::Conflict(format!("a redrive of group {group} is running; {then}")))
}

/// Largest redrive request body.
const MAX_REDRIVE_BODY: usize = 4096;

/// `GET /v1/admin/groups/{group}/dead-letters`.
async fn dead_letters(
    State(state): Shared,
    Path(group): Path<String>,
    Query(q): Query<ListQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin(&state, &headers).await?;
    watched(&state, &group)?;
    let limit = q.limit.unwrap_or(20).clamp(1, MAX_LIST);
    let app = state.clone();
    let g = group.clone();
    let mut letters = blocking(move || app.console.dead_letters(&g, i64::from(limit))).await?;
    letters.sort_by(|a, b| {
        b.timestamp_ms
            .cmp(&a.timestamp_ms)
            .then(b.offset.cmp(&a.offset))
    });
    letters.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let redrives = Redrives::new(state.results.pool().clone());
    let mut out = Vec::with_capacity(letters.len());
    for d in &letters {
        let document = d
            .key
            .as_deref()
            .map(|k| String::from_utf8_lossy(k).into_owned());
        // The event, decoded through the registry as its topic's event (it names the
        // tenant, needed for the job's page); a value that does not decode is shown as a
        // dump of its bytes.
        let processed = d.header_str(h::TOPIC) == Some(state.processed_topic.as_str());
        let (event, tenant, dump) = match &d.payload {
            Some(p) => {
                let decoded = if processed {
                    state
                        .codec
                        .decode::<docflow_events::DocProcessed>(p)
                        .await
                        .map(|e| (json!(e), e.tenant_id))
                } else {
                    state
                        .codec
                        .decode::<docflow_events::DocUploaded>(p)
                        .await
                        .map(|e| (json!(e), e.tenant_id))
                };
                match decoded {
                    Ok((event, tenant)) => (Some(event), Some(tenant), None),
                    Err(e) => (
                        None,
                        None,
                        Some(json!({"error": e.to_string(), "bytes": p.len(), "dump": dump(p)})),
                    ),
                }
            }
            None => (None, None, None),
        };
        let handled = redrives.handled(&d.topic, d.partition, d.offset).await?;
        out.push(json!({
            "topic": d.topic,
            "partition": d.partition,
            "offset": d.offset,
            "dead_lettered_at_ms": d.timestamp_ms,
            "document_id": document,
            "tenant_id": tenant,
            "error_class": d.header_str(h::ERROR_CLASS),
            "error_message": d.header_str(h::ERROR_MESSAGE),
            "attempts": d.header_str(h::ATTEMPTS).and_then(|v| v.parse::<u32>().ok()),
            "original": {
                "topic": d.header_str(h::TOPIC),
                "partition": d.header_str(h::PARTITION).and_then(|v| v.parse::<i32>().ok()),
                "offset": d.header_str(h::OFFSET).and_then(|v| v.parse::<i64>().ok()),
                "timestamp_ms": d.header_str(h::TIMESTAMP).and_then(|v| v.parse::<i64>().ok()),
            },
            "permanent": d.header_str(h::PERMANENT).map(|v| v == "true"),
            "event": event,
            "payload": dump,
            "redrive_count": d.header_str(h::REDRIVE_COUNT).and_then(|v| v.parse::<u32>().ok()).unwrap_or(0),
            "redriven": handled.as_ref().is_some_and(|h| !h.discarded),
            "discarded": handled.as_ref().filter(|h| h.discarded).map(|h| json!({"by": h.by, "at_ms": h.at_ms})),
        }));
    }
    Ok(axum::Json(json!({"group": group, "dead_letters": out})).into_response())
}

/// `?topic=`: which of the group's dead-letter topics (needed only when more than one holds
/// the partition and offset).
#[derive(Debug, Deserialize)]
struct DiscardQuery {
    topic: Option<String>,
}

#[derive(Debug, Deserialize)]
struct DiscardBody {
    /// Who discards it (as they name themselves).
    by: String,
}

/// Longest name a discard records.
const MAX_NAME: usize = 100;

/// `POST /v1/admin/groups/{group}/dead-letters/{partition}/{offset}/discard`
/// (`{"by": "who"}`): marks the dead letter handled without redriving it, who and when
/// recorded; it no longer counts as waiting and no redrive sends it back.
async fn discard(
    State(state): Shared,
    Path((group, partition, offset)): Path<(String, i32, i64)>,
    Query(q): Query<DiscardQuery>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    admin(&state, &headers).await?;
    watched(&state, &group)?;
    let body = axum::body::to_bytes(body, MAX_REDRIVE_BODY)
        .await
        .map_err(|e| ApiError::BadRequest(format!("discard request body: {e}")))?;
    let body: DiscardBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!("a discard takes {{\"by\": \"your name\"}}: {e}"))
    })?;
    let by = body.by.trim();
    if by.is_empty() || by.chars().count() > MAX_NAME || by.chars().any(char::is_control) {
        return Err(ApiError::BadRequest(format!(
            "\"by\" names who discards the dead letter: 1 to {MAX_NAME} characters, no control characters"
        )));
    }
    // Not while a redrive of the group runs: it could send back the dead letter this
    // records as discarded.
    let _running = redrive_slot(&state, &group, "discard when it ends")?;
    let app = state.clone();
    let g = group.clone();
    let named = q.topic.clone();
    let found = tokio::task::spawn_blocking(move || {
        app.console
            .dead_letter_topic_with(&g, named.as_deref(), partition, offset)
    })
    .await
    .map_err(|e| ApiError::Internal(format!("console read: {e}")))?;
    let topic = match found {
        Ok(Some(topic)) => topic,
        Ok(None) => {
            return Err(ApiError::NotFound(format!(
                "no dead-letter topic of group {group} holds a record at partition {partition} offset {offset}"
            )));
        }
        Err(crate::console::DeadLetterAt::Broker(e)) => return Err(replay_error(e)),
        Err(e @ crate::console::DeadLetterAt::NotTheGroups(_)) => {
            return Err(ApiError::NotFound(e.to_string()));
        }
        Err(e @ crate::console::DeadLetterAt::Ambiguous(_)) => {
            return Err(ApiError::Conflict(e.to_string()));
        }
    };
    let redrives = Redrives::new(state.results.pool().clone());
    let now = now_ms();
    let discarded = redrives
        .discard(&topic, partition, offset, &group, by, now)
        .await?;
    let handled = redrives.handled(&topic, partition, offset).await?;
    tracing::info!(%group, partition, offset, by, discarded, "console: dead letter discarded");
    // The next overview shows the new count of dead letters waiting.
    *state.console.last.lock().await = None;
    Ok(axum::Json(json!({
        "group": group,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "discarded": discarded,
        "handled": handled.map(|h| json!({
            "action": if h.discarded { "discarded" } else { "redriven" },
            "by": h.by,
            "at_ms": h.at_ms,
        })),
    }))
    .into_response())
}

/// Most bytes of an undecodable dead letter shown.
const DUMP_BYTES: usize = 256;

/// `bytes` (the first [`DUMP_BYTES`]) as hex/ASCII lines, 16 bytes each: `0000  48 65 …  He…`.
fn dump(bytes: &[u8]) -> String {
    let mut out = String::new();
    for (i, line) in bytes.chunks(16).take(DUMP_BYTES / 16).enumerate() {
        let hex: Vec<String> = line.iter().map(|b| format!("{b:02x}")).collect();
        let ascii: String = line
            .iter()
            .map(|&b| {
                if b.is_ascii_graphic() || b == b' ' {
                    char::from(b)
                } else {
                    '.'
                }
            })
            .collect();
        out.push_str(&format!("{:04x}  {:<47}  {ascii}\n", i * 16, hex.join(" ")));
    }
    if bytes.len() > DUMP_BYTES {
        out.push_str(&format!("… {} more bytes\n", bytes.len() - DUMP_BYTES));
    }
    out
}

#[derive(Debug, Default, Deserialize)]
struct RedriveBody {
    error_class: Option<String>,
}

/// `POST /v1/admin/groups/{group}/dead-letters/redrive`: one at a time per group (409
/// while one runs). The redrive runs on a task of its own, so a client that goes away does
/// not stop it between a dead letter's copy and the record that it was redriven.
async fn redrive(
    State(state): Shared,
    Path(group): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    admin(&state, &headers).await?;
    watched(&state, &group)?;
    // Read only after the token was checked, and only a little.
    let body = axum::body::to_bytes(body, MAX_REDRIVE_BODY)
        .await
        .map_err(|e| ApiError::BadRequest(format!("redrive request body: {e}")))?;
    let body: RedriveBody = if body.iter().all(u8::is_ascii_whitespace) {
        RedriveBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::BadRequest(format!("invalid redrive request: {e}")))?
    };
    let running = redrive_slot(&state, &group, "try again when it ends")?;
    // One redrive per topic the group reads (a dead-letter topic each).
    let runs: Vec<docflow_replay::DlqArgs> = state
        .console
        .topics_of(&group)
        .into_iter()
        .map(|topic| docflow_replay::DlqArgs {
            group: group.clone(),
            topic,
            error_class: body.error_class.clone(),
            from: None,
            to: None,
            max_redrives: 3,
            execute: true,
            kafka: state.kafka.clone(),
            database: state.database.clone(),
        })
        .collect();
    tracing::info!(%group, "console: redriving the group's dead letters");
    let app = state.clone();
    let task = tokio::spawn(async move {
        let _running = running;
        let redrives = Redrives::new(app.results.pool().clone());
        let mut report = docflow_replay::DlqReport::default();
        for args in &runs {
            match docflow_replay::redrive_with(args, &redrives, &app.producer).await {
                Ok(r) => report.add(&r),
                Err(e) => return Err((e, args.topic.clone(), report)),
            }
        }
        Ok(report)
    });
    let report = task
        .await
        .map_err(|e| ApiError::Internal(format!("redrive task: {e}")))?
        .map_err(|(e, topic, done)| {
            if done.read == 0 {
                return replay_error(e);
            }
            // A topic failed after others were redriven: say what was done.
            let dependency = match e {
                docflow_replay::ReplayError::Store(_) => "database",
                _ => "broker",
            };
            ApiError::unavailable(
                dependency,
                format!(
                    "redriving the dead letters of {topic}: {e}; the group's topics before it: {}",
                    done.to_string().trim_end()
                ),
            )
        })?;
    // The next overview shows the new depth.
    *state.console.last.lock().await = None;
    Ok((
        StatusCode::OK,
        axum::Json(json!({
            "group": group,
            "read": report.read,
            "redriven": report.redriven,
            "filtered": report.filtered,
            "already_redriven": report.already_redriven,
            "exhausted": report.exhausted,
            "by_class": report.by_class,
            "summary": report.to_string().trim_end(),
        })),
    )
        .into_response())
}

/// `GET /v1/admin/jobs`.
async fn jobs(
    State(state): Shared,
    Query(q): Query<ListQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin(&state, &headers).await?;
    let limit = q.limit.unwrap_or(50).clamp(1, MAX_LIST);
    let jobs = match q.q.as_deref().map(str::trim).filter(|q| !q.is_empty()) {
        Some(query) if query.chars().count() > MAX_QUERY => {
            return Err(ApiError::BadRequest(format!(
                "q is a document id's start or part of a file name: at most {MAX_QUERY} characters"
            )));
        }
        Some(query) => state.jobs.find(query, limit).await?,
        None => state.jobs.recent(limit).await?,
    };
    let keys: Vec<(String, String)> = jobs
        .iter()
        .map(|j| (j.tenant_id.clone(), j.job_id.clone()))
        .collect();
    let runs = state.results.latest_runs_of(&keys).await?;
    let mut out = Vec::with_capacity(jobs.len());
    for (job, runs) in jobs.iter().zip(runs) {
        let mut body = job_body(&state, job, &runs, &[])?;
        body["tenant_id"] = json!(job.tenant_id);
        if let Some(o) = body.as_object_mut() {
            o.remove("text");
            o.remove("summary");
            o.remove("thumbnail_url");
        }
        out.push(body);
    }
    Ok(axum::Json(json!({"jobs": out})).into_response())
}

/// `GET /v1/admin/jobs/{tenant}/{id}`.
async fn job(
    State(state): Shared,
    Path((tenant, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin(&state, &headers).await?;
    let mut body: Value = job_json(&state, &tenant, &id).await?;
    body["tenant_id"] = json!(tenant);
    if !body["thumbnail_url"].is_null() {
        body["thumbnail_url"] = json!(format!(
            "/v1/admin/jobs/{}/{}/thumbnail",
            path_segment(&tenant),
            path_segment(&id)
        ));
    }
    Ok(axum::Json(body).into_response())
}

/// `GET /v1/admin/jobs/{tenant}/{id}/thumbnail`.
async fn thumbnail(
    State(state): Shared,
    Path((tenant, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    admin(&state, &headers).await?;
    thumbnail_of(&state, &tenant, &id, &headers).await
}

/// `s` percent-encoded as one URL path segment (RFC 3986 unreserved characters kept).
fn path_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{DUMP_BYTES, dump, path_segment};

    #[test]
    fn undecodable_values_are_dumped_as_hex_and_ascii() {
        let d = dump(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR and more text");
        let lines: Vec<&str> = d.lines().collect();
        assert_eq!(
            lines[0],
            "0000  89 50 4e 47 0d 0a 1a 0a 00 00 00 0d 49 48 44 52  .PNG........IHDR"
        );
        assert!(lines[1].starts_with("0010  20 61 6e 64"), "{d}");
        assert!(lines[1].ends_with(" and more text"), "{d}");
        let long = dump(&[0u8; 1000]);
        assert_eq!(long.lines().count(), DUMP_BYTES / 16 + 1);
        assert!(long.ends_with("… 744 more bytes\n"), "{long}");
    }

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(path_segment("acme-1_x.y~"), "acme-1_x.y~");
        assert_eq!(path_segment("a b/c?d%é"), "a%20b%2Fc%3Fd%25%C3%A9");
    }
}
