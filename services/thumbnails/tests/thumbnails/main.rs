//! The thumbnails stage end to end over the real broker, registry, database and object
//! store, with documents uploaded through the real ingest API.

// Test code: panicking on unexpected errors is the point.
#![allow(clippy::unwrap_used, missing_debug_implementations, unreachable_pub)]

use std::time::Duration;

use docflow_events::stages::THUMBNAILS;
use docflow_events::{
    DocProcessed, DocUploaded, EventCodec, Outcome, document_id, idempotency_key, topics,
};
use docflow_runtime::producer::{idempotent_producer, send_event};
use docflow_runtime::trace::TraceContext;
use docflow_stack::pdfium_library;
use docflow_store::{ResultStore, StageStatus};
use reqwest::StatusCode;
use serde_json::Value;

mod console;
mod health;
mod new_stage;
mod otel;

const TOKEN: &str = "tok-alice";

/// The stack harness with ingest (tenant `alice`) and, unless asked otherwise, the
/// thumbnails stage in process.
struct Stack {
    stack: docflow_stack::Stack,
    uploaded: String,
    processed: String,
    group: String,
    base: String,
    http: reqwest::Client,
}

impl std::ops::Deref for Stack {
    type Target = docflow_stack::Stack;
    fn deref(&self) -> &Self::Target {
        &self.stack
    }
}

impl Stack {
    /// Broker, registry, database, ingest API and the thumbnails stage in process.
    async fn start() -> Self {
        let mut s = Self::start_without_stage().await;
        s.stack.start_named("thumbnails").await.unwrap();
        s
    }

    async fn start_without_stage() -> Self {
        Self::start_without_stage_with(|_| {}).await
    }

    /// [`Stack::start_without_stage`] with `tweak` applied to ingest's configuration.
    async fn start_without_stage_with(
        tweak: impl FnOnce(&mut docflow_ingest::Config) + Send + 'static,
    ) -> Self {
        // `RUST_LOG=info cargo nextest run ...` shows the services' logs of a failing test.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let stack = docflow_stack::Stack::builder()
            .partitions(3)
            .token(TOKEN, "alice")
            .ingest_with(tweak)
            .start()
            .await
            .unwrap();
        Stack {
            uploaded: stack.topics.uploaded.clone(),
            processed: stack.topics.processed.clone(),
            group: stack.group(THUMBNAILS),
            base: stack.ingest_url().to_owned(),
            stack,
            http: reqwest::Client::new(),
        }
    }

    async fn post(&self, query: &str, body: Vec<u8>) -> (StatusCode, Value) {
        let r = self
            .http
            .post(format!("{}/v1/documents{query}", self.base))
            .bearer_auth(TOKEN)
            .body(body)
            .send()
            .await
            .unwrap();
        (r.status(), r.json().await.unwrap())
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
    }

    /// Every record of `topic` (all partitions), read from the beginning.
    async fn records(&self, topic: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.stack.records(topic).await.unwrap()
    }

