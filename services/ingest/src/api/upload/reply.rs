//! The answer to an upload: `202` with the job id; with `?wait=`, `200` with the job's
//! results once every stage finished in time.

use std::time::{Duration, Instant};

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiError;
use crate::jobs::{all_finished, job_body, job_pages};
use crate::metrics::WaitCause;

/// The `?wait=` of a request, capped to `max`; `None` for no wait.
pub(super) fn parse_wait(raw: Option<&str>, max: Duration) -> Result<Option<Duration>, ApiError> {
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

/// `202` with the job id; or, when the request asked to wait and every stage finished in
/// time, `200` with the job's results.
pub(super) async fn reply(
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
    let mut cause = WaitCause::First;
    loop {
        state.metrics.wait_read(cause);
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
            () = &mut woken => cause = WaitCause::Event,
            () = tokio::time::sleep(state.wait_poll.min(left)) => cause = WaitCause::Poll,
            // Shutting down: answer with the job id now rather than hold the shutdown.
            () = state.stopping.cancelled() => return Ok(None),
        }
    }
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
