//! `docflow dev`: the embedded stack end to end on one machine.
//!
//! Starts a Nisshi broker and the schema registry, declares the topics, registers the
//! schemas, stores each sample document in the local object directory, produces its
//! `doc.uploaded` event (idempotent producer, waits for the ack), then reads the topic back
//! with a fresh consumer group and decodes every event through the registry.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Args;
use docflow_embedded::{Broker, EmbeddedRegistry, Storage, free_port, unique_name};
use docflow_events::topics::DOC_UPLOADED;
use docflow_events::{DocUploaded, EventCodec, document_id};
use docflow_runtime::admin::ensure_topics;
use docflow_runtime::producer::idempotent_producer;
use futures::StreamExt;
use rdkafka::Message;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::FutureRecord;

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
    partition: i32,
    offset: i64,
}

pub(crate) async fn run(args: DevArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    std::fs::create_dir_all(&args.state_dir)
        .with_context(|| format!("creating {}", args.state_dir.display()))?;
    let state = args.state_dir.canonicalize()?;

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

    step(&format!(
        "uploading samples from {}",
        args.samples.display()
    ));
    let uploaded = produce_samples(&args, &state, &kafka, &codec).await?;

    step("reading doc.uploaded back with a new consumer group");
    read_back(&kafka, &codec, &uploaded).await?;

    println!(
        "\nOK: {} documents produced, consumed and decoded in {:.1}s",
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
    registry.stop().await;
    drop(broker);
    Ok(())
}

fn step(msg: &str) {
    println!("==> {msg}");
}

/// The MIME type of known document formats, from their first bytes.
fn sniff(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"%PDF-") {
        Some("application/pdf")
    } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"II*\0") || bytes.starts_with(b"MM\0*") {
        Some("image/tiff")
    } else {
        None
    }
}

async fn produce_samples(
    args: &DevArgs,
    state: &Path,
    kafka: &docflow_config::KafkaArgs,
    codec: &EventCodec,
) -> anyhow::Result<Vec<Uploaded>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(&args.samples)
        .with_context(|| format!("reading {}", args.samples.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no sample documents in {}", args.samples.display());
    }
    let producer = idempotent_producer(kafka, "docflow-dev")?;
    let objects = state.join("objects").join(&args.tenant);
    std::fs::create_dir_all(&objects)?;
    let mut out = Vec::new();
    for path in files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let bytes = std::fs::read(&path)?;
        let Some(content_type) = sniff(&bytes) else {
            println!("    skip {name}: not a PDF, PNG, JPEG or TIFF");
            continue;
        };
        let id = document_id(&bytes);
        let object = objects.join(&id);
        std::fs::write(&object, &bytes)?;
        let event = DocUploaded {
            document_id: id.clone(),
            tenant_id: args.tenant.clone(),
            object_uri: format!("file://{}", object.display()),
            content_type: content_type.to_owned(),
            size_bytes: i64::try_from(bytes.len())?,
            original_file_name: Some(name.clone()),
            uploaded_at: now_millis(),
            producer_version: concat!("docflow-cli/", env!("CARGO_PKG_VERSION")).to_owned(),
        };
        let payload = codec.encode(&event).await?;
        let delivery = producer
            .send(
                FutureRecord::to(DOC_UPLOADED).key(&id).payload(&payload),
                Duration::from_secs(30),
            )
            .await
            .map_err(|(e, _)| anyhow::anyhow!("producing {name}: {e}"))?;
        let (partition, offset) = (delivery.partition, delivery.offset);
        println!(
            "    {name:<22} {} bytes  id {}…  -> {DOC_UPLOADED}[{partition}]@{offset}",
            bytes.len(),
            &id[..12]
        );
        out.push(Uploaded {
            name,
            id,
            partition,
            offset,
        });
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
    consumer.subscribe(&[DOC_UPLOADED])?;
    let mut want: HashMap<(i32, i64), &Uploaded> = uploaded
        .iter()
        .map(|u| ((u.partition, u.offset), u))
        .collect();
    let mut stream = consumer.stream();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !want.is_empty() {
        let msg = match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(m)) => m?,
            Ok(None) => bail!("consumer stream ended"),
            Err(_) => bail!("timed out; {} events not read back", want.len()),
        };
        let Some(u) = want.remove(&(msg.partition(), msg.offset())) else {
            continue;
        };
        let event: DocUploaded = codec.decode(msg.payload().unwrap_or_default()).await?;
        if event.document_id != u.id || msg.key() != Some(u.id.as_bytes()) {
            bail!("{}: read back a different document", u.name);
        }
        println!(
            "    [{}]@{:<3} {:<22} tenant={} type={} size={}B",
            msg.partition(),
            msg.offset(),
            event.original_file_name.as_deref().unwrap_or("-"),
            event.tenant_id,
            event.content_type,
            event.size_bytes
        );
    }
    Ok(())
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