    /// Waits until the stage's group has committed `n` records of the upload topic.
    async fn committed(&self, n: i64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let got = self
                .stack
                .committed(&self.group, &self.uploaded)
                .await
                .unwrap();
            if got >= n {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "group committed {got} of {n}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The stage as a real process (`docflow-thumbnails`), two workers.
    fn spawn_stage_process(&self) -> std::process::Child {
        std::process::Command::new(env!("CARGO_BIN_EXE_docflow-thumbnails"))
            .args(self.stage_flags(THUMBNAILS))
            .arg("--pdfium-lib")
            .arg(pdfium_library())
            .args(["--workers", "2"])
            .args(["--session-timeout", "6s"])
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
    }

    /// Polls `records(topic)` until it holds at least `n` records.
    async fn wait_records(&self, topic: &str, n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.stack
            .wait_records(topic, n, Duration::from_secs(60))
            .await
            .unwrap()
    }

    async fn finish(self) {
        self.stack.stop().await.unwrap();
    }
}

fn sample(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/../../samples/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// Upload with `?wait=`: 200 with a done thumbnails stage; the PNG is served with an ETag;
/// `doc.processed` announces it once, even when the document is delivered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_renders_serves_and_announces_once() {
    let s = Stack::start().await;
    let bytes = sample("report-q3.pdf");
    let id = document_id(&bytes);

    let (status, job) = s.post("?wait=30s&filename=report.pdf", bytes.clone()).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["job_id"], id.as_str());
    assert_eq!(job["pipeline"], "done", "{job}");
    let stage = &job["stages"][0];
    assert_eq!(stage["stage"], THUMBNAILS);
    assert_eq!(stage["status"], "done");
    assert_eq!(stage["stage_version"], 1);
    assert_eq!(stage["attempts"], 1);
    assert!(stage["duration_ms"].as_i64().unwrap() >= 0);
    assert!(stage["output"]["pages"].as_i64().unwrap() >= 1);
    let url = job["thumbnail_url"].as_str().unwrap();
    assert_eq!(url, format!("/v1/documents/{id}/thumbnail"));

    let r = s.get(url).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "image/png");
    let etag = r.headers()["etag"].to_str().unwrap().to_owned();
    assert_eq!(
        etag,
        format!("\"{}\"", idempotency_key(&bytes, THUMBNAILS, 1))
    );
    let png = r.bytes().await.unwrap();
    let img = image::load_from_memory(&png).unwrap();
    assert_eq!(img.width().max(img.height()), 256);
    let r = s
        .http
        .get(format!("{}{url}", s.base))
        .bearer_auth(TOKEN)
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);

    // Delivered again (reprocess produces a second doc.uploaded): no new row, no new event.
    let (status, _) = s.post("?reprocess=true", bytes.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    s.committed(2).await;
    let processed = s.records(&s.processed).await;
    assert_eq!(processed.len(), 1, "announced exactly once");
    assert_eq!(processed[0].0, id.as_bytes());
    let codec = EventCodec::from_url(&s.registry.url(), Duration::from_secs(5)).unwrap();
    let ev: DocProcessed = codec.decode(&processed[0].1).await.unwrap();
    assert_eq!(
        (
            ev.document_id.as_str(),
            ev.tenant_id.as_str(),
            ev.stage.as_str()
        ),
        (id.as_str(), "alice", THUMBNAILS)
    );
    assert_eq!(ev.outcome, Outcome::Ok);
    let store = ResultStore::new(docflow_store::open(&s.database_url, 2).await.unwrap());
    let runs = store.latest_runs("alice", &id).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].status, StageStatus::Done);
    assert!(runs[0].event_sent_at_ms.is_some());
    assert_eq!(ev.result_ref, runs[0].result_ref);

    // Images go through the same path.
    let img = image::RgbImage::from_fn(600, 300, |x, _| image::Rgb([(x % 256) as u8, 10, 200]));
    let mut png = Vec::new();
    image::DynamicImage::ImageRgb8(img)
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    let (status, job) = s.post("?wait=30s", png).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["stages"][0]["output"]["width"], 256);
    assert_eq!(job["stages"][0]["output"]["height"], 128);
    s.finish().await;
}

/// `?wait=` is answered by the stage's `doc.processed` announcement, not by polling: with
/// the result store's fallback read set to once a minute, only the listener can answer
/// these waits within their 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_is_woken_by_the_stage_announcement() {
    let mut s = Stack::start_without_stage_with(|c| c.wait_poll = Duration::from_secs(60)).await;
    s.stack.start_named("thumbnails").await.unwrap();
    // The listener reads every partition from a known offset before we count on it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let ready: Value = s.get("/readyz").await.json().await.unwrap();
        if ready["wakeups"] == "armed" {
            assert_eq!(ready["ready"], true, "{ready}");
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{ready}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for name in ["report-q3.pdf", "invoice-acme.pdf", "letter-renewal.pdf"] {
        let (status, job) = s.post("?wait=30s", sample(name)).await;
        assert_eq!(status, StatusCode::OK, "{name}: {job}");
        assert_eq!(job["stages"][0]["status"], "done");
    }
    let metrics = s.get("/metrics").await.text().await.unwrap();
    let count = |cause: &str| -> f64 {
        metrics
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    "docflow_ingest_wait_reads_total{{cause=\"{cause}\"}}"
                ))
            })
            .and_then(|l| l.rsplit(' ').next())
            .map_or(0.0, |v| v.parse().unwrap())
    };
    assert!(count("event") >= 3.0, "{metrics}");
    assert_eq!(count("poll"), 0.0, "{metrics}");
    s.finish().await;
}

