//! The ingest API over real HTTP against the real broker, registry and database.

// Test code: panicking on unexpected errors is the point.
#![allow(clippy::unwrap_used, missing_debug_implementations, unreachable_pub)]

use std::time::Duration;

use docflow_events::{DocUploaded, EventCodec, document_id};
use docflow_stack::{Storage, unique_name};
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use reqwest::StatusCode;
use serde_json::Value;

/// The stack harness with ingest (small limits) and two tenants' tokens.
struct Stack {
    stack: docflow_stack::Stack,
    base: String,
    topic: String,
    http: reqwest::Client,
}

impl std::ops::Deref for Stack {
    type Target = docflow_stack::Stack;
    fn deref(&self) -> &Self::Target {
        &self.stack
    }
}

impl std::ops::DerefMut for Stack {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.stack
    }
}

const ALICE: &str = "tok-alice";
const BOB: &str = "tok-bob";

impl Stack {
    async fn start(storage: Storage) -> Self {
        Self::start_tweaked(storage, |_| {}).await
    }

    /// With `tweak` applied to ingest's configuration after the test defaults.
    async fn start_tweaked(
        storage: Storage,
        tweak: impl FnOnce(&mut docflow_ingest::Config) + Send + 'static,
    ) -> Self {
        let stack = docflow_stack::Stack::builder()
            .storage(storage)
            .partitions(3)
            .token(ALICE, "alice")
            .token(BOB, "bob")
            .ingest_with(|config| {
                config.max_upload_bytes = 4096;
                config.max_pages = 10;
                config.produce_timeout = Duration::from_secs(3);
                tweak(config);
            })
            .start()
            .await
            .unwrap();
        Stack {
            base: stack.ingest_url().to_owned(),
            topic: stack.topics.uploaded.clone(),
            stack,
            http: reqwest::Client::new(),
        }
    }

    async fn post(
        &self,
        token: Option<&str>,
        query: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Value, reqwest::header::HeaderMap) {
        let mut req = self
            .http
            .post(format!("{}/v1/documents{query}", self.base))
            .body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let r = req.send().await.unwrap();
        let status = r.status();
        let headers = r.headers().clone();
        (status, r.json().await.unwrap_or(Value::Null), headers)
    }

    async fn get_job(&self, token: &str, id: &str) -> (StatusCode, Value) {
        let r = self
            .http
            .get(format!("{}/v1/jobs/{id}", self.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        (r.status(), r.json().await.unwrap_or(Value::Null))
    }

    /// Ingest's Prometheus text.
    async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Records on the topic.
    fn count(&self) -> i64 {
        let c: BaseConsumer = self
            .broker
            .kafka_args()
            .client_config("count")
            .create()
            .unwrap();
        (0..3)
            .map(|p| {
                let (lo, hi) = c
                    .fetch_watermarks(&self.topic, p, Duration::from_secs(10))
                    .unwrap();
                hi - lo
            })
            .sum()
    }

    async fn finish(self) {
        self.stack.stop().await.unwrap();
    }
}

fn pdf() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../samples/invoice-acme.pdf"
    ))
    .unwrap()
}

/// The sample PDF with a comment `tag` after it: other bytes, so a new document.
fn tagged_pdf(tag: &str) -> Vec<u8> {
    let mut bytes = pdf();
    bytes.extend_from_slice(format!("% {tag}\n").as_bytes());
    bytes
}

