//! `GET /readyz`: whether this replica can take an upload now. It checks what an upload
//! needs, at once and each within [`CHECK_TIMEOUT`]: the database answers, the object store
//! takes a staged file, and the broker serves metadata for the upload topic. `200` with
//! every check `ok`, else `503` with Retry-After and each failing check's reason, so a load
//! balancer stops sending uploads to a replica that would answer them 503.
//! (`/healthz` is liveness: the process serves HTTP.)

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rdkafka::producer::Producer;
use serde_json::json;

use crate::AppState;

/// Longest one check may take.
pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

async fn within<F>(check: F) -> Result<(), String>
where
    F: std::future::Future<Output = Result<(), String>>,
{
    tokio::time::timeout(CHECK_TIMEOUT, check)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {CHECK_TIMEOUT:?}")))
}

async fn broker(state: &AppState) -> Result<(), String> {
    let (producer, topic) = (state.producer.clone(), state.topic.clone());
    tokio::task::spawn_blocking(move || {
        let md = producer
            .client()
            .fetch_metadata(Some(&topic), CHECK_TIMEOUT)
            .map_err(|e| e.to_string())?;
        match md.topics().iter().find(|t| t.name() == topic) {
            Some(t) if t.error().is_none() && !t.partitions().is_empty() => Ok(()),
            Some(t) => Err(format!(
                "topic {topic}: {}",
                t.error()
                    .map_or("no partitions".to_owned(), |e| format!("{e:?}"))
            )),
            None => Err(format!("topic {topic} not in metadata")),
        }
    })
    .await
    .map_err(|e| e.to_string())?
}

/// The readiness answer.
pub(crate) async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    let (database, objects, broker) = tokio::join!(
        within(async { state.jobs.ping().await.map_err(|e| e.to_string()) }),
        within(async { state.blobs.probe().await.map_err(|e| e.to_string()) }),
        within(broker(&state)),
    );
    let ready = database.is_ok() && objects.is_ok() && broker.is_ok();
    let show = |r: Result<(), String>| r.err().unwrap_or_else(|| "ok".to_owned());
    let body = json!({
        "ready": ready,
        "checks": {"database": show(database), "object_store": show(objects), "broker": show(broker)},
        // Informational: until armed, `?wait=` answers come from polling the store.
        "wakeups": if state.wakeups.is_armed() { "armed" } else { "starting" },
    });
    if ready {
        (StatusCode::OK, axum::Json(body)).into_response()
    } else {
        let mut resp = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        resp
    }
}
