//! `docflow calibrate`: a stage's service time measured by running its real work
//! (`Stage::process`, worker processes and models included) in process on sample
//! documents; prints p50/p99, the spread and the `docflow plan` line they feed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use docflow_embedded::{pdfium_library, workspace_binary, workspace_root};
use docflow_events::stages::{OCR_EMBEDDINGS, THUMBNAILS};
use docflow_events::{DocUploaded, stage_keys};
use docflow_stage::{Document, Stage, StageArgs};

/// Arguments of `docflow calibrate`.
#[derive(Debug, Args)]
pub(crate) struct CalibrateArgs {
    /// `thumbnails` or `ocr-embeddings`.
    #[arg(long)]
    stage: String,
    /// Directory of sample documents (what the stage sees in production, ideally).
    #[arg(long, default_value = "samples")]
    samples: PathBuf,
    /// Times each sample is processed (after one warm-up each).
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

async fn measure<S: Stage>(
    stage: &S,
    docs: &[(String, Bytes)],
    runs: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut times = Vec::new();
    for (name, bytes) in docs {
        let (document_id, idempotency_key) = stage_keys(bytes, S::NAME, S::VERSION);
        let doc = Document {
            event: DocUploaded {
                document_id,
                tenant_id: "calibrate".into(),
                object_uri: format!("calibrate/{name}"),
                content_type: String::new(),
                size_bytes: i64::try_from(bytes.len())?,
                original_file_name: Some(name.clone()),
                uploaded_at: 0,
                producer_version: "docflow-calibrate".into(),
            },
            bytes: bytes.clone(),
            idempotency_key,
            attempt: 1,
            progress: None,
        };
        for run in 0..=runs {
            let started = Instant::now();
            stage
                .process(&doc)
                .await
                .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
            if run > 0 {
                times.push(started.elapsed());
            }
        }
    }
    Ok(times)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub(crate) async fn run_calibrate(args: CalibrateArgs) -> anyhow::Result<()> {
    let mut docs = Vec::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&args.samples)
        .with_context(|| format!("reading {}", args.samples.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    for p in paths {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        docs.push((name, Bytes::from(std::fs::read(&p)?)));
    }
    anyhow::ensure!(
        !docs.is_empty(),
        "no sample documents in {}",
        args.samples.display()
    );
    // The stage's own configuration; Kafka, the registry and the stores are not used here.
    let stage_args = StageArgs::local(
        "127.0.0.1:9",
        "http://127.0.0.1:9",
        "sqlite::memory:",
        &std::env::temp_dir(),
    )?;
    let registry = prometheus::Registry::new();
    let started = Instant::now();
    let mut times = match args.stage.as_str() {
        THUMBNAILS => {
            let mut config = docflow_thumbnails::Config::local(stage_args, &pdfium_library())?;
            config.isolation.worker_exe = Some(workspace_binary("docflow-thumbnails")?);
            let stage = docflow_thumbnails::build(&config, &registry).await?;
            measure(&stage, &docs, args.runs).await?
        }
        OCR_EMBEDDINGS => {
            let mut config = docflow_ocr_embeddings::Config::local(
                stage_args,
                &workspace_root().join(".tools"),
            )?;
            config.pdfium_lib = pdfium_library();
            config.isolation.worker_exe = Some(workspace_binary("docflow-ocr-embeddings")?);
            let stage = docflow_ocr_embeddings::build(&config, &registry).await?;
            measure(&stage, &docs, args.runs).await?
        }
        other => anyhow::bail!("unknown stage {other:?}: thumbnails or ocr-embeddings"),
    };
    times.sort();
    let (p50, p99) = (percentile(&times, 50.0), percentile(&times, 99.0));
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{}: {} documents × {} runs ({} measurements, {:.1}s): p50 {:.1} ms, p99 {:.1} ms, min {:.1} ms, max {:.1} ms, p99/p50 {:.2}",
        args.stage,
        docs.len(),
        args.runs,
        times.len(),
        started.elapsed().as_secs_f64(),
        ms(p50),
        ms(p99),
        ms(times[0]),
        ms(times[times.len() - 1]),
        ms(p99) / ms(p50).max(1e-9)
    );
    println!(
        "next: docflow plan --stage {} --p50 {}ms --p99 {}ms ...",
        args.stage,
        ms(p50).ceil(),
        ms(p99).ceil()
    );
    if cfg!(debug_assertions) {
        println!("note: a debug build of docflow and its workers; measure with a release build");
    }
    if times.len() < 100 {
        println!(
            "note: with fewer than 100 measurements the p99 is the largest few; give more samples or --runs"
        );
    }
    Ok(())
}
