//! `docflow dev`: the embedded stack end to end on one machine.
//!
//! Starts a Nisshi broker, the schema registry, the ingest API and the thumbnails stage
//! (consumer group `thumbnails`), declares the topics, registers the schemas, uploads each
//! sample document through `POST /v1/documents?wait=30s` (ingest stores the bytes, records the
//! job and produces `doc.uploaded`; the stage renders, stores and records the thumbnail and
//! produces `doc.processed`), prints each job's per-stage status, then reads `doc.processed`
//! back with a fresh consumer group and decodes every event through the registry.
//!
//! The broker keeps its log in memory, so each run starts from an empty state directory
//! database and object store as well (`--state-dir`, default `.run`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use docflow_embedded::{Stack, unique_name};
use docflow_events::topics::DOC_PROCESSED;
use docflow_events::{DocProcessed, EventCodec};
use futures::StreamExt;
use rdkafka::Message;
use rdkafka::consumer::{Consumer, StreamConsumer};

use crate::schemas;

/// Options of `docflow dev`.
#[derive(Debug, Args)]
pub(crate) struct DevArgs {
    /// Directory of sample documents to upload.
    #[arg(long, default_value = "samples")]
    samples: PathBuf,
    /// State directory (broker files, registry database, object store).
    #[arg(long, env = "DOCFLOW_STATE_DIR", default_value = ".run")]
    state_dir: PathBuf,
    /// Broker port (default: a free port).
    #[arg(long)]
    broker_port: Option<u16>,
    /// Schema registry port (default: a free port).
    #[arg(long)]
    registry_port: Option<u16>,
    /// Ingest API port (default: a free port).
    #[arg(long)]
    ingest_port: Option<u16>,
    /// Tenant the samples are uploaded as.
    #[arg(long, default_value = "demo")]
    tenant: String,
    /// Keep the stack running after the demo until Ctrl-C.
    #[arg(long)]
    keep_running: bool,
}

struct Uploaded {
    name: String,
    id: String,
}

/// The token `docflow dev` uploads with.
const DEV_TOKEN: &str = "dev-token";

pub(crate) async fn run(args: DevArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    step("starting broker, schema registry, topics, ingest API and the thumbnails stage");
    // The broker keeps its log in memory, so the stack empties the state directory's
    // database and object store to match.
    let mut stack = Stack::builder()
        .pipeline_names()
        .state_dir(&args.state_dir)
        .ports(args.broker_port, args.registry_port, args.ingest_port)
        .token(DEV_TOKEN, &args.tenant)
        .ingest()
        .start()
        .await?;
    step(&format!("broker at {}", stack.broker.bootstrap_servers()));
    step(&format!("schema registry at {}", stack.registry.url()));
    step(&format!(
        "topics {} and {}",
        stack.topics.uploaded, stack.topics.processed
    ));

    step("registering schemas");
    let codec = EventCodec::from_url(&stack.registry.url(), Duration::from_secs(10))?;
    schemas::register_all(&codec).await?;
    step(&format!("ingest API at {}", stack.ingest_url()));
    stack.start_thumbnails().await?;
    step("thumbnails stage started (group thumbnails)");
    step(&format!(
        "uploading samples from {} through POST /v1/documents?wait=30s",
        args.samples.display()
    ));
    let uploaded = upload_samples(&args, stack.ingest_url()).await?;

    step("reading doc.processed back with a new consumer group");
    read_back(&stack.kafka(), &codec, &uploaded).await?;

    println!(
        "\nOK: {} documents uploaded, thumbnailed and announced on doc.processed in {:.1}s",
        uploaded.len(),
        started.elapsed().as_secs_f64()
    );
    if args.keep_running {
        println!(
            "\nstack is up (Ctrl-C to stop):\n  KAFKA_BOOTSTRAP_SERVERS={}\n  SCHEMA_REGISTRY_URL={}\n  ingest API: {}",
            stack.broker.bootstrap_servers(),
            stack.registry.url(),
            stack.ingest_url()
        );
        let _ = tokio::signal::ctrl_c().await;
    }
    stack.stop().await?;
    Ok(())
}

