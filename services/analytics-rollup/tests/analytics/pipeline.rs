//! The three consumer groups of `doc.uploaded` are independent: with thumbnails stopped,
//! analytics and ocr-embeddings keep up while thumbnails' lag grows; restarted, it catches
//! up. Uploads go through the real ingest API; the rollup is read back through
//! `GET /v1/analytics`.

use std::time::Duration;

use docflow_events::document_id;
use docflow_events::stages::{OCR_EMBEDDINGS, THUMBNAILS};
use docflow_stack::{Stack, workspace_root};
use reqwest::StatusCode;
use serde_json::Value;

use crate::support::metric;

const ACME: &str = "tok-acme";
const OTHER: &str = "tok-other";

fn sample(name: &str) -> Vec<u8> {
    std::fs::read(workspace_root().join("samples").join(name)).unwrap()
}

async fn analytics(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    query: &str,
) -> (StatusCode, Value) {
    let r = http
        .get(format!("{base}/v1/analytics?{query}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (r.status(), r.json().await.unwrap())
}

/// Whether job `id`'s stage `stage` is done.
async fn stage_done(http: &reqwest::Client, base: &str, id: &str, stage: &str) -> bool {
    let job: Value = http
        .get(format!("{base}/v1/jobs/{id}"))
        .bearer_auth(ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    job["stages"].as_array().is_some_and(|s| {
        s.iter()
            .any(|s| s["stage"] == stage && s["status"] == "done")
    })
}

async fn eventually<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_are_independent_and_the_api_shows_the_rollup() {
    let mut stack = Stack::builder()
        .partitions(2)
        .token(ACME, "acme")
        .token(OTHER, "other")
        .ingest()
        .stage("thumbnails")
        .stage("ocr-embeddings")
        .start()
        .await
        .unwrap();
    let bed_group = stack.group("analytics-rollup");
    let logs = tempfile_dir();
    let metrics_port = docflow_stack::free_port().unwrap();
    let log = std::fs::File::create(logs.join("analytics.log")).unwrap();
    let mut rollup = std::process::Command::new(env!("CARGO_BIN_EXE_docflow-analytics-rollup"))
        .args([
            "--kafka-bootstrap-servers",
            &stack.broker.bootstrap_servers(),
            "--schema-registry-url",
            &stack.registry.url(),
            "--database-url",
            &stack.database_url,
            "--topic",
            &stack.topics.uploaded,
            "--processed-topic",
            &stack.topics.processed,
            "--group",
            &bed_group,
            "--metrics-listen",
            &format!("127.0.0.1:{metrics_port}"),
        ])
        .env("RUST_LOG", "info,librdkafka=warn,rdkafka=warn")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let base = stack.ingest_url().to_owned();
    let http = reqwest::Client::new();
    let upload = |bytes: Vec<u8>| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let r = http
                .post(format!("{base}/v1/documents"))
                .bearer_auth(ACME)
                .body(bytes)
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "{}", r.status());
        }
    };

    let before = ["invoice-acme.pdf", "letter-renewal.pdf"].map(sample);
    for doc in &before {
        upload(doc.clone()).await;
    }
    for doc in &before {
        let id = document_id(doc);
        for stage in [THUMBNAILS, OCR_EMBEDDINGS] {
            eventually(&format!("{stage} of {id}"), Duration::from_secs(60), || {
                stage_done(&http, &base, &id, stage)
            })
            .await;
        }
    }

    // Thumbnails stops; two more uploads.
    assert!(stack.signal_shutdown(THUMBNAILS));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let during = ["report-q3.pdf", "scan-delivery-note.png"].map(sample);
    for doc in &during {
        upload(doc.clone()).await;
    }
    // Analytics and ocr-embeddings keep up ...
    eventually(
        "4 uploads in the rollup",
        Duration::from_secs(60),
        || async {
            let (_, body) = analytics(&http, &base, ACME, "granularity=day").await;
            body["totals"]["documents"] == 4
        },
    )
    .await;
    for doc in &during {
        let id = document_id(doc);
        eventually(&format!("ocr of {id}"), Duration::from_secs(90), || {
            stage_done(&http, &base, &id, OCR_EMBEDDINGS)
        })
        .await;
    }
    let lag_url = format!("http://127.0.0.1:{metrics_port}/metrics");
    eventually("analytics' lag at 0", Duration::from_secs(30), || async {
        let text = reqwest::get(&lag_url).await.unwrap().text().await.unwrap();
        text.contains("docflow_consumer_lag_records")
            && metric(&text, "docflow_consumer_lag_records", &[]) == 0.0
    })
    .await;
    // ... while thumbnails' lag is the two documents it has not seen.
    let thumbs_group = stack.group(THUMBNAILS);
    let uploaded = stack.topics.uploaded.clone();
    let committed = stack.committed(&thumbs_group, &uploaded).await.unwrap();
    assert_eq!(4 - committed, 2, "thumbnails is 2 records behind");
    for doc in &during {
        assert!(!stage_done(&http, &base, &document_id(doc), THUMBNAILS).await);
    }

    // Restarted, it catches up.
    stack.start_named("thumbnails").await.unwrap();
    for doc in &during {
        let id = document_id(doc);
        eventually(
            &format!("thumbnail of {id}"),
            Duration::from_secs(60),
            || stage_done(&http, &base, &id, THUMBNAILS),
        )
        .await;
    }
    eventually("thumbnails' lag at 0", Duration::from_secs(30), || async {
        stack.committed(&thumbs_group, &uploaded).await.unwrap() == 4
    })
    .await;

    // The rollup, per tenant: every stage result counted once.
    eventually(
        "8 stage results in the rollup",
        Duration::from_secs(30),
        || async {
            let (_, body) = analytics(&http, &base, ACME, "granularity=day").await;
            body["totals"]["stages"][THUMBNAILS]["OK"] == 4
                && body["totals"]["stages"][OCR_EMBEDDINGS]["OK"] == 4
        },
    )
    .await;
    let (status, body) = analytics(&http, &base, ACME, "granularity=hour").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["tenant"], "acme");
    let bytes: usize = before.iter().chain(&during).map(Vec::len).sum();
    assert_eq!(body["totals"]["bytes"], bytes as i64, "{body}");
    assert_eq!(
        body["totals"]["by_content_type"]["application/pdf"]["documents"], 3,
        "{body}"
    );
    assert_eq!(
        body["totals"]["by_content_type"]["image/png"]["documents"], 1,
        "{body}"
    );
    assert_eq!(body["totals"]["rollup_dead_lettered"], 0);
    assert!(body["totals"].get("dead_lettered").is_none(), "{body}");
    assert!(!body["buckets"].as_array().unwrap().is_empty());
    // Another tenant sees none of it; bad queries are 400 with a reason.
    let (_, other) = analytics(&http, &base, OTHER, "granularity=day").await;
    assert_eq!(other["totals"]["documents"], 0, "{other}");
    assert!(other["buckets"].as_array().unwrap().is_empty());
    for bad in [
        "granularity=week",
        "from=yesterday",
        "from=2026-12-04T00:00:00Z&to=2026-12-03T00:00:00Z",
        "from=2000-01-01T00:00:00Z",
    ] {
        let (status, body) = analytics(&http, &base, ACME, bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{bad}: {body}"
        );
    }
    let r = http
        .get(format!("{base}/v1/analytics"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    let _ = rollup.kill();
    let _ = rollup.wait();
    let _ = std::fs::remove_dir_all(&logs);
    stack.stop().await.unwrap();
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(docflow_stack::unique_name("analytics-pipeline"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
