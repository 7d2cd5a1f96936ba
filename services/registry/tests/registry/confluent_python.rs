//! The official Confluent Python client (confluent-kafka 2.16.1: `SchemaRegistryClient`,
//! `AvroSerializer`, `AvroDeserializer`, librdkafka inside) against this registry and the
//! embedded broker. The client comes from `make tools` (`scripts/install-python-clients.sh`,
//! a pinned venv at `.tools/venv-confluent`); the driver is `tests/python/confluent_interop.py`.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use docflow_events::{DocUploaded, EventCodec};
use docflow_runtime::producer::{idempotent_producer, send_event};
use docflow_runtime::trace::TraceContext;
use docflow_stack::{Stack, unique_name, workspace_root};
use serde_json::{Value, json};

use crate::codec::sample_uploaded;
use crate::support::Harness;

fn python() -> PathBuf {
    let p = workspace_root().join(".tools/venv-confluent/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run `make tools` (scripts/install-python-clients.sh)",
        p.display()
    );
    p
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/confluent_interop.py")
}

/// Runs the driver with `args` (and `stdin`) off the async threads; fails the test with its
/// stderr when it fails.
async fn drive(args: Vec<String>, stdin: Option<String>) -> String {
    let out: Output = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(python())
            .arg(script())
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).unwrap();
        }
        drop(input);
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "confluent_interop.py failed:\n{stderr}"
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every `SchemaRegistryClient` call that maps onto the REST API, with Confluent's answers
/// (ids, versions, deletes, lookups, compatibility, config, pagination, references and the
/// serdes over them). READONLY mode is left out: this registry runs READWRITE only.
#[tokio::test]
async fn the_confluent_python_client_drives_every_registry_call() {
    for h in Harness::all().await {
        drive(
            vec![
                "registry".into(),
                "--url".into(),
                h.registry.url(),
                "--prefix".into(),
                unique_name("py"),
                "--skip".into(),
                "readonly".into(),
            ],
            None,
        )
        .await;
        h.finish().await;
    }
}

fn event_json(ev: &DocUploaded) -> Value {
    json!({
        "document_id": ev.document_id,
        "tenant_id": ev.tenant_id,
        "object_uri": ev.object_uri,
        "content_type": ev.content_type,
        "size_bytes": ev.size_bytes,
        "original_file_name": ev.original_file_name,
        "uploaded_at": ev.uploaded_at,
        "producer_version": ev.producer_version,
    })
}

/// Avro records both ways over the real broker: docflow produces `doc.uploaded` and the
/// Python `AvroDeserializer` reads it (plainly and with `use.latest.version`); the Python
/// `AvroSerializer` with `auto.register.schemas=False` + `use.latest.version=True` (the usual
/// production setting: it must find the schema docflow registered) produces, and docflow's
/// codec decodes.
#[tokio::test]
async fn avro_records_round_trip_with_the_confluent_python_client() {
    let stack = Stack::builder().partitions(3).start().await.unwrap();
    let url = stack.registry.url();
    let bootstrap = stack.broker.bootstrap_servers();
    let codec = EventCodec::from_url(&url, Duration::from_secs(5)).unwrap();
    let subject = docflow_events::topics::value_subject(docflow_events::topics::DOC_UPLOADED);

    // docflow → Python.
    let to_python = stack.topics.uploaded.clone();
    let producer = idempotent_producer(&stack.kafka(), "interop-py").unwrap();
    let mut sent = Vec::new();
    for i in 0..10u32 {
        let mut ev = sample_uploaded(format!("to python {i}").as_bytes());
        if i % 2 == 0 {
            ev.original_file_name = None;
        }
        send_event(
            &producer,
            &codec,
            &to_python,
            &ev.document_id,
            &ev,
            &TraceContext::new_root(),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        sent.push(event_json(&ev));
    }
    let out = drive(
        vec![
            "consume".into(),
            "--url".into(),
            url.clone(),
            "--bootstrap".into(),
            bootstrap.clone(),
            "--topic".into(),
            to_python,
            "--group".into(),
            unique_name("py-consumer"),
            "--count".into(),
            sent.len().to_string(),
            "--subject".into(),
            subject.clone(),
        ],
        None,
    )
    .await;
    let mut got: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let key = |v: &Value| v["document_id"].as_str().unwrap().to_owned();
    got.sort_by_key(key);
    sent.sort_by_key(key);
    assert_eq!(got, sent);

    // Python → docflow.
    let from_python = stack.topic("from-python", 3).await.unwrap();
    let events: Vec<DocUploaded> = (0..10u32)
        .map(|i| sample_uploaded(format!("from python {i}").as_bytes()))
        .collect();
    let lines: String = events
        .iter()
        .map(|ev| format!("{}\n", event_json(ev)))
        .collect();
    let out = drive(
        vec![
            "produce".into(),
            "--url".into(),
            url.clone(),
            "--bootstrap".into(),
            bootstrap,
            "--topic".into(),
            from_python.clone(),
            "--subject".into(),
            subject,
        ],
        Some(lines),
    )
    .await;
    assert_eq!(out.trim(), "produced 10");
    let records = stack
        .wait_records(&from_python, events.len(), Duration::from_secs(30))
        .await
        .unwrap();
    let mut decoded = Vec::new();
    for (key, value) in &records {
        let ev: DocUploaded = codec.decode(value).await.unwrap();
        assert_eq!(key, ev.document_id.as_bytes(), "keyed by document id");
        decoded.push(ev);
    }
    decoded.sort_by(|a, b| a.document_id.cmp(&b.document_id));
    let mut want = events;
    want.sort_by(|a, b| a.document_id.cmp(&b.document_id));
    assert_eq!(decoded, want);
    stack.stop().await.unwrap();
}