/// A document ingest accepts but the stage cannot render: recorded failed, dead-lettered
/// with provenance, reported by the job, and the partition moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrenderable_document_is_dead_lettered_and_reported() {
    let s = Stack::start().await;
    // A PNG signature with a truncated body: sniffed as PNG, undecodable.
    let mut bad = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    bad.extend_from_slice(&[0u8; 7]);
    let id = document_id(&bad);
    let (status, job) = s.post("?wait=30s", bad).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["pipeline"], "failed");
    // The stage layer records the run once the dead-letter write is acknowledged
    // (`dead_lettered`); the loop tolerates a `failed` row before it.
    let mut job = job;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while job["stages"][0]["status"] != "dead_lettered" {
        assert_eq!(job["stages"][0]["status"], "failed", "{job}");
        assert!(tokio::time::Instant::now() < deadline, "{job}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        job = s.get(&format!("/v1/jobs/{id}")).await.json().await.unwrap();
    }
    assert!(
        job["stages"][0]["error"]
            .as_str()
            .unwrap()
            .contains("undecodable image"),
        "{job}"
    );
    assert_eq!(job["thumbnail_url"], Value::Null);
    let r = s.get(&format!("/v1/documents/{id}/thumbnail")).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"], "not_ready");

    let dlq = s
        .wait_records(&topics::dead_letter(&s.uploaded, &s.group), 1)
        .await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].0, id.as_bytes());
    let processed = s.wait_records(&s.processed, 1).await;
    assert_eq!(processed.len(), 1);
    let codec = EventCodec::from_url(&s.registry.url(), Duration::from_secs(5)).unwrap();
    let ev: DocProcessed = codec.decode(&processed[0].1).await.unwrap();
    assert_eq!(ev.outcome, Outcome::DeadLettered);

    // The partition moved on: a good document after it is done.
    let (status, job) = s.post("?wait=30s", sample("invoice-acme.pdf")).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["pipeline"], "done");
    s.finish().await;
}

/// Events from other producers are handled on the same terms as ingest's, so a forged one
/// cannot cross tenants: an event for tenant `mallory` that points at `alice`'s blob is
/// dead-lettered as `tenant_mismatch` (recorded under mallory, never `done`), and the
/// partition moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_event_for_another_tenants_blob_is_dead_lettered() {
    let s = Stack::start().await;
    let bytes = sample("invoice-acme.pdf");
    let id = document_id(&bytes);
    let (status, job) = s.post("?wait=30s", bytes.clone()).await;
    assert_eq!(
        (status, job["pipeline"].as_str()),
        (StatusCode::OK, Some("done")),
        "{job}"
    );

    let blobs = docflow_store::Blobs::open(&s.objects).unwrap();
    let forged = DocUploaded {
        document_id: id.clone(),
        tenant_id: "mallory".into(),
        object_uri: blobs.uri(&docflow_store::Blobs::key(["alice", &id])),
        content_type: "application/pdf".into(),
        size_bytes: bytes.len() as i64,
        original_file_name: None,
        uploaded_at: 0,
        producer_version: "mallory/1".into(),
    };
    let codec = EventCodec::from_url(&s.registry.url(), Duration::from_secs(5)).unwrap();
    let producer = idempotent_producer(&s.kafka(), "forger").unwrap();
    send_event(
        &producer,
        &codec,
        &s.uploaded,
        &id,
        &forged,
        &TraceContext::new_root(),
        Duration::from_secs(10),
    )
    .await
    .unwrap();

    let dlq = s
        .wait_records(&topics::dead_letter(&s.uploaded, &s.group), 1)
        .await;
    assert_eq!(dlq.len(), 1);
    let store = ResultStore::new(docflow_store::open(&s.database_url, 2).await.unwrap());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let run = loop {
        if let Some(run) = store.get("mallory", &id, THUMBNAILS, 1).await.unwrap() {
            break run;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no run recorded for mallory"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(run.status, StageStatus::DeadLettered);
    assert!(
        run.error.as_deref().unwrap().contains("tenant_mismatch"),
        "{run:?}"
    );
    assert_eq!(run.result_ref, None);

    // The partition moved on.
    let (status, job) = s.post("?wait=30s", sample("report-q3.pdf")).await;
    assert_eq!(
        (status, job["pipeline"].as_str()),
        (StatusCode::OK, Some("done")),
        "{job}"
    );
    s.finish().await;
}

/// A PDF of 634 bytes whose page draws a form XObject that draws itself twice: pdfium
/// allocates until the process dies.
fn self_referencing_pdf() -> Vec<u8> {
    let stream = |dict: &str, content: &str| {
        format!(
            "<< {dict} /Length {} >>\nstream\n{content}\nendstream",
            content.len()
        )
    };
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
         /Resources << /XObject << /X 4 0 R >> >> /Contents 5 0 R >>"
            .to_owned(),
        stream(
            "/Type /XObject /Subtype /Form /BBox [0 0 612 792] \
             /Resources << /XObject << /X 4 0 R >> >>",
            "/X Do /X Do",
        ),
        stream("", "/X Do"),
    ];
    docflow_stack::pdf::assemble(&objects)
}

