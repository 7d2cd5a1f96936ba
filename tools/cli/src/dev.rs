//! `docflow dev`: the embedded stack end to end on one machine.
//!
//! Starts a Nisshi broker, the schema registry, the ingest API and two stages (consumer groups
//! `thumbnails` and `ocr-embeddings`), declares the topics, registers the schemas, uploads
//! each sample document through `POST /v1/documents?wait=60s` (ingest stores the bytes,
//! records the job and produces `doc.uploaded`; each stage does its work, records it and
//! produces `doc.processed`), prints each job's per-stage status and summary, searches the
//! samples by meaning (`GET /v1/search`), reads `doc.processed` back with a fresh
//! consumer group and decodes every event through the registry, and shows the tenant's
//! rollup from the third group, `analytics-rollup` (`GET /v1/analytics`).
//!
//! The broker keeps its log in memory, so each run starts from an empty state directory
//! database and object store as well (`--state-dir`, default `.run`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use docflow_events::topics::DOC_PROCESSED;
use docflow_events::{DocProcessed, EventCodec};
use docflow_stack::{Stack, unique_name};
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
/// The admin token of the console `docflow dev` serves.
const DEV_ADMIN_TOKEN: &str = "dev-admin";

pub(crate) async fn run(args: DevArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    step("starting broker, schema registry, topics, ingest API and the stages");
    // The broker keeps its log in memory, so the stack empties the state directory's
    // database and object store to match.
    let mut stack = Stack::builder()
        .pipeline_names()
        .state_dir(&args.state_dir)
        .ports(args.broker_port, args.registry_port, args.ingest_port)
        .token(DEV_TOKEN, &args.tenant)
        .ingest_with(|c| {
            c.stages = docflow_stack::stages::stage_names();
            c.admin_tokens = vec![DEV_ADMIN_TOKEN.to_owned()];
            c.console_groups = docflow_stack::stages::stage_names();
            // The rollup reads uploads and results: its lag on both.
            c.console_groups.push(
                docflow_replay::health::GroupSpec::analytics_rollup(
                    docflow_store::analytics::LIVE_GROUP,
                    &c.topic,
                    &c.processed_topic,
                )
                .to_string(),
            );
        })
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
    for stage in docflow_stack::STAGES {
        stage.start(&mut stack).await?;
        step(&format!(
            "{} stage started (group {})",
            stage.name,
            stack.group(stage.name)
        ));
    }
    stack.start_analytics().await?;
    step("analytics rollup started (group analytics-rollup)");
    step(&format!(
        "uploading samples from {} through POST /v1/documents?wait=60s",
        args.samples.display()
    ));
    let uploaded = upload_samples(&args, stack.ingest_url()).await?;

    step("searching the samples by meaning: GET /v1/search");
    search(stack.ingest_url(), &uploaded).await?;

    step("reading doc.processed back with a new consumer group");
    read_back(&stack.kafka(), &codec, &uploaded).await?;

    step("the tenant's rollup: GET /v1/analytics?granularity=day");
    analytics(stack.ingest_url(), uploaded.len()).await?;

    println!(
        "\nOK: {} documents uploaded, thumbnailed, read, embedded and announced on doc.processed in {:.1}s",
        uploaded.len(),
        started.elapsed().as_secs_f64()
    );
    if args.keep_running {
        println!(
            "\nstack is up (Ctrl-C to stop):\n  KAFKA_BOOTSTRAP_SERVERS={}\n  SCHEMA_REGISTRY_URL={}\n  ingest API: {}\n  console: {}/console (admin token {DEV_ADMIN_TOKEN})",
            stack.broker.bootstrap_servers(),
            stack.registry.url(),
            stack.ingest_url(),
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
            .query(&[("filename", name.as_str()), ("wait", "60s")])
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
            let detail = if output.get("chunks").is_some() {
                format!(
                    "{} page(s), {} read by OCR, {} chunk(s) embedded",
                    output["pages"], output["ocr_pages"], output["chunks"]
                )
            } else if output.is_object() {
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
        if let Some(summary) = job["summary"].as_str().filter(|s| !s.is_empty()) {
            println!("        summary          {}", clip(summary, 140));
        }
        out.push(Uploaded { name, id });
    }
    Ok(out)
}

fn clip(text: &str, max: usize) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &one_line[..at]),
        None => one_line,
    }
}

