//! Embedding throughput and the GPU check, in one binary small enough to carry to a GPU
//! machine with f16 weights (`bench/gpu/check.sh`):
//!
//! - `embed-bench export-f16 --from DIR --to DIR`: the model as f16 safetensors (~45 MB).
//! - `embed-bench check --model-dir DIR`: GPU vs CPU vectors on the committed reference texts
//!   (one padded batch and each text alone); fails under a cosine of 0.9999.
//! - `embed-bench run --device D --budgets 4096,16384,65536`: page chunks (254-piece windows
//!   of generated prose) queued and batched by the stage's rule (take in order while
//!   longest × count ≤ budget), each batch timed; chunks/s and p50/p99 batch latency per
//!   budget. `--texts-out` writes the chunks for the sentence-transformers comparison.
//! - `embed-bench fairness --out bench/results/fairness.md`: one-page documents' latency
//!   through the stage's batcher alone, while a document of 1,760 chunks is embedded, and
//!   while a heavy tenant keeps four large documents in flight (goal: p99 within 2× of
//!   alone plus one batch time).

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use docflow_bench::{percentiles, report_head, write_report};
use docflow_embed::{Embedder, cosine};

#[derive(Debug, Parser)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write the model as f16 safetensors (with its tokenizer and config).
    ExportF16 {
        #[arg(long, default_value = ".tools/models/minilm")]
        from: PathBuf,
        #[arg(long)]
        to: PathBuf,
    },
    /// Compare GPU and CPU vectors on the reference texts.
    Check {
        #[arg(long, default_value = ".tools/models/minilm")]
        model_dir: PathBuf,
        /// The GPU to check.
        #[arg(long, default_value = "cuda:0")]
        device: String,
        /// Reference texts (crates/docflow-embed/tests/data/minilm_reference.json).
        #[arg(
            long,
            default_value = "crates/docflow-embed/tests/data/minilm_reference.json"
        )]
        reference: PathBuf,
    },
    /// Time batches of page chunks at several token budgets.
    Run {
        #[arg(long, default_value = ".tools/models/minilm")]
        model_dir: PathBuf,
        #[arg(long, default_value = "auto")]
        device: String,
        /// Batch token budgets (padded tokens per batch).
        #[arg(long, value_delimiter = ',', default_value = "4096,16384,65536")]
        budgets: Vec<usize>,
        /// Chunks per budget.
        #[arg(long, default_value_t = 2048)]
        chunks: usize,
        /// Write the chunk texts here (JSON list), for bench/gpu/st_gpu_bench.py.
        #[arg(long)]
        texts_out: Option<PathBuf>,
        /// Markdown report.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Small documents' latency through the batcher while large ones are embedded.
    Fairness {
        #[arg(long, default_value = ".tools/models/minilm")]
        model_dir: PathBuf,
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Chunks of the large document.
        #[arg(long, default_value_t = 1760)]
        large_chunks: usize,
        /// Small documents per case (100: a p99 that is not just the slowest of a few).
        #[arg(long, default_value_t = 100)]
        small: usize,
        /// Markdown report.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

/// The chunks of `words` words of prose, cut as the stage cuts pages.
fn chunk_texts(embedder: &Embedder, words: usize) -> anyhow::Result<Vec<String>> {
    Ok(embedder
        .chunks(&prose(words), 32)?
        .into_iter()
        .map(|c| c.text)
        .collect())
}

/// Latencies (ms) of `small` one-page documents, each sent `gap` after the last one's answer,
/// through `batcher`, while
/// `load` (large documents, each resent as soon as it is done while `small` run) keeps it
/// busy.
async fn small_latencies(
    batcher: &docflow_embed::Batcher,
    page: &[String],
    small: usize,
    gap: std::time::Duration,
    load: &[Vec<String>],
) -> anyhow::Result<Vec<f64>> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut heavy = Vec::new();
    for doc in load {
        let (b, doc, stop) = (batcher.clone(), doc.clone(), stop.clone());
        heavy.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                b.embed(doc.clone()).await?;
            }
            anyhow::Ok(())
        }));
    }
    if !load.is_empty() {
        // The large documents are in the batcher first.
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    // One after the other (a user uploading pages), so the small documents never queue
    // behind each other: what they wait for is the load alone.
    let mut out = Vec::new();
    for _ in 0..small {
        let t = Instant::now();
        batcher.embed(page.to_vec()).await?;
        out.push(t.elapsed().as_secs_f64() * 1000.0);
        tokio::time::sleep(gap).await;
    }
    // The load's documents still in the batcher are abandoned (the batcher drops a request
    // nobody waits for), so the next case starts on an idle model.
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in heavy {
        h.abort();
    }
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    Ok(out)
}

