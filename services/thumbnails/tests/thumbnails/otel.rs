//! One upload, one trace, across processes: ingest and the thumbnails stage run as their
//! real binaries exporting spans over OTLP/HTTP to a receiver in this test (the protobuf
//! `ExportTraceServiceRequest` a collector gets), and the spans link up across the broker —
//! to the stage's answer on `doc.processed`, or to the dead letter of an upload it cannot
//! render.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use docflow_events::stages::THUMBNAILS;
use docflow_stack::process::Replica;
use docflow_stack::{free_port, pdfium_library, workspace_binary};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

use super::{TOKEN, sample};

/// A span as received, with the service that sent it.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    span: Span,
}

impl Got {
    fn attr(&self, key: &str) -> Option<String> {
        attr(&self.span.attributes, key)
    }
}

fn attr(kvs: &[KeyValue], key: &str) -> Option<String> {
    kvs.iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            AnyValue::StringValue(s) => Some(s.clone()),
            AnyValue::IntValue(i) => Some(i.to_string()),
            AnyValue::BoolValue(b) => Some(b.to_string()),
            AnyValue::DoubleValue(d) => Some(d.to_string()),
            _ => None,
        })
}

/// An OTLP/HTTP receiver on a free port: what it got, and its base URL.
async fn receiver() -> (Arc<Mutex<Vec<Got>>>, String) {
    let got: Arc<Mutex<Vec<Got>>> = Arc::default();
    let sink = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let sink = sink.clone();
            async move {
                let req = ExportTraceServiceRequest::decode(body).unwrap();
                let mut sink = sink.lock().unwrap();
                for rs in req.resource_spans {
                    let service = rs
                        .resource
                        .as_ref()
                        .and_then(|r| attr(&r.attributes, "service.name"))
                        .unwrap_or_default();
                    for ss in rs.scope_spans {
                        for span in ss.spans {
                            sink.push(Got {
                                service: service.clone(),
                                span,
                            });
                        }
                    }
                }
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (got, url)
}

/// Starts `bin` with `args`, its output in `log`; killed when dropped, so a failing
/// assertion leaves no process behind.
fn spawn(bin: std::path::PathBuf, args: Vec<String>, log: &std::path::Path) -> Replica {
    let log = std::fs::File::create(log).unwrap();
    let mut cmd = std::process::Command::new(bin);
    cmd.args(args)
        .env("RUST_LOG", "info,librdkafka=warn,rdkafka=warn")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    // The port is only for messages: this test reads no replica's /metrics through it.
    Replica::spawn(cmd, "otel-test", 0).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_upload_is_one_trace_across_processes_to_its_dead_letter() {
    let (got, otlp) = receiver().await;
    let stack = docflow_stack::Stack::builder()
        .partitions(3)
        .start()
        .await
        .unwrap();
    let logs = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let mut ingest = spawn(
        workspace_binary("docflow-ingest").unwrap(),
        [
            ("--listen", format!("127.0.0.1:{port}")),
            (
                "--kafka-bootstrap-servers",
                stack.broker.bootstrap_servers(),
            ),
            ("--schema-registry-url", stack.registry.url()),
            ("--database-url", stack.database_url.clone()),
            ("--object-dir", stack.objects.display().to_string()),
            ("--token", format!("{TOKEN}=alice")),
            ("--stages", THUMBNAILS.to_owned()),
            ("--topic", stack.topics.uploaded.clone()),
            ("--processed-topic", stack.topics.processed.clone()),
            ("--otlp-endpoint", otlp.clone()),
            ("--otel-export-interval", "200ms".to_owned()),
        ]
        .into_iter()
        .flat_map(|(k, v)| [k.to_owned(), v])
        .collect(),
        &logs.path().join("ingest.log"),
    );
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !http
        .get(format!("{base}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "ingest not ready: {}",
            std::fs::read_to_string(logs.path().join("ingest.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The stage once ingest has migrated the database (two first starts on one SQLite file
    // would race for the migrations).
    let mut stage_args = stack.stage_flags(THUMBNAILS);
    stage_args.extend([
        "--pdfium-lib".to_owned(),
        pdfium_library().display().to_string(),
        "--otlp-endpoint".to_owned(),
        otlp.clone(),
        "--otel-export-interval".to_owned(),
        "200ms".to_owned(),
    ]);
    let mut stage = spawn(
        env!("CARGO_BIN_EXE_docflow-thumbnails").into(),
        stage_args,
        &logs.path().join("thumbnails.log"),
    );

    // The caller's own trace: the request span continues it.
    let client_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let r = http
        .post(format!("{base}/v1/documents?wait=60s&filename=report.pdf"))
        .bearer_auth(TOKEN)
        .header("traceparent", format!("00-{client_trace}-{client_span}-01"))
        .body(sample("report-q3.pdf"))
        .send()
        .await
        .unwrap();
    let logs_of = |name: &str| std::fs::read_to_string(logs.path().join(name)).unwrap_or_default();
    assert_eq!(
        r.status(),
        reqwest::StatusCode::OK,
        "ingest:\n{}\nthumbnails:\n{}",
        logs_of("ingest.log"),
        logs_of("thumbnails.log")
    );
    let job: serde_json::Value = r.json().await.unwrap();
    assert_eq!(job["pipeline"], "done", "{job}");
    let job_id = job["job_id"].as_str().unwrap().to_owned();

    // Ingest's request and publish spans, the stage's consume and publish spans.
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    // The span `name` that `service` sent for `job` in `trace`.
    let find = |name: &str, service: &str, job: &str, trace: &str| -> Option<Got> {
        got.lock()
            .unwrap()
            .iter()
            .find(|g| {
                g.span.name == name
                    && g.service == service
                    && g.attr("docflow.job_id").as_deref() == Some(job)
                    && hex(&g.span.trace_id) == trace
            })
            .cloned()
    };
    let received = || {
        got.lock()
            .unwrap()
            .iter()
            .map(|g| {
                (
                    g.service.clone(),
                    g.span.name.clone(),
                    hex(&g.span.trace_id),
                    g.attr("messaging.destination.name"),
                )
            })
            .collect::<Vec<_>>()
    };
    // Span names as the OTel conventions make them: `{method} {route}`, `{operation}
    // {destination}`.
    let (uploaded, processed) = (&stack.topics.uploaded, &stack.topics.processed);
    let (send_uploaded, process_uploaded, send_processed) = (
        format!("send {uploaded}"),
        format!("process {uploaded}"),
        format!("send {processed}"),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let (request, publish, consume, announce) = loop {
        let spans = (
            find(
                "POST /v1/documents",
                "docflow-ingest",
                &job_id,
                client_trace,
            ),
            find(&send_uploaded, "docflow-ingest", &job_id, client_trace),
            find(
                &process_uploaded,
                "docflow-thumbnails",
                &job_id,
                client_trace,
            ),
            find(&send_processed, "docflow-thumbnails", &job_id, client_trace),
        );
        if let (Some(a), Some(b), Some(c), Some(d)) = spans {
            break (a, b, c, d);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "spans missing: {spans:?}\nreceived: {:?}",
            received()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Parent → child, across the HTTP hop and the broker.
    assert_eq!(hex(&request.span.parent_span_id), client_span);
    assert_eq!(publish.span.parent_span_id, request.span.span_id);
    assert_eq!(
        consume.span.parent_span_id, publish.span.span_id,
        "across the broker"
    );
    assert_eq!(announce.span.parent_span_id, consume.span.span_id);
    // OTel messaging conventions (1.28+ attribute names).
    let conv: HashMap<&str, Option<String>> = [
        ("publish system", publish.attr("messaging.system")),
        (
            "publish operation",
            publish.attr("messaging.operation.type"),
        ),
        ("publish topic", publish.attr("messaging.destination.name")),
        ("publish key", publish.attr("messaging.kafka.message.key")),
        (
            "consume operation",
            consume.attr("messaging.operation.type"),
        ),
        (
            "consume group",
            consume.attr("messaging.consumer.group.name"),
        ),
        (
            "consume partition",
            consume.attr("messaging.destination.partition.id"),
        ),
        ("consume offset", consume.attr("messaging.kafka.offset")),
        (
            "announce topic",
            announce.attr("messaging.destination.name"),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(conv["publish system"].as_deref(), Some("kafka"));
    assert_eq!(conv["publish operation"].as_deref(), Some("send"));
    assert_eq!(conv["publish topic"].as_deref(), Some(uploaded.as_str()));
    assert_eq!(conv["publish key"].as_deref(), Some(job_id.as_str()));
    assert_eq!(conv["consume operation"].as_deref(), Some("process"));
    assert_eq!(
        conv["consume group"].as_deref(),
        Some(stack.group(THUMBNAILS).as_str())
    );
    assert!(
        conv["consume partition"]
            .as_deref()
            .is_some_and(|p| ["0", "1", "2"].contains(&p)),
        "{conv:?}"
    );
    assert!(conv["consume offset"].is_some(), "{conv:?}");
    assert_eq!(conv["announce topic"].as_deref(), Some(processed.as_str()));
    assert_eq!(request.attr("http.route").as_deref(), Some("/v1/documents"));

    // An upload the stage cannot render, from a caller that sends no trace: ingest starts
    // one, and it ends at the dead letter, a publish span to the group's DLQ topic, child of
    // the stage's consume span.
    let mut bad = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    bad.extend_from_slice(&[0u8; 7]);
    let r = http
        .post(format!("{base}/v1/documents"))
        .bearer_auth(TOKEN)
        .body(bad)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::ACCEPTED);
    let bad_job: serde_json::Value = r.json().await.unwrap();
    let bad_id = bad_job["job_id"].as_str().unwrap().to_owned();
    let dlq_topic =
        docflow_events::topics::dead_letter(&stack.topics.uploaded, &stack.group(THUMBNAILS));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let bad_request = loop {
        let request = got
            .lock()
            .unwrap()
            .iter()
            .find(|g| {
                g.span.name == "POST /v1/documents"
                    && g.attr("docflow.job_id").as_deref() == Some(bad_id.as_str())
            })
            .cloned();
        if let Some(r) = request {
            break r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no request span for {bad_id}: {:?}",
            received()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        bad_request.span.parent_span_id.is_empty(),
        "a new trace's root: {bad_request:?}"
    );
    let bad_trace = hex(&bad_request.span.trace_id);
    let bad_trace = bad_trace.as_str();
    assert_ne!(bad_trace, client_trace);
    let (bad_publish, bad_consume, dead) = loop {
        let dead = got
            .lock()
            .unwrap()
            .iter()
            .find(|g| {
                g.span.name == format!("send {dlq_topic}")
                    && g.service == "docflow-thumbnails"
                    && hex(&g.span.trace_id) == bad_trace
                    && g.attr("messaging.destination.name").as_deref() == Some(dlq_topic.as_str())
            })
            .cloned();
        let spans = (
            find(&send_uploaded, "docflow-ingest", &bad_id, bad_trace),
            find(&process_uploaded, "docflow-thumbnails", &bad_id, bad_trace),
            dead,
        );
        if let (Some(a), Some(b), Some(c)) = spans {
            break (a, b, c);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "dead-letter spans missing: {spans:?}\nreceived: {:?}\nthumbnails:\n{}",
            received(),
            logs_of("thumbnails.log")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(bad_publish.span.parent_span_id, bad_request.span.span_id);
    assert_eq!(bad_consume.span.parent_span_id, bad_publish.span.span_id);
    assert_eq!(
        dead.span.parent_span_id, bad_consume.span.span_id,
        "the dead letter is the consume span's child"
    );
    assert_eq!(
        dead.attr("docflow.job_id").as_deref(),
        Some(bad_id.as_str())
    );
    assert_eq!(dead.attr("messaging.system").as_deref(), Some("kafka"));
    assert!(
        dead.attr("docflow.dlq.error_class")
            .is_some_and(|c| !c.is_empty()),
        "{dead:?}"
    );
    // The dead letter's own traceparent names that span (a redrive continues the trace).
    let letters = stack
        .records_with_header(&dlq_topic, "traceparent")
        .await
        .unwrap();
    let expected = format!("00-{bad_trace}-{}-01", hex(&dead.span.span_id));
    assert!(
        letters
            .iter()
            .any(|(kv, tp)| kv.0 == bad_id.as_bytes() && tp.as_deref() == Some(expected.as_str())),
        "no dead letter of {bad_id} with traceparent {expected}: {:?}",
        letters.iter().map(|(_, tp)| tp).collect::<Vec<_>>()
    );

    // The drop counter is exported (nothing dropped with a live receiver).
    let metrics = http.get(format!("{base}/metrics")).send().await.unwrap();
    let text = metrics.text().await.unwrap();
    assert!(
        text.contains("docflow_otel_spans_dropped_total 0"),
        "{text}"
    );

    ingest.kill9();
    stage.kill9();
    stack.stop().await.unwrap();
}