/// Waits until the rollup counted every upload and both stages' results, then prints it.
async fn analytics(ingest: &str, uploads: usize) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let body: serde_json::Value = http
            .get(format!("{ingest}/v1/analytics"))
            .query(&[("granularity", "day")])
            .bearer_auth(DEV_TOKEN)
            .send()
            .await?
            .json()
            .await?;
        let totals = &body["totals"];
        let stage_results: i64 = docflow_stack::STAGES
            .iter()
            .flat_map(|s| totals["stages"][s.name].as_object().into_iter().flatten())
            .filter_map(|(_, n)| n.as_i64())
            .sum();
        let done = totals["documents"].as_i64() == Some(uploads as i64)
            && stage_results >= (docflow_stack::STAGES.len() * uploads) as i64;
        if done || tokio::time::Instant::now() >= deadline {
            println!(
                "    tenant {}: {} uploads, {} bytes, {} the rollup dead-lettered",
                body["tenant"].as_str().unwrap_or("?"),
                totals["documents"],
                totals["bytes"],
                totals["rollup_dead_lettered"]
            );
            for (ct, c) in totals["by_content_type"].as_object().into_iter().flatten() {
                println!("        {ct:<24} {} document(s)", c["documents"]);
            }
            for (stage, outcomes) in totals["stages"].as_object().into_iter().flatten() {
                println!("        {stage:<24} {outcomes}");
            }
            if !done {
                bail!("the rollup did not count every upload and stage result within 30 s");
            }
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Questions whose answers are in the samples, in other words than the samples use.
const QUERIES: [&str; 4] = [
    "how much do we owe the supplier",
    "quarterly revenue growth",
    "when does the contract have to be renewed",
    "which goods arrived at the warehouse",
];

async fn search(ingest: &str, uploaded: &[Uploaded]) -> anyhow::Result<()> {
    let names: HashMap<&str, &str> = uploaded
        .iter()
        .map(|u| (u.id.as_str(), u.name.as_str()))
        .collect();
    let http = reqwest::Client::new();
    for q in QUERIES {
        let resp = http
            .get(format!("{ingest}/v1/search"))
            .query(&[("q", q), ("k", "1")])
            .bearer_auth(DEV_TOKEN)
            .send()
            .await?;
        let status = resp.status();
        let body: serde_json::Value = resp.json().await?;
        if !status.is_success() {
            bail!("search failed: {status}: {}", body["message"]);
        }
        for hit in body["results"].as_array().into_iter().flatten() {
            let id = hit["document_id"].as_str().unwrap_or("");
            println!(
                "    {q:?}\n        -> {} p.{} (score {:.2}): {}",
                names.get(id).copied().unwrap_or(id),
                hit["page"],
                hit["score"].as_f64().unwrap_or(0.0),
                clip(hit["text"].as_str().unwrap_or(""), 100)
            );
        }
    }
    Ok(())
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
    // One event per document and stage.
    let mut want: HashMap<(&str, &str), &Uploaded> = uploaded
        .iter()
        .flat_map(|u| {
            docflow_stack::STAGES
                .iter()
                .map(move |s| ((u.id.as_str(), s.name), u))
        })
        .collect();
    let mut stream = consumer.stream();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !want.is_empty() {
        let msg = match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(m)) => m?,
            Ok(None) => bail!("consumer stream ended"),
            Err(_) => bail!("timed out; {} events not read back", want.len()),
        };
        let event: DocProcessed = codec.decode(msg.payload().unwrap_or_default()).await?;
        let key = want
            .keys()
            .find(|(id, stage)| *id == event.document_id && *stage == event.stage)
            .copied();
        let Some(u) = key.and_then(|k| want.remove(&k)) else {
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