fn fairness(
    model_dir: &std::path::Path,
    device: &str,
    large_chunks: usize,
    small: usize,
    out: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let embedder = Embedder::load(model_dir, device)?;
    let budget = if embedder.device().starts_with("cuda") {
        docflow_embed::GPU_BATCH_TOKENS
    } else {
        docflow_embed::CPU_BATCH_TOKENS
    };
    let device_name = embedder.device().to_owned();
    // A one-page document (~300 words) and a large one of `large_chunks` chunks.
    let page = chunk_texts(&embedder, 300)?;
    let mut words = 2_000usize;
    let mut large = chunk_texts(&embedder, words)?;
    while large.len() < large_chunks {
        words *= 2;
        large = chunk_texts(&embedder, words)?;
    }
    large.truncate(large_chunks);
    let medium: Vec<String> = large.iter().take(large_chunks / 8).cloned().collect();
    // One full batch of the large document's chunks, timed alone.
    let mut batch: Vec<&str> = Vec::new();
    let mut longest = 0;
    for t in &large {
        let n = embedder.token_count(t)?;
        if !batch.is_empty() && longest.max(n) * (batch.len() + 1) > budget {
            break;
        }
        longest = longest.max(n);
        batch.push(t);
    }
    embedder.embed(&batch)?;
    let t = Instant::now();
    embedder.embed(&batch)?;
    let batch_ms = t.elapsed().as_secs_f64() * 1000.0;
    let batched = batch.len();
    let batcher = docflow_embed::Batcher::start(embedder, budget)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let gap = std::time::Duration::from_millis(50);
    let rows = runtime.block_on(async {
        let alone = small_latencies(&batcher, &page, small, gap, &[]).await?;
        let behind_large =
            small_latencies(&batcher, &page, small, gap, std::slice::from_ref(&large)).await?;
        let heavy_tenant = vec![
            medium.clone(),
            medium.clone(),
            medium.clone(),
            medium.clone(),
        ];
        let beside_tenant = small_latencies(&batcher, &page, small, gap, &heavy_tenant).await?;
        anyhow::Ok(vec![
            ("alone".to_owned(), alone),
            (
                format!("while a document of {} chunks is embedded", large.len()),
                behind_large,
            ),
            (
                format!(
                    "while another tenant keeps 4 documents of {} chunks in flight",
                    medium.len()
                ),
                beside_tenant,
            ),
        ])
    })?;
    let (_, alone_p99, _) = percentiles(rows[0].1.clone());
    let goal = 2.0 * alone_p99 + batch_ms;
    let mut md = report_head(
        "Fairness: small documents' embedding latency beside large ones",
        "embed-bench",
        &format!(
            "device {device_name}; the stage's batcher (budget {budget} padded tokens; a full batch of {batched} chunks takes {batch_ms:.0} ms alone); one-page documents of {} chunks, each sent {} ms after the last one's answer",
            page.len(),
            gap.as_millis()
        ),
    );
    writeln!(
        md,
        "Goal: a small document's p99 within 2× its p99 alone plus one batch time = **{goal:.0} ms**.\n\n| small documents ({small}) | p50 | p99 | max | within the goal |\n|---|---|---|---|---|"
    )?;
    for (case, latencies) in rows {
        let (p50, p99, max) = percentiles(latencies);
        println!("fairness: {case}: p50 {p50:.0} ms p99 {p99:.0} ms max {max:.0} ms");
        writeln!(
            md,
            "| {case} | {p50:.0} ms | {p99:.0} ms | {max:.0} ms | {} |",
            if p99 <= goal { "yes" } else { "no" }
        )?;
    }
    if let Some(out) = out {
        write_report(out, &md)?;
    }
    Ok(())
}

/// Generated prose: the page text the chunks are cut from (deterministic).
fn prose(words: usize) -> String {
    const VOCAB: [&str; 48] = [
        "invoice",
        "delivery",
        "contract",
        "payment",
        "supplier",
        "customer",
        "the",
        "of",
        "within",
        "days",
        "agreed",
        "service",
        "report",
        "quarterly",
        "review",
        "support",
        "ticket",
        "renewal",
        "notice",
        "written",
        "party",
        "price",
        "increase",
        "percent",
        "March",
        "account",
        "manager",
        "question",
        "order",
        "item",
        "shipment",
        "warehouse",
        "terms",
        "conditions",
        "apply",
        "unless",
        "stated",
        "otherwise",
        "and",
        "to",
        "for",
        "is",
        "are",
        "was",
        "will",
        "be",
        "by",
        "on",
    ];
    let mut state = 0x2545_f491_u64;
    let mut out = String::with_capacity(words * 8);
    for i in 0..words {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.push_str(VOCAB[(state % VOCAB.len() as u64) as usize]);
        out.push(if i % 14 == 13 { '.' } else { ' ' });
        if i % 14 == 13 {
            out.push(' ');
        }
    }
    out
}

