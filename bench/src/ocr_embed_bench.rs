//! OCR + embeddings: the stage's service times (OCR of a scanned page, text layer of a PDF
//! page, embedding chunks at several batch sizes on the CPU), exact search over the stored
//! vectors, and the latency a user sees end to end (`POST /v1/documents?wait=` of a scan
//! through ingest, the broker, the stage and the result store). `make bench` writes
//! `bench/results/ocr-embed.md`.

use std::fmt::Write as _;
use std::io::Cursor;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use docflow_bench::{paced, percentiles, report_head};
use docflow_embed::{DIMENSIONS, Embedder};
use docflow_embedded::{pdfium_library, workspace_root};
use docflow_ocr_embeddings::ocr::{Ocr, OcrConfig};
use docflow_ocr_embeddings::pages::{Extractor, Limits};
use docflow_store::{ChunkRow, DocumentText, PageText, TextKey, TextSource, TextStore};
use image::{DynamicImage, ImageFormat};
use pdfium_render::prelude::PdfRenderConfig;
use rand::Rng;

#[derive(Debug, Parser)]
struct Args {
    /// OCR runs of the scanned page.
    #[arg(long, default_value_t = 10)]
    pages: usize,
    /// Chunks embedded per batch size.
    #[arg(long, default_value_t = 256)]
    chunks: usize,
    /// Chunks stored for the search measurement (the largest size; also 1/10 of it).
    #[arg(long, default_value_t = 50_000)]
    search_chunks: usize,
    /// Uploads of a scan through the stack.
    #[arg(long, default_value_t = 20)]
    uploads: usize,
    /// Uploads per second.
    #[arg(long, default_value_t = 0.5)]
    rate: f64,
    /// Markdown report to write.
    #[arg(long, default_value = "bench/results/ocr-embed.md")]
    out: std::path::PathBuf,
}

/// Lines of the benchmark page: a business letter's worth of ordinary text.
fn page_lines(variant: usize) -> Vec<String> {
    let mut lines = vec![format!("Reference {variant:06}: quarterly service review")];
    let body = [
        "The supplier delivered all ordered items within the agreed time.",
        "Invoices are payable within thirty days of the delivery date.",
        "Support tickets were answered within two business days on average.",
        "The contract renews each year unless either party cancels in writing.",
        "Prices for the next period rise by three percent, as agreed in March.",
        "Please send questions about this report to the account manager.",
    ];
    for i in 0..36 {
        lines.push(body[i % body.len()].to_owned());
    }
    lines
}