/// An answer's `Server-Timing` header (empty without one).
fn server_timing(h: &reqwest::header::HeaderMap) -> String {
    h.get("server-timing")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_produces_and_reports_the_job() {
    let s = Stack::start(Storage::Memory).await;
    let bytes = pdf();
    let id = document_id(&bytes);
    let (status, body, headers) = s
        .post(Some(ALICE), "?filename=invoice.pdf", bytes.clone())
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["job_id"], id.as_str());
    assert_eq!(body["status_url"], format!("/v1/jobs/{id}"));
    assert_eq!(body["duplicate"], false);
    assert_eq!(headers.get("location").unwrap(), &format!("/v1/jobs/{id}"));
    // Server-Timing: the steps in order, each step's parts (done at once) before it, and no
    // part longer than its step. A new document's key was free: no job read (`check.lookup`).
    let timing: Vec<(String, f64)> = headers
        .get("server-timing")
        .unwrap()
        .to_str()
        .unwrap()
        .split(", ")
        .map(|e| {
            let (name, dur) = e.split_once(";dur=").unwrap();
            (name.to_owned(), dur.parse().unwrap())
        })
        .collect();
    let names: Vec<&str> = timing.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "auth",
            "receive",
            "check.pdf",
            "check.store",
            "check",
            "persist.fsync",
            "persist.record",
            "persist.produce",
            "persist",
            "reply"
        ]
    );
    let ms = |n: &str| timing.iter().find(|(m, _)| m == n).unwrap().1;
    for part in ["check.pdf", "check.store"] {
        assert!(ms(part) <= ms("check"), "{timing:?}");
    }
    for part in ["persist.fsync", "persist.record", "persist.produce"] {
        assert!(ms(part) <= ms("persist"), "{timing:?}");
    }
    // (The fsyncs begin in `check`, so their part may round to 0.00 ms.)
    for part in ["persist.record", "persist.produce"] {
        assert!(ms(part) > 0.0, "{timing:?}");
    }

    // The event is on the topic, keyed by the document id, decodable through the registry.
    let (kafka, topic) = (s.broker.kafka_args(), s.topic.clone());
    let (key, payload) = tokio::task::spawn_blocking(move || {
        let c: BaseConsumer = kafka
            .client_config("check")
            .set("group.id", unique_name("check"))
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in 0..3 {
            tpl.add_partition_offset(&topic, p, Offset::Beginning)
                .unwrap();
        }
        c.assign(&tpl).unwrap();
        loop {
            if let Some(m) = c.poll(Duration::from_secs(1)) {
                let m = m.unwrap();
                return (m.key().unwrap().to_vec(), m.payload().unwrap().to_vec());
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(key, id.as_bytes());
    let codec = EventCodec::from_url(&s.registry.url(), Duration::from_secs(5)).unwrap();
    let ev: DocUploaded = codec.decode(&payload).await.unwrap();
    assert_eq!(ev.document_id, id);
    assert_eq!(ev.tenant_id, "alice");
    assert_eq!(ev.content_type, "application/pdf");
    assert_eq!(ev.size_bytes, bytes.len() as i64);
    assert_eq!(ev.original_file_name.as_deref(), Some("invoice.pdf"));
    // The bytes are where the event says, under a key the server made.
    let path = ev.object_uri.strip_prefix("file://").unwrap();
    assert!(path.ends_with(&format!("alice/{id}")));
    assert_eq!(std::fs::read(path).unwrap(), bytes);

    let (status, job) = s.get_job(ALICE, &id).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(job["status"], "accepted");
    assert_eq!(job["file_name"], "invoice.pdf");
    assert_eq!(job["uploads"], 1);

    // Metrics: the route template is the label, never the job id.
    let m = s.metrics().await;
    assert!(
        m.contains(
            r#"docflow_ingest_request_duration_seconds_count{route="/v1/documents",status="202"} 1"#
        ),
        "{m}"
    );
    assert!(m.contains(r#"route="/v1/jobs/{id}",status="200""#), "{m}");
    assert!(!m.contains(&id), "no job id in labels");
    assert!(
        m.contains(&format!(
            "docflow_ingest_upload_bytes_total {}",
            bytes.len()
        )),
        "{m}"
    );
    assert!(
        m.contains(r#"docflow_ingest_produce_duration_seconds_count{result="ok"} 1"#),
        "{m}"
    );

    // OpenAPI document served.
    let doc: Value = reqwest::get(format!("{}/openapi.json", s.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["paths"]["/v1/documents"]["post"].is_object());

    // The `accepted` mark is written after the answer, but a reader of the job never sees
    // it missing: each job read straight after its 202 says `accepted`.
    for i in 0..25 {
        let line = format!("read straight after its answer, {i}");
        let doc = docflow_stack::pdf::text_pdf(&[&[line.as_str()]]);
        let (status, body, _) = s.post(Some(ALICE), "", doc).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let id = body["job_id"].as_str().unwrap();
        let (status, job) = s.get_job(ALICE, id).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(job["status"], "accepted", "upload {i}: {job}");
        assert_ne!(job["pipeline"], "not_started", "upload {i}: {job}");
    }
    let m = s.metrics().await;
    assert!(
        m.contains(r#"docflow_ingest_accept_marks_total{outcome="ok"} 26"#),
        "{m}"
    );
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_reuse_the_job_unless_reprocess() {
    let s = Stack::start(Storage::Memory).await;
    let bytes = pdf();
    let (_, first, h) = s.post(Some(ALICE), "", bytes.clone()).await;
    // A key that was free has no job to read (`check.lookup` did not run); a key that held
    // the bytes already has its job read.
    assert!(
        !server_timing(&h).contains("check.lookup"),
        "{}",
        server_timing(&h)
    );
    let (status, again, h) = s.post(Some(ALICE), "", bytes.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert!(
        server_timing(&h).contains("check.lookup"),
        "{}",
        server_timing(&h)
    );
    assert_eq!(again["job_id"], first["job_id"]);
    assert_eq!(again["duplicate"], true);
    assert_eq!(s.count(), 1, "a duplicate starts no new work");
    let (status, re, _) = s.post(Some(ALICE), "?reprocess=true", bytes.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(re["job_id"], first["job_id"]);
    assert_eq!(s.count(), 2, "reprocess produces again");
    let (_, job) = s.get_job(ALICE, first["job_id"].as_str().unwrap()).await;
    assert_eq!(job["uploads"], 3);
    s.finish().await;
}

/// A crash of the machine before an upload's fsync can leave its blob linked under the key
/// but zero-filled or cut short, with no `202` given for it: its job is `stored` (the record
/// ran beside the fsync) or gone. The client's retry must put the right bytes there, not be
/// answered over the broken blob (the stages would refuse it for ever: its bytes do not hash
/// to the document id). A body held in memory and one streamed to its file (over 1 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_repairs_a_blob_a_crash_left_broken() {
    let s = Stack::start_tweaked(Storage::Sqlite, |config| {
        config.max_upload_bytes = 4 << 20;
    })
    .await;
    let db = docflow_store::connect(&s.database_url, 1).await.unwrap();
    let mut streamed = b"\x89PNG\r\n\x1a\n".to_vec();
    streamed.resize(3 << 19, 7);
    for bytes in [tagged_pdf("spoiled by a crash"), streamed] {
        let (status, first, _) = s.post(Some(ALICE), "", bytes.clone()).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{first}");
        let id = first["job_id"].as_str().unwrap();
        let blob = s.objects.join("alice").join(id);
        assert_eq!(std::fs::read(&blob).unwrap(), bytes);
        // What the crash left: the job `stored` with its bytes zero-filled, then no job and
        // its bytes cut short.
        for (broken, job) in [
            (
                vec![0u8; bytes.len()],
                "UPDATE ingest_jobs SET status = 'stored'",
            ),
            (bytes[..100].to_vec(), "DELETE FROM ingest_jobs"),
        ] {
            std::fs::write(&blob, &broken).unwrap();
            sqlx::query(&format!("{job} WHERE document_id = '{id}'"))
                .execute(&db)
                .await
                .unwrap();
            let produced = s.count();
            let (status, again, _) = s.post(Some(ALICE), "", bytes.clone()).await;
            assert_eq!(status, StatusCode::ACCEPTED, "{again}");
            assert_eq!(again["job_id"], first["job_id"]);
            assert_ne!(again["duplicate"], true, "{again}");
            assert_eq!(
                std::fs::read(&blob).unwrap(),
                bytes,
                "the blob is whole again"
            );
            assert_eq!(s.count(), produced + 1, "its event goes out again");
        }
        // Whole and accepted now: the next upload is a duplicate again.
        let produced = s.count();
        let (_, dup, _) = s.post(Some(ALICE), "", bytes.clone()).await;
        assert_eq!(dup["duplicate"], true, "{dup}");
        assert_eq!(s.count(), produced);
    }
    s.finish().await;
}

/// A new document's job is not read before its event goes out (its key was free), so the
/// first upload in a database outage is produced and then refused (its record fails); from
/// then on the job is read first again, and uploads are refused before their events go out,
/// until a read or record succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_refuses_uploads_before_their_events() {
    let s = Stack::start(Storage::Sqlite).await;
    let (st, first, _) = s.post(Some(ALICE), "", tagged_pdf("before")).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{first}");
    // Its `accepted` mark is written before the table goes.
    let (st, _) = s.get_job(ALICE, first["job_id"].as_str().unwrap()).await;
    assert_eq!(st, StatusCode::OK);
    let produced = s.count();

    // The jobs table goes away (an outage that every statement on it sees).
    let db = docflow_store::connect(&s.database_url, 1).await.unwrap();
    sqlx::query("ALTER TABLE ingest_jobs RENAME TO ingest_jobs_away")
        .execute(&db)
        .await
        .unwrap();
    let (st, body, _) = s
        .post(Some(ALICE), "", tagged_pdf("first in the outage"))
        .await;
    assert!(st.is_server_error(), "{st} {body}");
    assert_eq!(s.count(), produced + 1, "produced before its record failed");
    for i in 0..2 {
        let (st, body, _) = s
            .post(Some(ALICE), "", tagged_pdf(&format!("later {i}")))
            .await;
        assert!(st.is_server_error(), "{st} {body}");
        assert_eq!(s.count(), produced + 1, "refused before its event: {body}");
    }

    sqlx::query("ALTER TABLE ingest_jobs_away RENAME TO ingest_jobs")
        .execute(&db)
        .await
        .unwrap();
    // A new key, read first: the last read failed.
    let (st, body, h) = s.post(Some(ALICE), "", tagged_pdf("back")).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{body}");
    assert!(
        server_timing(&h).contains("check.lookup"),
        "{}",
        server_timing(&h)
    );
    assert_eq!(s.count(), produced + 2);
    // The database answered: a new key is not read again.
    let (st, body, h) = s.post(Some(ALICE), "", tagged_pdf("after")).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{body}");
    assert!(
        !server_timing(&h).contains("check.lookup"),
        "{}",
        server_timing(&h)
    );
    s.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_has_its_code() {
    let s = Stack::start(Storage::Memory).await;
    let bytes = pdf();
    let id = document_id(&bytes);

    let (st, body, h) = s.post(None, "", bytes.clone()).await;
    assert_eq!(
        (st, body["error"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthorized"))
    );
    assert_eq!(h.get("www-authenticate").unwrap(), "Bearer");
    let (st, _, _) = s.post(Some("tok-nobody"), "", bytes.clone()).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);

    let (st, body, _) = s.post(Some(ALICE), "", vec![b'%'; 5000]).await;
    assert_eq!(
        (st, body["error"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("too_large"))
    );

    let (st, body, _) = s.post(Some(ALICE), "", b"just some text".to_vec()).await;
    assert_eq!(
        (st, body["error"].as_str()),
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, Some("unsupported_type"))
    );

    let (st, body, _) = s
        .post(Some(ALICE), "", bytes[..bytes.len() / 2].to_vec())
        .await;
    assert_eq!(
        (st, body["error"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_pdf")),
        "{body}"
    );
    assert!(body["message"].as_str().unwrap().contains("EOF"));
    // Refused bytes are never put under their key (it is taken only once the checks
    // pass), and their staged file is gone.
    let cut = document_id(&bytes[..bytes.len() / 2]);
    assert!(!s.objects.join("alice").join(&cut).exists());
    // (Ingest keeps a few empty files ready there: nothing with bytes in it is left.)
    let staged: u64 = std::fs::read_dir(s.objects.join(".incoming"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();
    assert_eq!(staged, 0, "no staged bytes left");

    let (st, body, _) = s.post(Some(ALICE), "", Vec::new()).await;
    assert_eq!(
        (st, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request"))
    );
    assert_eq!(s.count(), 0, "nothing invalid was produced");

    // Another tenant's job is a 404, exactly like a job that does not exist.
    let (st, _, _) = s.post(Some(ALICE), "", bytes.clone()).await;
    assert_eq!(st, StatusCode::ACCEPTED);
    let (st, body) = s.get_job(BOB, &id).await;
    assert_eq!(
        (st, body["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (st, _) = s.get_job(ALICE, &"0".repeat(64)).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    let (st, _) = s.get_job(ALICE, "../etc/passwd").await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    s.finish().await;
}

/// Authentication comes before everything else a request carries, the bearer scheme is
/// case-insensitive (RFC 7235), and a bad query string is a JSON 400 like every error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_first_case_insensitive_scheme_and_json_query_errors() {
    let s = Stack::start(Storage::Memory).await;
    let bytes = pdf();

    let (st, body, _) = s.post(None, "?reprocess=maybe", bytes.clone()).await;
    assert_eq!(
        (st, body["error"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthorized")),
        "no token and a bad query: the token is what is wrong first"
    );
    let (st, body, _) = s.post(Some(ALICE), "?reprocess=maybe", bytes.clone()).await;
    assert_eq!(
        (st, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request")),
        "{body}"
    );
    assert!(
        body["message"].as_str().unwrap().contains("reprocess"),
        "{body}"
    );

    for scheme in ["bearer", "BEARER", "BeArEr"] {
        let r = s
            .http
            .post(format!("{}/v1/documents", s.base))
            .header("authorization", format!("{scheme} {ALICE}"))
            .body(bytes.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::ACCEPTED, "scheme {scheme}");
    }
    let r = s
        .http
        .post(format!("{}/v1/documents", s.base))
        .header("authorization", format!("Basic {ALICE}"))
        .body(bytes.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::UNAUTHORIZED,
        "another scheme is refused"
    );
    s.finish().await;
}

/// Slow and stalled clients cannot hold the API: a request's headers must arrive within
/// `--header-timeout` (half-sent requests are disconnected), an upload's body within
/// `--body-timeout` (408), and past `--max-concurrent-uploads` an upload gets 503 with
/// Retry-After until a slot frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_and_uploads_are_capped() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = Stack::start_tweaked(Storage::Memory, |config| {
        config.header_timeout = Duration::from_secs(1);
        config.body_timeout = Duration::from_secs(2);
        config.max_concurrent_uploads = 2;
    })
    .await;
    let addr = s.base.trim_start_matches("http://").to_owned();
    let connect = || tokio::net::TcpStream::connect(addr.clone());

    // 50 half-sent, unauthenticated requests: all disconnected once the header time is up.
    let mut half_sent = Vec::new();
    for _ in 0..50 {
        let mut c = connect().await.unwrap();
        c.write_all(b"POST /v1/documents HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        half_sent.push(c);
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut closed = 0;
    for mut c in half_sent {
        let mut buf = [0u8; 256];
        match tokio::time::timeout(Duration::from_secs(1), c.read(&mut buf)).await {
            Ok(Ok(_)) | Ok(Err(_)) => closed += 1, // EOF, a 408 before it, or a reset
            Err(_) => {}                           // still held open
        }
    }
    assert_eq!(closed, 50, "half-sent requests are disconnected");

    // An authenticated upload whose body stalls: 408 when its time is up.
    let stalled = || async {
        let mut c = connect().await.unwrap();
        let head = format!(
            "POST /v1/documents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\n\
             Content-Length: 1000\r\n\r\n%PDF-1.4\n"
        );
        c.write_all(head.as_bytes()).await.unwrap();
        c
    };
    let answer = |mut c: tokio::net::TcpStream| async move {
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    };
    let started = std::time::Instant::now();
    let text = answer(stalled().await).await;
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("request_timeout"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );

    // Two stalled uploads hold both slots: a third upload is refused at once with 503 +
    // Retry-After; once they time out, uploads go through again.
    let held = [stalled().await, stalled().await];
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (st, body, h) = s.post(Some(ALICE), "", pdf()).await;
    assert_eq!(
        (st, body["error"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("busy")),
        "{body}"
    );
    assert_eq!(h.get("retry-after").unwrap(), "1");
    for c in held {
        assert!(answer(c).await.starts_with("HTTP/1.1 408"));
    }
    let (st, body, _) = s.post(Some(ALICE), "", pdf()).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{body}");
    s.finish().await;
}

/// An upload's body goes to disk as it arrives, not to memory: half of a 24 MiB body, sent
/// and then stalled, is already in the staged file; after the 408 the file is gone, and a
/// finished upload leaves only its blob.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_bodies_stream_to_disk_not_memory() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const SIZE: usize = 24 << 20;
    let s = Stack::start_tweaked(Storage::Memory, |config| {
        config.max_upload_bytes = 32 << 20;
        config.body_timeout = Duration::from_secs(4);
    })
    .await;
    let incoming = s.objects.join(".incoming");
    let staged_bytes = || -> u64 {
        std::fs::read_dir(&incoming)
            .map(|dir| {
                dir.filter_map(|e| e.ok()?.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    };
    let addr = s.base.trim_start_matches("http://").to_owned();
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/documents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\n\
         Content-Type: image/png\r\nContent-Length: {SIZE}\r\n\r\n"
    );
    c.write_all(head.as_bytes()).await.unwrap();
    let mut body = b"\x89PNG\r\n\x1a\n".to_vec();
    body.resize(SIZE / 2, 7);
    c.write_all(&body).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while staged_bytes() < (SIZE / 2) as u64 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        staged_bytes(),
        (SIZE / 2) as u64,
        "the half that arrived is on disk while the client stalls"
    );
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert_eq!(
        staged_bytes(),
        0,
        "a timed-out upload leaves no staged file"
    );

    // A whole upload: nothing left staged, the blob under its key.
    let (st, body, _) = s.post(Some(ALICE), "", pdf()).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{body}");
    assert_eq!(staged_bytes(), 0);
    let id = body["job_id"].as_str().unwrap();
    assert_eq!(document_id(&pdf()), id);
    assert!(s.objects.join("alice").join(id).exists());
    s.finish().await;
}

/// Broker down: 503 with Retry-After and a job record (no orphaned blob); broker back: the
/// same upload goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_outage_is_503_then_recovers() {
    let mut s = Stack::start(Storage::Sqlite).await;
    let bytes = pdf();
    let id = document_id(&bytes);
    // Warm the registry cache and the producer's metadata.
    let warm = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../samples/letter-renewal.pdf"
    ))
    .unwrap();
    assert_eq!(s.post(Some(ALICE), "", warm).await.0, StatusCode::ACCEPTED);
    let readyz = |http: reqwest::Client, url: String| async move {
        let r = http.get(url).send().await.unwrap();
        let status = r.status();
        assert_eq!(
            status == StatusCode::SERVICE_UNAVAILABLE,
            r.headers().get("retry-after").is_some()
        );
        (status, r.json::<Value>().await.unwrap())
    };
    let ready_url = format!("{}/readyz", s.base);
    let (st, ready) = readyz(s.http.clone(), ready_url.clone()).await;
    assert_eq!(st, StatusCode::OK, "{ready}");
    assert_eq!(
        ready["checks"],
        serde_json::json!({"database": "ok", "object_store": "ok", "broker": "ok"})
    );

    s.broker.kill().await.unwrap();
    // Not ready while the broker is away, and saying why; liveness is unaffected.
    let (st, ready) = readyz(s.http.clone(), ready_url.clone()).await;
    assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE, "{ready}");
    assert_ne!(ready["checks"]["broker"], "ok", "{ready}");
    assert_eq!(ready["checks"]["database"], "ok", "{ready}");
    let live = s
        .http
        .get(format!("{}/healthz", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), StatusCode::OK);
    let started = std::time::Instant::now();
    let (st, body, h) = s.post(Some(ALICE), "", bytes.clone()).await;
    let took = started.elapsed();
    assert_eq!(
        (st, body["error"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("unavailable")),
        "{body}"
    );
    assert!(h.get("retry-after").is_some());
    // The promise is --produce-timeout (3 s here) for the whole wait, not per retry inside
    // librdkafka; 1.5 s of slack covers receiving, hashing and the job record on a busy
    // machine (before the fix: up to twice the timeout).
    assert!(
        took < Duration::from_millis(4500),
        "503 after {took:?} with a 3 s produce timeout"
    );
    // And again for uploads that arrive while the producer already holds timed-out records.
    for i in 0..2u8 {
        let other = tagged_pdf(&format!("outage {i}"));
        let started = std::time::Instant::now();
        let (st, _, _) = s.post(Some(ALICE), "", other).await;
        let took = started.elapsed();
        assert_eq!(st, StatusCode::SERVICE_UNAVAILABLE);
        assert!(took < Duration::from_millis(4500), "503 after {took:?}");
    }
    let (st, job) = s.get_job(ALICE, &id).await;
    assert_eq!(st, StatusCode::OK, "the stored blob has a record");
    assert_eq!(job["status"], "produce_failed");

    s.broker.restart().await.unwrap();
    let mut ok = false;
    for _ in 0..20 {
        let (st, body, _) = s.post(Some(ALICE), "", bytes.clone()).await;
        if st == StatusCode::ACCEPTED {
            assert_eq!(body["job_id"], id.as_str());
            assert_eq!(
                body["duplicate"], false,
                "a failed produce is retried, not skipped"
            );
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(ok, "upload recovers after the broker is back");
    let (st, ready) = readyz(s.http.clone(), ready_url.clone()).await;
    assert_eq!(st, StatusCode::OK, "{ready}");
    let (_, job) = s.get_job(ALICE, &id).await;
    assert_eq!(job["status"], "accepted");
    s.finish().await;
}

/// A `multipart/form-data` body with the given parts `(name, filename, bytes)`.
fn multipart(parts: &[(&str, Option<&str>, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "docflow-test-boundary-7MA4YWxkTrZu0gW";
    let mut body = Vec::new();
    for (name, file, bytes) in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        match file {
            Some(f) => body.extend_from_slice(
                format!(
                    "Content-Disposition: form-data; name=\"{name}\"; filename=\"{f}\"\r\n\
                     Content-Type: application/octet-stream\r\n\r\n"
                )
                .as_bytes(),
            ),
            None => body.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
            ),
        }
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// Multipart uploads, `?wait=` falling back to 202, stage reports in the job, and the
/// thumbnail endpoint before a thumbnail exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_wait_and_stage_reports() {
    let s = Stack::start(Storage::Memory).await;
    let bytes = pdf();
    let id = document_id(&bytes);
    let send = |content_type: String, body: Vec<u8>, query: &'static str| {
        s.http
            .post(format!("{}/v1/documents{query}", s.base))
            .bearer_auth(ALICE)
            .header("content-type", content_type)
            .body(body)
            .send()
    };

    // No stage is running here: the capped wait falls back to the job id.
    let (ct, body) = multipart(&[("file", Some("scan.pdf"), &bytes)]);
    let started = std::time::Instant::now();
    let r = send(ct, body, "?wait=300ms").await.unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    assert!(started.elapsed() >= Duration::from_millis(300));
    let accepted: Value = r.json().await.unwrap();
    assert_eq!(accepted["job_id"], id.as_str());
    let (_, job) = s.get_job(ALICE, &id).await;
    assert_eq!(job["file_name"], "scan.pdf", "the part's file name is kept");
    assert_eq!(job["pipeline"], "processing");
    assert_eq!(job["stages"][0]["stage"], "thumbnails");
    assert_eq!(job["stages"][0]["status"], "pending");
    assert_eq!(job["thumbnail_url"], Value::Null);
    let r = s
        .http
        .get(format!("{}/v1/documents/{id}/thumbnail", s.base))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "not_ready");
    let r = s
        .http
        .get(format!("{}/v1/documents/{id}/thumbnail", s.base))
        .bearer_auth(BOB)
        .send()
        .await
        .unwrap();
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "not_found");

    // A stage reports through the result store: the job shows it, with its text and summary.
    let store =
        docflow_store::ResultStore::new(docflow_store::open(&s.database_url, 2).await.unwrap());
    store
        .record(&docflow_store::StageRun {
            tenant_id: "alice".into(),
            document_id: id.clone(),
            stage: "ocr-embeddings".into(),
            stage_version: 3,
            status: docflow_store::StageStatus::Done,
            idempotency_key: Some("k".into()),
            result_ref: Some("r".into()),
            output: Some(r#"{"text": "Invoice ACME", "summary": "An invoice"}"#.into()),
            error: None,
            attempts: 2,
            started_at_ms: 1_000,
            finished_at_ms: 1_400,
            event_sent_at_ms: None,
        })
        .await
        .unwrap();
    let (_, job) = s.get_job(ALICE, &id).await;
    assert_eq!(job["text"], "Invoice ACME");
    assert_eq!(job["summary"], "An invoice");
    let ocr = &job["stages"][1];
    assert_eq!(
        (&ocr["stage"], &ocr["status"], &ocr["stage_version"]),
        (
            &Value::from("ocr-embeddings"),
            &Value::from("done"),
            &Value::from(3)
        )
    );
    assert_eq!(
        (&ocr["attempts"], &ocr["duration_ms"]),
        (&Value::from(2), &Value::from(400))
    );
    assert_eq!(job["pipeline"], "processing", "thumbnails is still pending");
    let (_, other) = s.get_job(BOB, &id).await;
    assert_eq!(other["error"], "not_found");

    // Bad multipart bodies and waits are 4xx with a reason.
    let (ct, body) = multipart(&[("document", Some("x.pdf"), &bytes)]);
    let r = send(ct, body, "").await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().await.unwrap().contains("\\\"file\\\""));
    let (ct, body) = multipart(&[("file", None, &bytes), ("file", None, &bytes)]);
    assert_eq!(
        send(ct, body, "").await.unwrap().status(),
        StatusCode::BAD_REQUEST
    );
    let (ct, body) = multipart(&[("file", Some("big.pdf"), &vec![b'%'; 5000])]);
    let r = send(ct, body, "").await.unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let r = send(
        "multipart/form-data; boundary=nope".into(),
        b"garbage".to_vec(),
        "",
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let (st, body, _) = s.post(Some(ALICE), "?wait=soon", bytes.clone()).await;
    assert_eq!(
        (st, body["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request"))
    );
    s.finish().await;
}

/// Shutdown does not wait out a `?wait=`: the waiting request answers 202 with its job id,
/// then the server stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cuts_a_wait_short_with_the_job_id() {
    let mut s = Stack::start(Storage::Memory).await;
    let bytes = pdf();
    let (http, url) = (s.http.clone(), format!("{}/v1/documents?wait=30s", s.base));
    let started = std::time::Instant::now();
    let waiting = tokio::spawn(async move {
        let r = http
            .post(url)
            .bearer_auth(ALICE)
            .body(bytes)
            .send()
            .await
            .unwrap();
        (r.status(), r.json::<Value>().await.unwrap())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(s.signal_shutdown("ingest"));
    let (status, body) = waiting.await.unwrap();
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["status"], "accepted");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    s.finish().await;
}