fn check(
    model_dir: &std::path::Path,
    device: &str,
    reference: &std::path::Path,
) -> anyhow::Result<()> {
    let data: serde_json::Value = serde_json::from_slice(
        &std::fs::read(reference).with_context(|| reference.display().to_string())?,
    )?;
    let texts: Vec<String> = data["cases"]
        .as_array()
        .context("no cases")?
        .iter()
        .filter_map(|c| c["text"].as_str().map(str::to_owned))
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let cpu = Embedder::load(model_dir, "cpu")?;
    let gpu = Embedder::load(model_dir, device)?;
    println!("check: {} vs {}", gpu.device(), cpu.device());
    let want = cpu.embed(&refs)?;
    let batched = gpu.embed(&refs)?;
    let mut worst = 1.0f32;
    for ((text, w), g) in texts.iter().zip(&want).zip(&batched) {
        let alone = gpu.embed(&[text.as_str()])?.remove(0);
        let (c, a) = (cosine(g, w), cosine(&alone, w));
        worst = worst.min(c).min(a);
        let shown: String = text.chars().take(40).collect();
        println!("  cosine batched {c:.7} alone {a:.7}  {shown:?}");
    }
    println!(
        "check: worst cosine GPU vs CPU {worst:.7} over {} texts",
        texts.len()
    );
    if worst < 0.9999 {
        bail!("GPU vectors differ from the CPU's: worst cosine {worst:.7} < 0.9999");
    }
    Ok(())
}

fn run(
    model_dir: &std::path::Path,
    device: &str,
    budgets: &[usize],
    chunks: usize,
    texts_out: Option<&std::path::Path>,
    out: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let embedder = Embedder::load(model_dir, device)?;
    println!("run: {} ({})", embedder.device(), embedder.device_reason());
    let mut texts: Vec<String> = Vec::with_capacity(chunks);
    let mut words = 2_000usize;
    while texts.len() < chunks {
        texts = embedder
            .chunks(&prose(words), 32)?
            .into_iter()
            .map(|c| c.text)
            .collect();
        words *= 2;
    }
    texts.truncate(chunks);
    let tokens: Vec<usize> = texts
        .iter()
        .map(|t| embedder.token_count(t))
        .collect::<Result<_, _>>()?;
    if let Some(path) = texts_out {
        std::fs::write(path, serde_json::to_vec(&texts)?)?;
    }
    // Warm-up (kernels, allocator, caches).
    let warm: Vec<&str> = texts.iter().take(8).map(String::as_str).collect();
    embedder.embed(&warm)?;
    let mut rows = Vec::new();
    for &budget in budgets {
        let mut latencies = Vec::new();
        let mut sizes = Vec::new();
        let clock = Instant::now();
        let mut at = 0;
        while at < texts.len() {
            // The batcher's rule: in order while longest × count stays within the budget.
            let (mut end, mut longest) = (at, 0usize);
            while end < texts.len() {
                let l = longest.max(tokens[end]);
                if end > at && l * (end - at + 1) > budget {
                    break;
                }
                longest = l;
                end += 1;
            }
            let batch: Vec<&str> = texts[at..end].iter().map(String::as_str).collect();
            let t = Instant::now();
            let vectors = embedder.embed(&batch)?;
            latencies.push(t.elapsed().as_secs_f64() * 1000.0);
            anyhow::ensure!(vectors.len() == batch.len());
            sizes.push(batch.len());
            at = end;
        }
        let seconds = clock.elapsed().as_secs_f64();
        let per_s = texts.len() as f64 / seconds;
        let (p50, p99, _) = percentiles(latencies);
        let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
        println!(
            "run: budget {budget}: {per_s:.0} chunks/s, batch of {mean:.0}: p50 {p50:.1} ms p99 {p99:.1} ms"
        );
        rows.push((budget, mean, per_s, p50, p99));
    }
    if let Some(out) = out {
        let mut md = report_head(
            "Embeddings: chunks/s by batch token budget",
            "embed-bench",
            &format!(
                "device {}; {} chunks of ≈{} tokens",
                embedder.device(),
                texts.len(),
                tokens.iter().sum::<usize>() / tokens.len().max(1)
            ),
        );
        writeln!(
            md,
            "| budget (padded tokens) | chunks per batch | chunks/s | batch p50 | batch p99 |\n|---|---|---|---|---|"
        )?;
        for (budget, mean, per_s, p50, p99) in rows {
            writeln!(
                md,
                "| {budget} | {mean:.0} | {per_s:.0} | {p50:.1} ms | {p99:.1} ms |"
            )?;
        }
        write_report(out, &md)?;
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    match Args::parse().command {
        Command::ExportF16 { from, to } => {
            let bytes = docflow_embed::gpu::export_f16(&from, &to)?;
            println!("wrote {} ({bytes} bytes of f16 weights)", to.display());
            Ok(())
        }
        Command::Check {
            model_dir,
            device,
            reference,
        } => check(&model_dir, &device, &reference),
        Command::Run {
            model_dir,
            device,
            budgets,
            chunks,
            texts_out,
            out,
        } => run(
            &model_dir,
            &device,
            &budgets,
            chunks,
            texts_out.as_deref(),
            out.as_deref(),
        ),
        Command::Fairness {
            model_dir,
            device,
            large_chunks,
            small,
            out,
        } => fairness(&model_dir, &device, large_chunks, small, out.as_deref()),
    }
}
