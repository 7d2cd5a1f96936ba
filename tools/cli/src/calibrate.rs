//! `docflow calibrate`: a stage's service time measured by running its real work
//! (`Stage::process`, worker processes and models included) in process on sample
//! documents; prints p50/p99, the spread and the `docflow plan` line they feed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::Args;
use docflow_stage::StageArgs;

/// Arguments of `docflow calibrate`.
#[derive(Debug, Args)]
pub(crate) struct CalibrateArgs {
    /// The stage (`thumbnails`, `ocr-embeddings`: any of the pipeline's stages).
    #[arg(long)]
    stage: String,
    /// Directory of sample documents (what the stage sees in production, ideally).
    #[arg(long, default_value = "samples")]
    samples: PathBuf,
    /// Times each sample is processed (after one warm-up each).
    #[arg(long, default_value_t = 5)]
    runs: usize,
}

/// The nearest-rank percentile `p` (0..=100) of `sorted`, which is not empty.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    docflow_store::stats::quantile(sorted, p / 100.0).unwrap_or_default()
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
    let started = Instant::now();
    let Some(stage) = docflow_stack::stages::stage(&args.stage) else {
        anyhow::bail!(
            "unknown stage {:?}: one of {}",
            args.stage,
            docflow_stack::stages::stage_names().join(", ")
        );
    };
    let documents = docs.len();
    let mut times = stage.measure(stage_args, docs, args.runs).await?;
    times.sort();
    let (p50, p99) = (percentile(&times, 50.0), percentile(&times, 99.0));
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{}: {} documents × {} runs ({} measurements, {:.1}s): p50 {:.1} ms, p99 {:.1} ms, min {:.1} ms, max {:.1} ms, p99/p50 {:.2}",
        args.stage,
        documents,
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