/// Rendering runs in worker processes with a memory limit: the self-referencing PDF kills
/// one worker (not the stage), is dead-lettered as `memory_limit`, and the next document
/// renders in a fresh worker. The limit comes from the stage's budget: 1 GiB for 4 workers
/// is 256 MiB each (`--worker-memory` stays at its 1 GiB default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdf_that_exhausts_memory_kills_only_its_worker() {
    let mut s = Stack::start_without_stage().await;
    s.stack
        .start_stage::<docflow_thumbnails::Thumbnails>(|c| {
            c.isolation.stage_memory = 1 << 30;
            c.stage.consumer.workers = 4;
        })
        .await
        .unwrap();
    let bomb = self_referencing_pdf();
    let started = std::time::Instant::now();
    let (status, job) = s.post("?wait=60s", bomb).await;
    assert_eq!(status, StatusCode::OK, "{job}");
    assert_eq!(job["pipeline"], "failed", "{job}");
    let stage = &job["stages"][0];
    assert_eq!(stage["status"], "dead_lettered", "{job}");
    assert!(
        stage["error"].as_str().unwrap().contains("memory_limit"),
        "{job}"
    );
    println!("dead-lettered in {:?}", started.elapsed());

    for name in ["invoice-acme.pdf", "report-q3.pdf"] {
        let (status, job) = s.post("?wait=30s", sample(name)).await;
        assert_eq!(
            (status, job["pipeline"].as_str()),
            (StatusCode::OK, Some("done")),
            "{job}"
        );
    }
    s.finish().await;
}

/// `kill -9` of the stage process in the middle of a stream, then a restart: every document
/// ends with exactly one done run, one PNG and an acknowledged `doc.processed`; whatever the
/// crash interrupted is redone, nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_stream_loses_nothing_and_writes_nothing_twice() {
    let s = Stack::start_without_stage().await;
    const DOCS: usize = 40;
    let mut ids = std::collections::HashSet::new();
    for i in 0..DOCS {
        // Page-sized PNGs (~20 ms to render in release, more here) so the kill lands mid-stream.
        let img = image::RgbImage::from_fn(1200, 1600, |x, y| {
            image::Rgb([(x % 251) as u8, (y % 241) as u8, (i % 256) as u8])
        });
        let mut png = Vec::new();
        image::DynamicImage::ImageRgb8(img)
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        ids.insert(document_id(&png));
        let (status, body) = s.post("", png).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    }
    let store = ResultStore::new(docflow_store::open(&s.database_url, 2).await.unwrap());
    let done = |store: ResultStore, ids: std::collections::HashSet<String>| async move {
        let mut n = 0;
        for id in &ids {
            if let Some(run) = store.get("alice", id, THUMBNAILS, 1).await.unwrap()
                && run.status == StageStatus::Done
            {
                n += 1;
            }
        }
        n
    };

    let mut child = s.spawn_stage_process();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let n = done(store.clone(), ids.clone()).await;
        if n >= 3 {
            assert!(
                n < DOCS,
                "the stream finished before the kill; make it longer"
            );
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let at_kill = done(store.clone(), ids.clone()).await;

    let mut child = s.spawn_stage_process();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while done(store.clone(), ids.clone()).await < DOCS {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every document done"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Every run acknowledged its event; one PNG per document.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut unsent = 0;
        for id in &ids {
            let run = store
                .get("alice", id, THUMBNAILS, 1)
                .await
                .unwrap()
                .unwrap();
            if run.event_sent_at_ms.is_none() {
                unsent += 1;
            }
        }
        if unsent == 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{unsent} events unsent"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let pngs = std::fs::read_dir(s.objects.join("alice/derived/thumbnails/v1"))
        .unwrap()
        .count();
    assert_eq!(
        pngs, DOCS,
        "one PNG per document, however often it was rendered"
    );
    let events = s.records(&s.processed).await;
    let announced: std::collections::HashSet<Vec<u8>> =
        events.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(announced.len(), DOCS, "every document announced");
    // At least once: only a record caught between its ack and its mark can be announced
    // twice, so duplicates are bounded by what was in flight at the kill (two workers).
    assert!(
        events.len() - DOCS <= 2,
        "{} duplicate events (killed at {at_kill} done)",
        events.len() - DOCS
    );
    s.finish().await;
}
