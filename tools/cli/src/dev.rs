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
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use docflow_embedded::{Broker, EmbeddedRegistry, Storage, free_port, unique_name};
use docflow_events::topics::DOC_PROCESSED;
use docflow_events::{DocProcessed, EventCodec};
use docflow_runtime::admin::ensure_topics;
use futures::StreamExt;
use rdkafka::Message;
use rdkafka::consumer::{Consumer, StreamConsumer};

use crate::{schemas, topics};

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
    std::fs::create_dir_all(&args.state_dir)
        .with_context(|| format!("creating {}", args.state_dir.display()))?;
    let state = args.state_dir.canonicalize()?;
    // A fresh broker (in memory) needs a fresh database and object store to match.
    for stale in [
        "docflow.db",
        "docflow.db-wal",
        "docflow.db-shm",
        "ingest.db",
    ] {
        let _ = std::fs::remove_file(state.join(stale));
    }
    let _ = std::fs::remove_dir_all(state.join("objects"));

    let port = match args.broker_port {
        Some(p) => p,
        None => free_port()?,
    };
    step(&format!("starting broker on 127.0.0.1:{port}"));
    let broker = Broker::start_in(&state.join("broker"), port, Storage::Memory).await?;
    let kafka = broker.kafka_args();

    let registry_db = format!("sqlite://{}", state.join("registry.db").display());
    let registry_addr = format!("127.0.0.1:{}", args.registry_port.unwrap_or(0)).parse()?;
    let registry = EmbeddedRegistry::start_on(&registry_db, registry_addr).await?;
    step(&format!("schema registry at {}", registry.url()));

    step("creating topics");
    ensure_topics(
        &kafka,
        &topics::specs(topics::UPLOADED_PARTITIONS, 1),
        Duration::from_secs(30),
    )
    .await?;

    step("registering schemas");
    let codec = EventCodec::from_url(&registry.url(), Duration::from_secs(10))?;
    schemas::register_all(&codec).await?;

    let database = format!("sqlite://{}", state.join("docflow.db").display());
    let ingest = start_ingest(&args, &state, &database, &broker, &registry).await?;
    step(&format!("ingest API at {}", ingest.base));
    let thumbnails = start_thumbnails(&state, &database, &broker, &registry)?;
    step("thumbnails stage started (group thumbnails)");
    step(&format!(
        "uploading samples from {} through POST /v1/documents?wait=30s",
        args.samples.display()
    ));
    let uploaded = upload_samples(&args, &ingest).await?;

    step("reading doc.processed back with a new consumer group");
    read_back(&kafka, &codec, &uploaded).await?;

    println!(
        "\nOK: {} documents uploaded, thumbnailed and announced on doc.processed in {:.1}s",
        uploaded.len(),
        started.elapsed().as_secs_f64()
    );
    if args.keep_running {
        println!(
            "\nstack is up (Ctrl-C to stop):\n  KAFKA_BOOTSTRAP_SERVERS={}\n  SCHEMA_REGISTRY_URL={}",
            broker.bootstrap_servers(),
            registry.url()
        );
        let _ = tokio::signal::ctrl_c().await;
    }
    let _ = ingest.stop.send(());
    let _ = ingest.task.await;
    let _ = thumbnails.stop.send(());
    thumbnails.task.await??;
    registry.stop().await;
    drop(broker);
    Ok(())
}

struct Ingest {
    base: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

struct Stage {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// The thumbnails stage, on the same database and object store as ingest.
fn start_thumbnails(
    state: &Path,
    database: &str,
    broker: &Broker,
    registry: &EmbeddedRegistry,
) -> anyhow::Result<Stage> {
    let config = docflow_thumbnails::Config::local(
        &broker.bootstrap_servers(),
        &registry.url(),
        database,
        &state.join("objects"),
        &docflow_embedded::pdfium_library(),
    )?;
    // Fail here, with the reason, rather than inside the stage's task.
    docflow_thumbnails::Renderer::new(&config.pdfium_lib, config.max_px)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(docflow_thumbnails::run_until(config, async move {
        let _ = stopped.await;
    }));
    Ok(Stage { stop, task })
}

async fn start_ingest(
    args: &DevArgs,
    state: &Path,
    database: &str,
    broker: &Broker,
    registry: &EmbeddedRegistry,
) -> anyhow::Result<Ingest> {
    let config = docflow_ingest::Config::local(
        &broker.bootstrap_servers(),
        &registry.url(),
        database,
        &state.join("objects"),
        &[(DEV_TOKEN, args.tenant.as_str())],
    )?;
    let app = docflow_ingest::build_state(&config).await?;
    let listener =
        tokio::net::TcpListener::bind(("127.0.0.1", args.ingest_port.unwrap_or(0))).await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(docflow_ingest::serve(app, listener, async move {
        let _ = stopped.await;
    }));
    Ok(Ingest { base, stop, task })
}

fn step(msg: &str) {
    println!("==> {msg}");
}

async fn upload_samples(args: &DevArgs, ingest: &Ingest) -> anyhow::Result<Vec<Uploaded>> {
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
            .post(format!("{}/v1/documents", ingest.base))
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
            http.get(format!("{}/v1/jobs/{id}", ingest.base))
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
            println!("        thumbnail        {}{url}", ingest.base);
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