/// A text PDF of `lines` (Helvetica 11 pt, A4).
fn text_pdf(lines: &[String]) -> Vec<u8> {
    let mut content = String::from("BT /F1 11 Tf 14 TL 60 790 Td\n");
    for l in lines {
        content.push_str(&format!("({l}) Tj T*\n"));
    }
    content.push_str("ET\n");
    let objects = [
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>".to_owned(),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_owned(),
        format!("<< /Length {} >>\nstream\n{content}\nendstream", content.len()),
    ];
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n{o}\nendobj\n", i + 1).as_bytes());
    }
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for o in offsets {
        out.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

/// The page of `pdf` rendered at `dpi` as a grey PNG: a scan without a text layer.
fn scan_png(pdf: &[u8], dpi: f32) -> anyhow::Result<Vec<u8>> {
    let pdfium = docflow_stage::media::pdfium(&pdfium_library())?;
    let doc = pdfium.load_pdf_from_byte_slice(pdf, None)?;
    let page = doc.pages().get(0)?;
    let image = page
        .render_with_config(&PdfRenderConfig::new().set_target_width((595.0 * dpi / 72.0) as i32))?
        .as_image()?;
    let mut out = Vec::new();
    DynamicImage::ImageLuma8(image.to_luma8())
        .write_to(&mut Cursor::new(&mut out), ImageFormat::Png)?;
    Ok(out)
}

fn extractor(threads: usize) -> anyhow::Result<Extractor> {
    let tools = workspace_root().join(".tools");
    let ocr = Ocr::load(OcrConfig {
        models: tools.join("models/ppocr"),
        runtime: tools.join("lib/libonnxruntime.so"),
        threads,
        max_side: 2000,
        min_confidence: 0.5,
    })?;
    Ok(Extractor::new(
        &pdfium_library(),
        ocr,
        Limits {
            max_pages: 500,
            max_page_pixels: 40_000_000,
            max_total_pixels: 1_000_000_000,
            dpi: 300.0,
            max_side: 2000,
        },
    )?)
}

fn time_ms(mut f: impl FnMut() -> anyhow::Result<()>, runs: usize) -> anyhow::Result<Vec<f64>> {
    f()?; // warm-up
    let mut out = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f()?;
        out.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(out)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);

    // 1. Page reading, in process (what one worker does).
    let lines = page_lines(0);
    let pdf = text_pdf(&lines);
    let scan = scan_png(&pdf, 200.0)?;
    let mut x = extractor(cores)?;
    let text_layer = time_ms(
        || x.extract(&pdf).map(|_| ()).map_err(Into::into),
        args.pages * 10,
    )?;
    let mut text = String::new();
    let ocr = time_ms(
        || {
            text = x.extract(&scan)?.pages.remove(0).text;
            Ok(())
        },
        args.pages,
    )?;
    let want = lines.join(" ");
    let norm = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let cer = edit_distance(&norm(&text), &norm(&want)) as f64 / want.chars().count() as f64;
    let (o50, o99, omax) = percentiles(ocr);
    let (t50, t99, tmax) = percentiles(text_layer);
    println!("OCR page p50 {o50:.0} ms, CER {cer:.4}; text layer p50 {t50:.2} ms");

    // 2. Embedding on the CPU: chunks of a page at several batch sizes.
    let embedder = Embedder::load(&workspace_root().join(".tools/models/minilm"), "cpu")?;
    let page_text = lines.join("\n");
    let long: String = (0..8)
        .map(|_| page_text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let windows = embedder.chunks(&long, 32)?; // full 254-piece windows
    let full: Vec<String> = windows.iter().map(|c| c.text.clone()).collect();
    let sentences: Vec<String> = lines.clone();
    let mut embed_rows = Vec::new();
    for (kind, texts) in [
        ("full window (≈254 tokens)", &full),
        ("sentence (≈14 tokens)", &sentences),
    ] {
        let tokens = embedder.token_count(&texts[0])?;
        for batch in [1usize, 8, 32] {
            let pool: Vec<&str> = texts
                .iter()
                .cycle()
                .take(batch)
                .map(String::as_str)
                .collect();
            let runs = (args.chunks / batch).max(3);
            let times = time_ms(
                || embedder.embed(&pool).map(|_| ()).map_err(Into::into),
                runs,
            )?;
            let (p50, p99, _) = percentiles(times);
            let per_s = batch as f64 * 1000.0 / p50;
            println!("embed {kind} x{batch}: p50 {p50:.1} ms ({per_s:.0}/s)");
            embed_rows.push((kind, tokens, batch, p50, p99, per_s));
        }
    }

    // 3. Exact search over stored vectors (SQLite), k = 10.
    let dir = tempfile::tempdir()?;
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("search.db").display()
    );
    let pool = docflow_store::open(&url, 4).await?;
    let store = TextStore::new(pool);
    let mut rng = rand::rng();
    let mut search_rows = Vec::new();
    let mut stored = 0usize;
    let per_doc = 100usize;
    for target in [args.search_chunks / 10, args.search_chunks] {
        while stored < target {
            let chunks: Vec<ChunkRow> = (0..per_doc)
                .map(|i| {
                    let mut v: Vec<f32> =
                        (0..DIMENSIONS).map(|_| rng.random::<f32>() - 0.5).collect();
                    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                    v.iter_mut().for_each(|x| *x /= n);
                    ChunkRow {
                        page: 1 + (i / 10) as u32,
                        start: 0,
                        end: 40,
                        text: "forty characters of chunk text for rows".to_owned(),
                        vector: v,
                    }
                })
                .collect();
            let doc = format!("{:064x}", stored);
            let text = DocumentText {
                pages: vec![PageText {
                    page: 1,
                    source: TextSource::TextLayer,
                    confidence: None,
                    text: String::new(),
                }],
                chunks,
            };
            let key = TextKey {
                tenant_id: "bench",
                document_id: &doc,
                stage: "ocr-embeddings",
                stage_version: 1,
            };
            store.put(key, &text).await?;
            stored += per_doc;
        }
        let query = embedder.embed(&["when is the invoice due"])?.remove(0);
        let mut times = Vec::new();
        for _ in 0..10 {
            let t = Instant::now();
            let hits = store.search("bench", "ocr-embeddings", &query, 10).await?;
            anyhow::ensure!(hits.len() == 10);
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        let (p50, p99, _) = percentiles(times);
        println!("search over {stored} chunks: p50 {p50:.0} ms");
        search_rows.push((stored, p50, p99));
    }

    // 4. End to end: scans uploaded with ?wait=120s.
    let mut stack = docflow_bench::stack()
        .start()
        .await
        .context("starting the stack")?;
    stack.start_ocr_embeddings().await?;
    let base = format!("{}/v1/documents?wait=120s", stack.ingest_url());
    let scans: std::sync::Arc<Vec<Vec<u8>>> = std::sync::Arc::new(
        (0..args.uploads + 1)
            .map(|i| scan_png(&text_pdf(&page_lines(i + 1)), 200.0))
            .collect::<anyhow::Result<_>>()?,
    );
    let http = reqwest::Client::new();
    let post = |body: Vec<u8>| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let r = http
                .post(&base)
                .bearer_auth(docflow_bench::TOKEN)
                .body(body)
                .send()
                .await?;
            anyhow::ensure!(r.status() == 200, "status {} (wait ran out?)", r.status());
            let job: serde_json::Value = r.json().await?;
            anyhow::ensure!(
                job["pipeline"] == "done",
                "pipeline {}: {job}",
                job["pipeline"]
            );
            Ok(())
        }
    };
    post(scans[args.uploads].clone()).await?; // warm-up
    let e2e = paced(args.uploads, args.rate, |i| post(scans[i].clone())).await?;
    stack.stop().await?;
    let (e50, e99, emax) = percentiles(e2e);
    println!("end to end: p50 {e50:.0} ms p99 {e99:.0} ms");

    let mut md = report_head(
        "OCR + embeddings",
        "ocr-embed-bench",
        "CPU only (no GPU on this machine); PP-OCRv6 small det+rec (rapidocr 3.10.0) on onnxruntime 1.32.0; all-MiniLM-L6-v2 on candle 0.11.1 (f32); broker: embedded Nisshi (memory); result store: SQLite",
    );
    writeln!(
        md,
        "## Page reading (one worker, in process; {cores} onnxruntime threads)\n"
    )?;
    writeln!(
        md,
        "The page: an A4 letter of {} lines of 11 pt Helvetica ({} characters).\n",
        lines.len(),
        want.chars().count()
    )?;
    writeln!(
        md,
        "| input | p50 | p99 | max | pages/s per worker at p50 |\n|---|---|---|---|---|"
    )?;
    writeln!(
        md,
        "| PDF page with a text layer (no OCR) | {t50:.2} ms | {t99:.2} ms | {tmax:.2} ms | {:.0} |",
        1000.0 / t50
    )?;
    writeln!(
        md,
        "| the same page scanned at 200 dpi (PNG 1653×2339), OCR | {o50:.0} ms | {o99:.0} ms | {omax:.0} ms | {:.2} |",
        1000.0 / o50
    )?;
    writeln!(
        md,
        "\nOCR character error rate on that page (Levenshtein / characters, white space normalised): **{:.2} %**.\n",
        cer * 100.0
    )?;
    writeln!(
        md,
        "## Embedding (CPU, candle, one model, {} runs per row after a warm-up)\n",
        args.chunks
    )?;
    writeln!(
        md,
        "| chunk | tokens | batch | p50 per batch | p99 | chunks/s |\n|---|---|---|---|---|---|"
    )?;
    for (kind, tokens, batch, p50, p99, per_s) in &embed_rows {
        writeln!(
            md,
            "| {kind} | {tokens} | {batch} | {p50:.1} ms | {p99:.1} ms | {per_s:.0} |"
        )?;
    }
    writeln!(
        md,
        "\nThe same model in sentence-transformers 6.3.0 on torch (CPU) on this machine: `bench/results/ocr-embed-reference.md`.\n"
    )?;
    writeln!(
        md,
        "## Search (`GET /v1/search`'s store query: exact, every chunk of the tenant scored; k = 10; SQLite)\n"
    )?;
    writeln!(md, "| chunks of the tenant | p50 | p99 |\n|---|---|---|")?;
    for (n, p50, p99) in &search_rows {
        writeln!(md, "| {n} | {p50:.0} ms | {p99:.0} ms |")?;
    }
    writeln!(
        md,
        "\nLinear in the tenant's chunks: past ~10^5 chunks per tenant an ANN index (pgvector HNSW) is the next step.\n"
    )?;
    writeln!(
        md,
        "## End to end (`POST /v1/documents?wait=120s` of a scanned page → `200` with the text, chunks and summary)\n"
    )?;
    writeln!(
        md,
        "{} unique scans (PNG, A4 at 200 dpi) at {}/s after one warm-up, stage defaults (workers: the runtime's default):\n",
        args.uploads, args.rate
    )?;
    writeln!(
        md,
        "| p50 | p99 | max |\n|---|---|---|\n| {e50:.0} ms | {e99:.0} ms | {emax:.0} ms |"
    )?;
    docflow_bench::write_report(&args.out, &md)
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut diag = row[0];
        row[0] = i;
        for j in 1..=b.len() {
            let up = row[j];
            row[j] = (row[j] + 1)
                .min(row[j - 1] + 1)
                .min(diag + usize::from(a[i - 1] != b[j - 1]));
            diag = up;
        }
    }
    row[b.len()]
}