fn step(msg: &str) {
    println!("==> {msg}");
}

async fn upload_samples(args: &DevArgs, ingest: &str) -> anyhow::Result<Vec<Uploaded>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(&args.samples)
        .with_context(|| format!("reading {}", args.samples.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no sample documents in {}", args.samples.display());
    }
    let http = reqwest::Client::new();
    let mut out = Vec::new();
    for path in files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bytes = std::fs::read(&path)?;
        let size = bytes.len();
        let resp = http
            .post(format!("{}/v1/documents", ingest))
            .query(&[("filename", name.as_str()), ("wait", "30s")])
            .bearer_auth(DEV_TOKEN)
            .body(bytes)
            .send()
            .await?;
        let status = resp.status();
        let body: serde_json::Value = resp.json().await?;
        if !status.is_success() {
            println!(
                "    {name:<22} {status}: {}",
                body["message"].as_str().unwrap_or("-")
            );
            continue;
        }
        let id = body["job_id"].as_str().unwrap_or_default().to_owned();
        // 200: every stage finished within the wait; 202: still running, ask the job.
        let job: serde_json::Value = if status == reqwest::StatusCode::OK {
            body
        } else {
            http.get(format!("{}/v1/jobs/{id}", ingest))
                .bearer_auth(DEV_TOKEN)
                .send()
                .await?
                .json()
                .await?
        };
        println!(
            "    {name:<22} {size:>6} B  {}  job {}…  pipeline={}",
            status.as_u16(),
            id.get(..12).unwrap_or(&id),
            job["pipeline"].as_str().unwrap_or("?")
        );
        for stage in job["stages"].as_array().into_iter().flatten() {
            let output = &stage["output"];
            let detail = if output.is_object() {
                format!(
                    "{}x{} px, {} page(s)",
                    output["width"], output["height"], output["pages"]
                )
            } else {
                stage["error"].as_str().unwrap_or("").to_owned()
            };
            println!(
                "        {:<16} {:<13} v{} {:>4} ms  {detail}",
                stage["stage"].as_str().unwrap_or("?"),
                stage["status"].as_str().unwrap_or("?"),
                stage["stage_version"].as_i64().unwrap_or(0),
                stage["duration_ms"].as_i64().unwrap_or(0),
            );
        }
        if let Some(url) = job["thumbnail_url"].as_str() {
            println!("        thumbnail        {}{url}", ingest);
        }
        out.push(Uploaded { name, id });
    }
    Ok(out)
}

async fn read_back(
    kafka: &docflow_config::KafkaArgs,
    codec: &EventCodec,
    uploaded: &[Uploaded],
) -> anyhow::Result<()> {
    let consumer: StreamConsumer = kafka
        .client_config("docflow-dev")
        .set("group.id", unique_name("docflow-dev"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()?;
    consumer.subscribe(&[DOC_PROCESSED])?;
    let mut want: HashMap<&str, &Uploaded> = uploaded.iter().map(|u| (u.id.as_str(), u)).collect();
    let mut stream = consumer.stream();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !want.is_empty() {
        let msg = match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(m)) => m?,
            Ok(None) => bail!("consumer stream ended"),
            Err(_) => bail!("timed out; {} events not read back", want.len()),
        };
        let event: DocProcessed = codec.decode(msg.payload().unwrap_or_default()).await?;
        let Some(u) = want.remove(event.document_id.as_str()) else {
            continue;
        };
        if msg.key() != Some(u.id.as_bytes()) {
            bail!("{}: record key is not the document id", u.name);
        }
        println!(
            "    [{}]@{:<3} {:<22} tenant={} stage={} v{} outcome={:?} {}ms",
            msg.partition(),
            msg.offset(),
            u.name,
            event.tenant_id,
            event.stage,
            event.stage_version,
            event.outcome,
            event.duration_ms
        );
    }
    Ok(())
}
