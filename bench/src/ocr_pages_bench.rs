//! OCR on real pages through one real page-reading worker (the release
//! `docflow-ocr-embeddings` in worker mode, as the stage runs it): accuracy per page (in
//! reading order and as a bag of words), time and CPU per page against RapidOCR on the same
//! pages, the worker's memory page after page (the soak), peak memory by page size, pages
//! turned 90/180/270 degrees, degenerate shapes, and a 10-page scan as one document.
//! `make bench` writes `bench/results/ocr-pages.md`.
//!
//! The pages: every page with a text layer of 40+ words of the PDFs in `--pdfs` (pypdf
//! 7.1.1's test resources: a public-domain scan, forms, papers, multi-column layouts),
//! rendered at 150, 200 or 300 dpi in turn with ±24 grey levels of noise and a 0.5° skew;
//! every fourth page also turned a quarter, a half or three quarters. The reference is each
//! page's own text layer in pdfium's order.

use std::fmt::Write as _;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use docflow_bench::report_head;
use docflow_ocr_embeddings::pages::Extracted;
use docflow_ocr_embeddings::{ReadAnswer, ReadWorker};
use docflow_stack::measure::{levenshtein, words};
use docflow_stack::pdf::{image_pdf, noisy_rotated, text_pdf};
use docflow_stack::{pdfium_library, workspace_binary, workspace_root};
use docflow_stage::isolate::{IsolationArgs, Workers};

type WorkerPool = Workers<ReadWorker>;
use image::{DynamicImage, GrayImage, ImageFormat};
use pdfium_render::prelude::PdfRenderConfig;

#[derive(Debug, Parser)]
struct Args {
    /// Markdown report to write.
    #[arg(long, default_value = "bench/results/ocr-pages.md")]
    out: PathBuf,
    /// Folders of real PDFs (`scripts/fetch-bench-pdfs.sh`), in the order their pages are read.
    #[arg(long, default_values = [".tools/bench-dense", ".tools/bench-pdfs"])]
    pdfs: Vec<PathBuf>,
    /// Pages read through one worker (the soak): the real pages, again at other
    /// resolutions, until this many.
    #[arg(long, default_value_t = 200)]
    pages: usize,
    /// Most pages taken from one PDF.
    #[arg(long, default_value_t = 12)]
    per_pdf: usize,
    /// Python with rapidocr 3.10.0 and onnxruntime 1.32.0: reads the same dense pages in the
    /// same run (bench/reference/rapidocr_pages.py) for the cost table.
    #[arg(long)]
    rapidocr_python: Option<PathBuf>,
    /// Every page's row as CSV (page, name, dpi, turn, words, accuracies, time, CPU, RSS).
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Only the reading-order pages (printed, no report): for working on reading order.
    #[arg(long)]
    order_only: bool,
    /// Only orientation: every turned page and as many upright ones (the page before each
    /// turned one), the turn found for each; the report to --out (give one: the default is
    /// the soak's).
    #[arg(long)]
    orientation_only: bool,
    /// Only the cost on the dense pages, at one onnxruntime thread a worker (the stage's
    /// default) and at one a core, beside RapidOCR at its default threads and at one
    /// (with --rapidocr-python): writes that report to --out.
    #[arg(long)]
    cost_only: bool,
    /// Only memory: the dense pages and the page-size table read with the detector in strips
    /// (the stage's default `--ocr-det-strip-pixels`) and on whole pages, words and peak
    /// memory side by side; the report to --out.
    #[arg(long)]
    memory_only: bool,
}

/// A page to read.
struct Sample {
    name: String,
    dpi: u32,
    /// Degrees clockwise the page was turned (what the reader must undo).
    turned: u16,
    png: Vec<u8>,
    size: (u32, u32),
    /// The reference words, in order.
    truth: Vec<String>,
}

/// One page read by the worker.
struct Row {
    sample: usize,
    ms: f64,
    cpu_ms: f64,
    accuracy: f64,
    recall: f64,
    rotation: u16,
    rss: u64,
    peak: u64,
    data: u64,
    timings: docflow_ocr_embeddings::ocr::Timings,
    failed: Option<String>,
}

const DPIS: [u32; 3] = [200, 150, 300];
const TURNS: [u16; 3] = [90, 180, 270];
const MIB: f64 = 1048576.0;

fn png(image: &DynamicImage) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    image.write_to(&mut Cursor::new(&mut out), ImageFormat::Png)?;
    Ok(out)
}

fn turn(image: GrayImage, degrees: u16) -> GrayImage {
    match degrees {
        90 => image::imageops::rotate90(&image),
        180 => image::imageops::rotate180(&image),
        270 => image::imageops::rotate270(&image),
        _ => image,
    }
}

/// A page of a real PDF with a text layer.
struct RealPage {
    /// The PDF's file name.
    name: String,
    pdf: Vec<u8>,
    /// 0-based.
    index: u16,
    text: String,
}

impl RealPage {
    fn label(&self) -> String {
        format!("{} p{}", self.name, self.index + 1)
    }
}

/// Every page with 40+ words of the PDFs in `dirs`, at most `per_pdf` a PDF.
fn real_pages(dirs: &[PathBuf], per_pdf: usize) -> anyhow::Result<Vec<RealPage>> {
    let mut out = Vec::new();
    for dir in dirs {
        out.extend(real_pages_in(dir, per_pdf)?);
    }
    Ok(out)
}

fn real_pages_in(dir: &Path, per_pdf: usize) -> anyhow::Result<Vec<RealPage>> {
    let pdfium = docflow_stage::media::pdfium(&pdfium_library())?;
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("{} (run scripts/fetch-bench-pdfs.sh)", dir.display()))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".pdf"))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let Ok(bytes) = std::fs::read(dir.join(&name)) else {
            continue;
        };
        let Ok(doc) = pdfium.load_pdf_from_byte_slice(&bytes, None) else {
            continue; // encrypted or broken: not a page to measure OCR on
        };
        let mut taken = 0;
        for (i, page) in doc.pages().iter().enumerate() {
            if taken >= per_pdf {
                break;
            }
            let text = page.text().map(|t| t.all()).unwrap_or_default();
            if words(&text).len() >= 40 {
                out.push(RealPage {
                    name: name.clone(),
                    pdf: bytes.clone(),
                    index: i as u16,
                    text,
                });
                taken += 1;
            }
        }
    }
    Ok(out)
}

/// Page `index` of `pdf` rendered at `dpi` (within 4000 px) in grey.
fn render(pdf: &[u8], index: u16, dpi: u32) -> anyhow::Result<GrayImage> {
    let pdfium = docflow_stage::media::pdfium(&pdfium_library())?;
    let doc = pdfium.load_pdf_from_byte_slice(pdf, None)?;
    let page = doc.pages().get(i32::from(index))?;
    let width = (page.width().value * dpi as f32 / 72.0) as i32;
    let image = page
        .render_with_config(
            &PdfRenderConfig::new()
                .set_target_width(width.min(4000))
                .set_maximum_height(4000),
        )?
        .as_image()?;
    Ok(image.to_luma8())
}

fn samples(args: &Args) -> anyhow::Result<Vec<Sample>> {
    let pages = real_pages(&args.pdfs, args.per_pdf)?;
    anyhow::ensure!(!pages.is_empty(), "no page of 40+ words in {:?}", args.pdfs);
    let mut out = Vec::with_capacity(args.pages);
    let mut k = 0usize;
    while out.len() < args.pages {
        let page = &pages[k % pages.len()];
        let round = k / pages.len();
        let dpi = DPIS[(k % pages.len() + round) % DPIS.len()];
        let turned = if k % 4 == 3 {
            TURNS[(k / 4) % TURNS.len()]
        } else {
            0
        };
        let scan = turn(
            noisy_rotated(&render(&page.pdf, page.index, dpi)?, 0.5),
            turned,
        );
        let size = scan.dimensions();
        out.push(Sample {
            name: page.label(),
            dpi,
            turned,
            png: png(&DynamicImage::ImageLuma8(scan))?,
            size,
            truth: words(&page.text),
        });
        k += 1;
    }
    Ok(out)
}

/// Word accuracy in order and word recall of `got` against `want`.
fn score(got: &[String], want: &[String]) -> (f64, f64) {
    let accuracy = 1.0 - levenshtein(got, want) as f64 / want.len().max(1) as f64;
    let mut pool: Vec<&String> = got.iter().collect();
    let mut found = 0usize;
    for w in want {
        if let Some(i) = pool.iter().position(|g| *g == w) {
            pool.swap_remove(i);
            found += 1;
        }
    }
    (accuracy.max(0.0), found as f64 / want.len().max(1) as f64)
}

/// The stage's pool as the stage builds it: its limits shared by its `--workers`.
fn stage_pool(exe: &Path) -> anyhow::Result<WorkerPool> {
    pool_of(exe, true)
}

/// A pool with the stage's limits and no bound on its workers (the bench uses one).
fn pool(exe: &Path) -> anyhow::Result<WorkerPool> {
    pool_of(exe, false)
}

fn pool_of(exe: &Path, bounded: bool) -> anyhow::Result<WorkerPool> {
    pool_with(exe, bounded, None)
}

/// `threads`: onnxruntime threads a worker (0: one a core); `None`: the stage's default.
fn pool_with(exe: &Path, bounded: bool, threads: Option<usize>) -> anyhow::Result<WorkerPool> {
    pool_tuned(exe, bounded, |config| {
        if let Some(t) = threads {
            config.read.ocr_threads = t;
        }
    })
}

/// A pool of the stage's configuration as `tune` changes it.
fn pool_tuned(
    exe: &Path,
    bounded: bool,
    tune: impl FnOnce(&mut docflow_ocr_embeddings::Config),
) -> anyhow::Result<WorkerPool> {
    let tools = workspace_root().join(".tools");
    let mut config = docflow_ocr_embeddings::Config::with_tools(&tools)?;
    tune(&mut config);
    let mut isolation = IsolationArgs {
        worker_exe: Some(exe.to_path_buf()),
        ..config.isolation.clone()
    };
    if bounded {
        isolation = isolation.for_workers(config.stage.consumer.workers);
    }
    Ok(Workers::new(isolation, &config.read_settings())?)
}

/// Reads `bytes` in `pool`'s worker: the answer, the wall time, or why not.
async fn read(pool: &WorkerPool, bytes: &[u8]) -> (Result<Extracted, String>, f64) {
    let t = Instant::now();
    let answer = pool.run(bytes).await;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    let parsed = answer
        .map_err(|e| format!("{}: {e}", e.class()))
        .and_then(|reply| match reply.value {
            ReadAnswer::Pages(extracted) => Ok(extracted),
            ReadAnswer::Plan(_) => Err("a plan for a document request".to_owned()),
        });
    (parsed, ms)
}

fn text_of(x: &Extracted) -> String {
    x.pages
        .iter()
        .map(|p| p.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A dense synthetic page (80 lines of 11 pt text) rendered `w` x `h`, noisy.
fn dense_page(w: u32, h: u32) -> anyhow::Result<Vec<u8>> {
    let lines: Vec<String> = (0..58)
        .map(|i| {
            format!(
                "{i:02} The committee reviewed clause {} of the agreement and noted that payments of {}.{:02} EUR fall due",
                i * 7 % 31,
                i * 131 % 9973,
                i * 17 % 100
            )
        })
        .collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let pdf = text_pdf(&[&refs]);
    let pdfium = docflow_stage::media::pdfium(&pdfium_library())?;
    let doc = pdfium.load_pdf_from_byte_slice(&pdf, None)?;
    let page = doc.pages().get(0)?;
    let image = page
        .render_with_config(&PdfRenderConfig::new().set_target_width(w as i32))?
        .as_image()?
        .to_luma8();
    let image = image::imageops::resize(&image, w, h, image::imageops::FilterType::Triangle);
    png(&DynamicImage::ImageLuma8(noisy_rotated(&image, 0.3)))
}

/// RapidOCR on `files`: (wall ms, CPU ms, text) per file, in order.
/// Writes `pages` as numbered PNG files in `dir`, for RapidOCR to read.
fn page_files<'a>(
    dir: &Path,
    pages: impl Iterator<Item = &'a [u8]>,
) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for (i, png) in pages.enumerate() {
        let path = dir.join(format!("{i:03}.png"));
        std::fs::write(&path, png)?;
        files.push(path);
    }
    Ok(files)
}

fn rapidocr(python: &Path, files: &[PathBuf]) -> anyhow::Result<Vec<(f64, f64, String)>> {
    rapidocr_with(python, files, None)
}

/// RapidOCR on `files`, at `threads` onnxruntime threads (`None`: its default).
fn rapidocr_with(
    python: &Path,
    files: &[PathBuf],
    threads: Option<usize>,
) -> anyhow::Result<Vec<(f64, f64, String)>> {
    let script = workspace_root().join("bench/reference/rapidocr_pages.py");
    let mut command = std::process::Command::new(python);
    command.arg(&script);
    if let Some(t) = threads {
        command.arg(format!("--threads={t}"));
    }
    let out = command
        .args(files)
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "rapidocr_pages.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut rows = Vec::new();
    for line in String::from_utf8(out.stdout)?.lines() {
        let v: serde_json::Value = serde_json::from_str(line)?;
        rows.push((
            v["ms"].as_f64().unwrap_or(f64::NAN),
            v["cpu_ms"].as_f64().unwrap_or(f64::NAN),
            v["text"].as_str().unwrap_or_default().to_owned(),
        ));
    }
    anyhow::ensure!(
        rows.len() == files.len(),
        "rapidocr_pages.py answered {} of {} pages",
        rows.len(),
        files.len()
    );
    Ok(rows)
}

/// A cost-table row's cells for docflow's reading of a page: the page, its words, in order
/// / found, wall / CPU.
fn our_cells(s: &Sample, r: &Row) -> String {
    format!(
        "{} ({} dpi) | {} | {:.1} / {:.1} % | {:.0} / {:.0} ms",
        s.name,
        s.dpi,
        s.truth.len(),
        r.accuracy * 100.0,
        r.recall * 100.0,
        r.ms,
        r.cpu_ms
    )
}

/// Table cells of byte counts in MiB: `1 MiB | 2 MiB`.
fn mib_cells(bytes: &[u64]) -> String {
    bytes
        .iter()
        .map(|&b| format!("{:.0} MiB", b as f64 / MIB))
        .collect::<Vec<_>>()
        .join(" | ")
}

fn mean(v: impl IntoIterator<Item = f64>) -> f64 {
    let (sum, n) = v
        .into_iter()
        .fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { f64::NAN } else { sum / n as f64 }
}

/// A page read: in order, found, wall ms, CPU ms.
type Scored = (f64, f64, f64, f64);

/// The upright pages of 300+ reference words among `first_pass`: the cost and memory
/// tables' pages.
fn dense_pages(first_pass: &[Sample]) -> anyhow::Result<Vec<&Sample>> {
    let dense: Vec<&Sample> = first_pass
        .iter()
        .filter(|s| s.truth.len() >= 300 && s.turned == 0)
        .collect();
    anyhow::ensure!(!dense.is_empty(), "no dense page");
    Ok(dense)
}

/// The cost table alone: the dense upright pages read by one worker at one onnxruntime
/// thread and at one a core (each page by both, in turn), then by RapidOCR at its default
/// threads and at one.
async fn cost_only(args: &Args, exe: &Path, first_pass: &[Sample]) -> anyhow::Result<()> {
    let dense = dense_pages(first_pass)?;
    let settings = [(1usize, "1 thread"), (0, "1 a core")];
    let mut pools = Vec::new();
    for (threads, _) in settings {
        let p = pool_with(exe, false, Some(threads))?;
        let (warm, _) = read(&p, &dense_page(800, 1000)?).await;
        warm.map_err(anyhow::Error::msg)?;
        pools.push(p);
    }
    // (accuracy, recall, wall ms, CPU ms) per page per setting.
    let mut ours: Vec<Vec<Scored>> = vec![Vec::new(); settings.len()];
    for s in &dense {
        for (k, p) in pools.iter().enumerate() {
            let (answer, ms) = read(p, &s.png).await;
            let x = answer.map_err(anyhow::Error::msg)?;
            let (accuracy, recall) = score(&words(&text_of(&x)), &s.truth);
            let cpu = x.cpu_seconds.unwrap_or(f64::NAN) * 1000.0;
            println!(
                "{} ({} dpi), {}: {ms:.0} ms, {cpu:.0} CPU ms, in order {:.1} %, found {:.1} %",
                s.name,
                s.dpi,
                settings[k].1,
                accuracy * 100.0,
                recall * 100.0
            );
            ours[k].push((accuracy, recall, ms, cpu));
        }
    }
    drop(pools);
    let mut theirs: Vec<(&str, Vec<Scored>)> = Vec::new();
    if let Some(python) = &args.rapidocr_python {
        let dir = tempfile::tempdir()?;
        let files = page_files(dir.path(), dense.iter().map(|s| s.png.as_slice()))?;
        for (threads, label) in [(None, "default threads"), (Some(1), "1 thread")] {
            let rows = rapidocr_with(python, &files, threads)?;
            let scored = rows
                .iter()
                .zip(&dense)
                .map(|((ms, cpu, text), s)| {
                    let (a, r) = score(&words(text), &s.truth);
                    (a, r, *ms, *cpu)
                })
                .collect();
            theirs.push((label, scored));
        }
    }
    let total = |v: &[Scored]| {
        (
            mean(v.iter().map(|r| r.0)) * 100.0,
            mean(v.iter().map(|r| r.1)) * 100.0,
            v.iter().map(|r| r.2).sum::<f64>(),
            v.iter().map(|r| r.3).sum::<f64>(),
        )
    };
    let mut md = docflow_bench::report_head(
        "OCR cost on dense real pages: docflow against RapidOCR",
        "ocr-pages-bench",
        "CPU only; the same PP-OCRv6 small det + rec ONNX models on onnxruntime 1.32.0 (docflow: one page-reading worker, the release docflow-ocr-embeddings; RapidOCR 3.10.0 in Python, angle classifier off, `bench/reference/rapidocr_pages.py`); each reader alone on the machine, one page at a time, warm",
    );
    md.push_str(&format!(
        "The pages: the {} upright pages of 300+ reference words of the first pass of `ocr-pages-bench` (the dense PDFs of `scripts/fetch-bench-pdfs.sh` rendered at 150/200/300 dpi with noise and a 0.5° skew). CPU: the reading process's user + system time for the page, every thread. **In order** / **found**: as in `ocr-pages.md`.\n\n## Totals\n\n| reader | onnxruntime threads | in order | found | wall | CPU | CPU against RapidOCR's default |\n|---|---|---|---|---|---|---|\n",
        dense.len()
    ));
    let reference_cpu = theirs.first().map(|(_, v)| total(v).3);
    let mut line = |who: &str, label: &str, v: &[Scored]| {
        let (a, r, wall, cpu) = total(v);
        let ratio = reference_cpu.map_or("—".to_owned(), |c| format!("{:.2}", cpu / c));
        md.push_str(&format!(
            "| {who} | {label} | {a:.1} % | {r:.1} % | {:.1} s | {:.1} s | {ratio} |\n",
            wall / 1000.0,
            cpu / 1000.0
        ));
    };
    for (k, (_, label)) in settings.iter().enumerate() {
        line("docflow", label, &ours[k]);
    }
    for (label, v) in &theirs {
        line("RapidOCR", label, v);
    }
    md.push_str("\n## Per page (CPU ms)\n\n| page | words |");
    for (_, label) in settings {
        md.push_str(&format!(" docflow, {label} |"));
    }
    for (label, _) in &theirs {
        md.push_str(&format!(" RapidOCR, {label} |"));
    }
    md.push_str("\n|---|---|");
    for _ in 0..settings.len() + theirs.len() {
        md.push_str("---|");
    }
    md.push('\n');
    for (i, s) in dense.iter().enumerate() {
        md.push_str(&format!(
            "| {} ({} dpi) | {} |",
            s.name,
            s.dpi,
            s.truth.len()
        ));
        for v in &ours {
            md.push_str(&format!(" {:.0} |", v[i].3));
        }
        for (_, v) in &theirs {
            md.push_str(&format!(" {:.0} |", v[i].3));
        }
        md.push('\n');
    }
    docflow_bench::write_report(&args.out, &md)?;
    Ok(())
}

/// The page sizes of the memory tables (each a dense synthetic page in a fresh worker).
const PAGE_SIZES: [(u32, u32); 6] = [
    (1000, 1000),
    (2000, 2000),
    (2480, 3508),
    (3000, 3000),
    (4000, 4000),
    (6000, 6000),
];

/// One page read with one detector setting.
#[derive(Clone)]
struct MemoryRow {
    accuracy: f64,
    recall: f64,
    cpu_ms: f64,
    peak: u64,
    text: String,
}

/// The dense pages and the page sizes read with the detector in strips and on whole pages:
/// words, time and peak memory side by side; the report to `args.out`.
async fn memory_only(args: &Args, exe: &Path, first_pass: &[Sample]) -> anyhow::Result<()> {
    let dense = dense_pages(first_pass)?;
    let strip = docflow_ocr_embeddings::ocr::DET_STRIP_PIXELS;
    let settings = [(strip, "strips"), (0usize, "whole page")];
    let pool_for = |pixels: usize| pool_tuned(exe, false, |c| c.read.ocr_det_strip_pixels = pixels);
    let mut ours: Vec<Vec<MemoryRow>> = vec![Vec::new(); settings.len()];
    let mut pools = Vec::new();
    for (pixels, _) in settings {
        let p = pool_for(pixels)?;
        let (warm, _) = read(&p, &dense_page(800, 1000)?).await;
        warm.map_err(anyhow::Error::msg)?;
        pools.push(p);
    }
    for s in &dense {
        for (k, p) in pools.iter().enumerate() {
            let (answer, ms) = read(p, &s.png).await;
            let x = answer.map_err(anyhow::Error::msg)?;
            let text = text_of(&x);
            let (accuracy, recall) = score(&words(&text), &s.truth);
            let cpu = x.cpu_seconds.unwrap_or(f64::NAN) * 1000.0;
            let peak = x.memory.unwrap_or_default().peak_rss_bytes;
            println!(
                "{} ({} dpi) {}: {ms:.0} ms, {cpu:.0} CPU ms, peak {:.0} MiB, in order {:.1} %, found {:.1} %",
                s.name,
                s.dpi,
                settings[k].1,
                peak as f64 / MIB,
                accuracy * 100.0,
                recall * 100.0
            );
            ours[k].push(MemoryRow {
                accuracy,
                recall,
                cpu_ms: cpu,
                peak,
                text,
            });
        }
    }
    drop(pools);
    let mut sizes: Vec<Vec<(u64, f64)>> = vec![Vec::new(); settings.len()];
    for (w, h) in PAGE_SIZES {
        let page = dense_page(w, h)?;
        for (k, (pixels, label)) in settings.iter().enumerate() {
            // A fresh worker, warmed by a small page first: onnxruntime's first run
            // allocates once for good (what every later page of the worker finds in place).
            let fresh = pool_for(*pixels)?;
            let (warm, _) = read(&fresh, &dense_page(800, 1000)?).await;
            warm.map_err(anyhow::Error::msg)?;
            let (answer, _) = read(&fresh, &page).await;
            let x = answer.map_err(anyhow::Error::msg)?;
            let peak = x.memory.unwrap_or_default().peak_rss_bytes;
            let cpu = x.cpu_seconds.unwrap_or(f64::NAN) * 1000.0;
            println!(
                "{w} x {h} {label}: peak {:.0} MiB, {cpu:.0} CPU ms",
                peak as f64 / MIB
            );
            sizes[k].push((peak, cpu));
        }
    }
    let mut md = docflow_bench::report_head(
        "OCR memory: the detector in strips against whole pages",
        "ocr-pages-bench",
        "CPU only; one page-reading worker per setting (the release docflow-ocr-embeddings, the stage's defaults but for `--ocr-det-strip-pixels`), one page at a time, warm; the page-size table a fresh worker per page",
    );
    let same = ours[0]
        .iter()
        .zip(&ours[1])
        .filter(|(a, b)| a.text == b.text)
        .count();
    md.push_str(&format!(
        "Strips: `--ocr-det-strip-pixels {strip}` (the default), runs of at most that many pixels of the detector's input, each reading {} rows of context beyond the rows it keeps; whole page: `--ocr-det-strip-pixels 0`. The pages: the {} upright pages of 300+ reference words of `ocr-pages-bench`'s first pass (as in `ocr-cost.md`). **Peak**: the page's own peak RSS (VmHWM, reset before each page). Same text: pages whose text came out identical either way.\n\n## Dense real pages\n\n| detector | in order | found | CPU | largest peak | mean peak | same text |\n|---|---|---|---|---|---|---|\n",
        docflow_ocr_embeddings::ocr::DET_STRIP_MARGIN,
        dense.len()
    ));
    for (k, (_, label)) in settings.iter().enumerate() {
        let v = &ours[k];
        md.push_str(&format!(
            "| {label} | {:.1} % | {:.1} % | {:.1} s | {:.0} MiB | {:.0} MiB | {same} of {} |\n",
            mean(v.iter().map(|r| r.accuracy)) * 100.0,
            mean(v.iter().map(|r| r.recall)) * 100.0,
            v.iter().map(|r| r.cpu_ms).sum::<f64>() / 1000.0,
            v.iter().map(|r| r.peak).max().unwrap_or(0) as f64 / MIB,
            mean(v.iter().map(|r| r.peak as f64)) / MIB,
            dense.len()
        ));
    }
    md.push_str("\n## Peak memory by page size (a dense synthetic page of 58 lines, noisy; a fresh worker each, warmed by an 800 x 1000 page first)\n\n| image | peak, strips | peak, whole page | CPU, strips | CPU, whole page |\n|---|---|---|---|---|\n");
    for (i, (w, h)) in PAGE_SIZES.iter().enumerate() {
        md.push_str(&format!(
            "| {w} x {h} | {:.0} MiB | {:.0} MiB | {:.0} ms | {:.0} ms |\n",
            sizes[0][i].0 as f64 / MIB,
            sizes[1][i].0 as f64 / MIB,
            sizes[0][i].1,
            sizes[1][i].1
        ));
    }
    md.push_str("\n## Per page\n\n| page | words | found, strips | found, whole | CPU ms, strips | CPU ms, whole | peak, strips | peak, whole |\n|---|---|---|---|---|---|---|---|\n");
    for (i, s) in dense.iter().enumerate() {
        let (a, b) = (&ours[0][i], &ours[1][i]);
        md.push_str(&format!(
            "| {} ({} dpi) | {} | {:.1} % | {:.1} % | {:.0} | {:.0} | {:.0} MiB | {:.0} MiB |\n",
            s.name,
            s.dpi,
            s.truth.len(),
            a.recall * 100.0,
            b.recall * 100.0,
            a.cpu_ms,
            b.cpu_ms,
            a.peak as f64 / MIB,
            b.peak as f64 / MIB
        ));
    }
    docflow_bench::write_report(&args.out, &md)?;
    Ok(())
}

/// The turned pages and the upright page before each through one worker: the turn found,
/// the words read and the time orientation took, per page; the report to `out`.
async fn orientation_only(exe: &Path, samples: &[Sample], out: &Path) -> anyhow::Result<()> {
    let worker = pool(exe)?;
    let chosen: Vec<&Sample> = samples
        .iter()
        .enumerate()
        .filter(|(i, s)| s.turned != 0 || i % 4 == 2)
        .map(|(_, s)| s)
        .collect();
    // Per turn (0, 90, 180, 270): pages, right, found, orientation ms, page ms.
    type Turn = (usize, usize, Vec<f64>, Vec<f64>, Vec<f64>);
    let mut by_turn: std::collections::BTreeMap<u16, Turn> = std::collections::BTreeMap::new();
    let mut misses = Vec::new();
    for s in &chosen {
        let (answer, ms) = read(&worker, &s.png).await;
        let x = answer.map_err(anyhow::Error::msg)?;
        let page = x.pages.first();
        let rotation = page
            .and_then(|p| p.layout.as_ref())
            .map_or(0, |l| l.rotation);
        let orient_ms = page.and_then(|p| p.timings).map_or(0.0, |t| t.orient_ms);
        let (_, recall) = score(&words(&text_of(&x)), &s.truth);
        // The reader turns the page back: 90 clockwise is undone by 270.
        let right = (360 - s.turned) % 360 == rotation;
        let e = by_turn.entry(s.turned).or_default();
        e.0 += 1;
        e.1 += usize::from(right);
        e.2.push(recall);
        e.3.push(orient_ms);
        e.4.push(ms);
        if !right {
            misses.push(format!(
                "{} ({} dpi) turned {}°, turned back {}°",
                s.name, s.dpi, s.turned, rotation
            ));
        }
        println!(
            "turned {:>3}, turned back {:>3}: {:>5.1} % found, orientation {orient_ms:>5.0} ms, page {ms:>6.0} ms  {} ({} dpi)",
            s.turned,
            rotation,
            recall * 100.0,
            s.name,
            s.dpi
        );
    }
    let (pages, right): (usize, usize) = by_turn
        .values()
        .fold((0, 0), |(p, r), e| (p + e.0, r + e.1));
    println!("orientation right on {right} of {pages} pages");
    let mut md = String::from("# OCR: finding each page's orientation\n\n");
    md.push_str(&format!(
        "Command: `cargo run --release -p docflow-bench --bin ocr-pages-bench -- --orientation-only --out {}` (after `cargo build --release -p docflow-ocr-embeddings` and `scripts/fetch-bench-pdfs.sh`)  \n",
        out.display()
    ));
    md.push_str(&format!(
        "Machine: 2 cores; CPU only; the release docflow-ocr-embeddings worker at the stage's defaults; onnxruntime 1.32.0; PP-OCRv6 small det + rec and the PP-OCR mobile v2.0 line classifier (rapidocr 3.10.0's).  \nDate: {}\n\n",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now())
    ));
    md.push_str("The pages: those of `ocr-pages.md`'s soak (real PDFs rendered at 150/200/300 dpi with noise and a 0.5° skew) that were turned 90°, 180° or 270°, and the upright page before each. A page is right when the reader turns it back upright. Orientation: the side-or-not test on the boxes' shapes, then the 3 longest lines up to 30 heights wide recognised as cut and half a turn round (the more confident reading wins; the line classifier only where they hold under 12 characters); its time includes the turned page's second detection.\n\n");
    md.push_str("| turned | pages | right | words found | orientation, mean | page, mean |\n|---|---|---|---|---|---|\n");
    for (turn, e) in &by_turn {
        md.push_str(&format!(
            "| {turn}° | {} | {} | {:.1} % | {:.0} ms | {:.0} ms |\n",
            e.0,
            e.1,
            mean(e.2.iter().copied()) * 100.0,
            mean(e.3.iter().copied()),
            mean(e.4.iter().copied())
        ));
    }
    md.push_str(&format!("\n**Right on {right} of {pages} pages.**"));
    if misses.is_empty() {
        md.push('\n');
    } else {
        md.push_str(" Missed:\n\n");
        for m in &misses {
            md.push_str(&format!("- {m}\n"));
        }
    }
    docflow_bench::write_report(out, &md)?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let exe = workspace_binary("docflow-ocr-embeddings")?;
    println!("building {} pages from {:?}", args.pages, args.pdfs);
    let samples = samples(&args)?;
    // The first pass over the real pages (later rounds read them again at other dpi).
    let distinct = real_pages(&args.pdfs, args.per_pdf)?
        .len()
        .min(samples.len());
    if args.orientation_only {
        return orientation_only(&exe, &samples, &args.out).await;
    }
    if args.memory_only {
        return memory_only(&args, &exe, &samples[..distinct]).await;
    }

    // 0. Reading order on pages whose order is known: columns, a table, a form, built
    // from the real pages' words (tools/stack/src/layouts.rs), scanned at each dpi.
    let vocabulary: Vec<String> = samples[..distinct]
        .iter()
        .flat_map(|s| s.truth.iter())
        .filter(|w| (2..=12).contains(&w.len()) && w.chars().all(char::is_alphanumeric))
        .cloned()
        .collect();
    let vocabulary: Vec<&str> = vocabulary.iter().map(String::as_str).collect();
    let layouts = docflow_stack::layouts::all(&vocabulary);
    let mut ordered: Vec<(String, u32, Vec<String>, Vec<u8>)> = Vec::new();
    for layout in &layouts {
        let pdf = docflow_stack::pdf::layout_pdf(std::slice::from_ref(&layout.runs));
        for dpi in [150, 200, 300] {
            let scan = noisy_rotated(&render(&pdf, 0, dpi)?, 0.5);
            ordered.push((
                layout.name.to_owned(),
                dpi,
                words(&layout.text()),
                png(&DynamicImage::ImageLuma8(scan))?,
            ));
        }
    }
    let mut order_rows: Vec<(f64, f64)> = Vec::new();
    let order_pool = pool(&exe)?;
    for (name, dpi, truth, png) in &ordered {
        let (answer, _) = read(&order_pool, png).await;
        let text = answer.map(|x| text_of(&x)).unwrap_or_default();
        if std::env::var_os("DOCFLOW_BENCH_SHOW_TEXT").is_some() {
            println!("--- {name} ({dpi} dpi)\n{text}\n---");
        }
        let got = words(&text);
        let (accuracy, recall) = score(&got, truth);
        println!(
            "order: {name} ({dpi} dpi): in order {:.1} %, found {:.1} %",
            accuracy * 100.0,
            recall * 100.0
        );
        order_rows.push((accuracy, recall));
    }
    let mut order_reference = None;
    if let Some(python) = &args.rapidocr_python {
        let dir = tempfile::tempdir()?;
        let files = page_files(dir.path(), ordered.iter().map(|o| o.3.as_slice()))?;
        order_reference = Some(rapidocr(python, &files)?);
    }
    drop(order_pool);
    if args.order_only {
        println!(
            "order: mean in order {:.1} %",
            mean(order_rows.iter().map(|r| r.0)) * 100.0
        );
        return Ok(());
    }

    if args.cost_only {
        return cost_only(&args, &exe, &samples[..distinct]).await;
    }

    // 1. Every page through ONE worker, in order: accuracy, time, CPU, memory after each.
    let worker = pool(&exe)?;
    let (warm, _) = read(&worker, &dense_page(800, 1000)?).await;
    warm.map_err(anyhow::Error::msg)?;
    let mut rows: Vec<Row> = Vec::with_capacity(samples.len());
    for (i, s) in samples.iter().enumerate() {
        let (answer, ms) = read(&worker, &s.png).await;
        let row = match answer {
            Ok(x) => {
                let (accuracy, recall) = score(&words(&text_of(&x)), &s.truth);
                let memory = x.memory.unwrap_or_default();
                Row {
                    sample: i,
                    ms,
                    cpu_ms: x.cpu_seconds.unwrap_or(f64::NAN) * 1000.0,
                    accuracy,
                    recall,
                    rotation: x
                        .pages
                        .first()
                        .and_then(|p| p.layout.as_ref())
                        .map_or(0, |l| l.rotation),
                    rss: memory.rss_bytes,
                    peak: memory.peak_rss_bytes,
                    data: memory.data_bytes,
                    timings: x.pages.first().and_then(|p| p.timings).unwrap_or_default(),
                    failed: None,
                }
            }
            Err(e) => Row {
                sample: i,
                ms,
                cpu_ms: f64::NAN,
                accuracy: 0.0,
                recall: 0.0,
                rotation: 0,
                rss: 0,
                peak: 0,
                data: 0,
                timings: Default::default(),
                failed: Some(e),
            },
        };
        let t = row.timings;
        println!(
            "  steps: prepare {:.0} ms, detect {:.0} ms, boxes {:.0} ms, orientation {:.0} ms, crop {:.0} ms, recognize {:.0} ms",
            t.prepare_ms, t.detect_ms, t.boxes_ms, t.orient_ms, t.crop_ms, t.recognize_ms
        );
        println!(
            "page {:3} {:<50} {:>4} dpi turned {:>3}: {:>5.1} % in order, {:>5.1} % found, turned back {:>3}, {:>6.0} ms, {:>6.0} CPU ms, RSS {:>5.0} MiB (peak {:>5.0}, data {:>5.0}){}",
            i + 1,
            s.name,
            s.dpi,
            s.turned,
            row.accuracy * 100.0,
            row.recall * 100.0,
            row.rotation,
            row.ms,
            row.cpu_ms,
            row.rss as f64 / MIB,
            row.peak as f64 / MIB,
            row.data as f64 / MIB,
            row.failed
                .as_deref()
                .map(|e| format!(" FAILED {e}"))
                .unwrap_or_default()
        );
        rows.push(row);
    }
    drop(worker);

    // 2. Peak memory by page size, each in a fresh worker.
    let mut sizes = Vec::new();
    for (w, h) in PAGE_SIZES {
        let page = dense_page(w, h)?;
        let fresh = pool(&exe)?;
        let (answer, ms) = read(&fresh, &page).await;
        let x = answer.map_err(anyhow::Error::msg)?;
        let m = x.memory.unwrap_or_default();
        println!(
            "{w} x {h}: peak RSS {:.0} MiB in {ms:.0} ms",
            m.peak_rss_bytes as f64 / MIB
        );
        sizes.push((w, h, m, ms, x.cpu_seconds.unwrap_or(f64::NAN) * 1000.0));
    }

    // 3. Degenerate shapes: each read or refused within bounded time.
    let mut shapes = Vec::new();
    for (w, h) in [
        (2000, 1),
        (2000, 16),
        (2000, 64),
        (1, 2000),
        (16, 2000),
        (3, 3),
        (8000, 40),
    ] {
        let image = DynamicImage::ImageLuma8(GrayImage::from_fn(w, h, |x, y| {
            image::Luma([if (x / 7 + y / 5) % 3 == 0 { 30 } else { 240 }])
        }));
        let fresh = pool(&exe)?;
        let (answer, ms) = read(&fresh, &png(&image)?).await;
        let outcome = match answer {
            Ok(x) => format!(
                "read: {} lines",
                x.pages
                    .iter()
                    .filter_map(|p| p.layout.as_ref())
                    .map(|l| l.lines.len())
                    .sum::<usize>()
            ),
            Err(e) => e,
        };
        println!("{w} x {h}: {outcome} in {ms:.0} ms");
        shapes.push((w, h, outcome, ms));
    }

    // 4. A 10-page scan (the first ten dense pages at 150 dpi) as one document.
    let dense: Vec<&Sample> = samples[..distinct]
        .iter()
        .filter(|s| s.truth.len() >= 300 && s.turned == 0)
        .collect();
    let mut ten = Vec::new();
    let pages = real_pages(&args.pdfs, args.per_pdf)?;
    for s in samples[..distinct]
        .iter()
        .filter(|s| s.truth.len() >= 300)
        .take(10)
    {
        if let Some(p) = pages.iter().find(|p| p.label() == s.name) {
            ten.push(noisy_rotated(&render(&p.pdf, p.index, 150)?, 0.5));
        }
    }
    drop(pages);
    let ten_refs: Vec<&GrayImage> = ten.iter().collect();
    let ten_pdf = image_pdf(&ten_refs);
    // As the stage reads it: the plan, then the pages across its workers (one at a time,
    // then one per core), each run with a fresh pool.
    let mut ten_runs = Vec::new();
    for parallel in [1, 0] {
        let fresh = stage_pool(&exe)?;
        let parallel = docflow_ocr_embeddings::parallel_pages(parallel, &fresh);
        let clock = Instant::now();
        let answer = docflow_ocr_embeddings::read_document(&fresh, &ten_pdf, parallel).await;
        let ms = clock.elapsed().as_secs_f64() * 1000.0;
        let cpu = answer
            .as_ref()
            .ok()
            .and_then(|x| x.cpu_seconds)
            .unwrap_or(f64::NAN)
            * 1000.0;
        let failed = answer.err().map(|e| e.to_string());
        println!(
            "{}-page scan, {parallel} page(s) at once: {ms:.0} ms, {cpu:.0} CPU ms {failed:?}",
            ten.len()
        );
        ten_runs.push((parallel, ms, cpu, failed));
    }

    // 5. RapidOCR on the same dense pages, after ours, alone.
    let mut reference = None;
    if let Some(python) = &args.rapidocr_python {
        let dir = tempfile::tempdir()?;
        let files = page_files(dir.path(), dense.iter().map(|s| s.png.as_slice()))?;
        let rows = rapidocr(python, &files)?;
        reference = Some(rows);
    }

    // The report.
    let mut md = report_head(
        "OCR on real pages: accuracy, cost, memory",
        "ocr-pages-bench",
        "CPU only; PP-OCRv6 small det + rec and the PP-OCR mobile v2.0 line orientation classifier (rapidocr 3.10.0's) on onnxruntime 1.32.0; one page-reading worker (the release docflow-ocr-embeddings in worker mode, the stage's defaults: --ocr-threads 1, --worker-memory 2GiB)",
    );
    let _ = writeln!(
        md,
        "The pages: every page with a text layer of 40+ words (at most {} a PDF) of the dense PDFs (IRS 2007 Instructions and Form 1040-NR, a two-column paper and the DMCA summary from pdfminer 20191125's samples; DD 293, VA 21-0966 and a 300 dpi brochure scan from pikepdf 10.18.0's tests), then of the PDFs in pypdf 7.1.1's test resources (`scripts/fetch-bench-pdfs.sh`), rendered at 150/200/300 dpi in turn with ±24 grey levels of noise and a 0.5° skew; every fourth page turned 90°, 180° or 270°. The reference is the page's own text layer in pdfium's order (itself imperfect: a few PDFs' layers are old OCR, and pdfium's order is not always the visual one). **In order**: 1 − word-level Levenshtein distance / reference words (reading order counts). **Found**: reference words found anywhere on the page.\n",
        args.per_pdf
    );
    let read_ok: Vec<&Row> = rows.iter().filter(|r| r.failed.is_none()).collect();
    let failed = rows.len() - read_ok.len();
    let weighted = |f: &dyn Fn(&Row) -> f64, only: &dyn Fn(&Sample) -> bool| {
        let (mut num, mut den) = (0.0, 0.0);
        for r in &rows {
            let s = &samples[r.sample];
            if only(s) {
                num += f(r) * s.truth.len() as f64;
                den += s.truth.len() as f64;
            }
        }
        num / den.max(1.0)
    };
    let all = |_: &Sample| true;
    let upright = |s: &Sample| s.turned == 0;
    let turned = |s: &Sample| s.turned != 0;
    let right_turn = rows
        .iter()
        .filter(|r| (360 - samples[r.sample].turned) % 360 == r.rotation && r.failed.is_none())
        .count();
    let _ = writeln!(
        md,
        "## Summary ({} pages through one worker)\n\n| | pages | in order | found |\n|---|---|---|---|\n| all | {} | {:.1} % | {:.1} % |\n| upright | {} | {:.1} % | {:.1} % |\n| turned 90/180/270 | {} | {:.1} % | {:.1} % |\n\nPages not read (dead letters): **{failed}**. Orientation found right: {right_turn} of {} pages. Time per page: mean {:.0} ms wall, {:.0} ms CPU.\n",
        rows.len(),
        rows.len(),
        weighted(&|r| r.accuracy, &all) * 100.0,
        weighted(&|r| r.recall, &all) * 100.0,
        samples.iter().filter(|s| upright(s)).count(),
        weighted(&|r| r.accuracy, &upright) * 100.0,
        weighted(&|r| r.recall, &upright) * 100.0,
        samples.iter().filter(|s| turned(s)).count(),
        weighted(&|r| r.accuracy, &turned) * 100.0,
        weighted(&|r| r.recall, &turned) * 100.0,
        rows.len(),
        mean(read_ok.iter().map(|r| r.ms)),
        mean(read_ok.iter().map(|r| r.cpu_ms)),
    );

    // Soak.
    let first: Vec<f64> = rows.iter().take(20).map(|r| r.rss as f64 / MIB).collect();
    let last: Vec<f64> = rows
        .iter()
        .rev()
        .take(20)
        .map(|r| r.rss as f64 / MIB)
        .collect();
    let max_rss = rows.iter().map(|r| r.rss).max().unwrap_or(0) as f64 / MIB;
    let max_peak = rows.iter().map(|r| r.peak).max().unwrap_or(0) as f64 / MIB;
    let max_data = rows.iter().map(|r| r.data).max().unwrap_or(0) as f64 / MIB;
    let _ = writeln!(
        md,
        "## The soak: memory page after page through one worker\n\nRSS after the page (the worker idle again), the page's own peak RSS (VmHWM, reset before each page) and VmData (heap and private mappings: what `--worker-memory` limits), every 10th page; the whole series is on the command's standard output.\n\nRSS after a page: first 20 pages mean **{:.0} MiB**, last 20 mean **{:.0} MiB** (growth {:+.0} MiB over {} pages); max {max_rss:.0} MiB. Largest page peak {max_peak:.0} MiB; largest VmData {max_data:.0} MiB.\n\n| page | size | RSS after | peak during | VmData |\n|---|---|---|---|---|",
        mean(first.iter().copied()),
        mean(last.iter().copied()),
        mean(last.iter().copied()) - mean(first.iter().copied()),
        rows.len()
    );
    for r in rows
        .iter()
        .filter(|r| (r.sample + 1) % 10 == 0 || r.sample == 0)
    {
        let s = &samples[r.sample];
        let _ = writeln!(
            md,
            "| {} | {}×{} | {} |",
            r.sample + 1,
            s.size.0,
            s.size.1,
            mib_cells(&[r.rss, r.peak, r.data])
        );
    }

    let _ = writeln!(
        md,
        "\n## Peak memory by page size (a fresh worker each; a dense synthetic page of 58 lines, noisy)\n\n| image | peak RSS | RSS after | VmData after | wall | CPU |\n|---|---|---|---|---|---|"
    );
    for (w, h, m, ms, cpu) in &sizes {
        let _ = writeln!(
            md,
            "| {w}×{h} | {} | {ms:.0} ms | {cpu:.0} ms |",
            mib_cells(&[m.peak_rss_bytes, m.rss_bytes, m.data_bytes])
        );
    }

    let _ = writeln!(
        md,
        "\n## Degenerate shapes (a fresh worker each; stripes, no text)\n\n| image | outcome | wall |\n|---|---|---|"
    );
    for (w, h, outcome, ms) in &shapes {
        let _ = writeln!(md, "| {w}×{h} | {outcome} | {ms:.0} ms |");
    }

    let _ = writeln!(
        md,
        "\n## Cost on dense pages (300+ reference words, upright, first pass)\n"
    );
    match &reference {
        Some(rapid) => {
            let _ = writeln!(
                md,
                "RapidOCR 3.10.0 (Python, `bench/reference/rapidocr_pages.py`: angle classifier off, the same det + rec ONNX models, onnxruntime's default threads) read the same PNGs in the same run, after docflow, alone on the machine. CPU: the process's user + system time for the page.\n\n| page | words | docflow in order / found | docflow wall / CPU | RapidOCR in order / found | RapidOCR wall / CPU | CPU ratio |\n|---|---|---|---|---|---|---|"
            );
            let (mut ours, mut theirs) = (0.0, 0.0);
            let (mut acc_ours, mut acc_theirs, mut n_words) = (0.0, 0.0, 0.0);
            for (s, (rms, rcpu, text)) in dense.iter().zip(rapid) {
                let Some(r) = rows.iter().find(|r| std::ptr::eq(&samples[r.sample], *s)) else {
                    continue;
                };
                let (ra, rr) = score(&words(text), &s.truth);
                ours += r.cpu_ms;
                theirs += rcpu;
                acc_ours += r.recall * s.truth.len() as f64;
                acc_theirs += rr * s.truth.len() as f64;
                n_words += s.truth.len() as f64;
                let _ = writeln!(
                    md,
                    "| {} | {:.1} / {:.1} % | {:.0} / {:.0} ms | {:.2} |",
                    our_cells(s, r),
                    ra * 100.0,
                    rr * 100.0,
                    rms,
                    rcpu,
                    r.cpu_ms / rcpu
                );
            }
            let _ = writeln!(
                md,
                "| **all** | | found {:.1} % | CPU {:.0} ms | found {:.1} % | CPU {:.0} ms | **{:.2}** |",
                acc_ours / n_words.max(1.0) * 100.0,
                ours,
                acc_theirs / n_words.max(1.0) * 100.0,
                theirs,
                ours / theirs
            );
        }
        None => {
            let _ = writeln!(
                md,
                "(RapidOCR not run: pass `--rapidocr-python` with a venv holding rapidocr 3.10.0 and onnxruntime 1.32.0.)\n\n| page | words | in order / found | wall / CPU |\n|---|---|---|---|"
            );
            for s in &dense {
                if let Some(r) = rows.iter().find(|r| std::ptr::eq(&samples[r.sample], *s)) {
                    let _ = writeln!(md, "| {} |", our_cells(s, r));
                }
            }
        }
    }
    let _ = writeln!(
        md,
        "\n## A {}-page scan as one document (dense pages at 150 dpi in an image PDF; the worker rasterises each at the stage's 300 dpi within 2000 px)\n\nRead as the stage reads it (`read_document`: the plan, then each page a job of its own in the stage's workers), a fresh pool each time.\n\n| pages at once | wall | CPU |\n|---|---|---|",
        ten.len()
    );
    for (parallel, ms, cpu, failed) in &ten_runs {
        let _ = writeln!(
            md,
            "| {parallel} | {:.1} s{} | {:.1} s |",
            ms / 1000.0,
            failed
                .as_ref()
                .map(|e| format!(" — FAILED: {e}"))
                .unwrap_or_default(),
            cpu / 1000.0,
        );
    }
    md.push('\n');

    let _ = writeln!(
        md,
        "## Reading order on pages whose order is known\n\nA real PDF's text layer is not always in visual order, so the in-order figures above understate and overstate by page. These pages are built so that their order is known (`tools/stack/src/layouts.rs`: two columns under a title, three columns of 8 pt print, a table of 24 rows, a form of labelled fields, paragraphs across the page around two columns; words from the real pages above), scanned at each dpi with the same noise and skew, read by the same worker{}.\n\n| page | dpi | words | docflow in order / found |{}\n|---|---|---|---|{}",
        if order_reference.is_some() {
            " and by RapidOCR (which reads boxes top to bottom, left to right)"
        } else {
            ""
        },
        if order_reference.is_some() {
            " RapidOCR in order / found |"
        } else {
            ""
        },
        if order_reference.is_some() {
            "---|"
        } else {
            ""
        },
    );
    let mut ours_mean = Vec::new();
    let mut theirs_mean = Vec::new();
    for (i, ((name, dpi, truth, _), (accuracy, recall))) in
        ordered.iter().zip(&order_rows).enumerate()
    {
        ours_mean.push(*accuracy);
        let theirs = order_reference
            .as_ref()
            .and_then(|r| r.get(i))
            .map(|(_, _, text)| {
                let (a, f) = score(&words(text), truth);
                theirs_mean.push(a);
                format!(" {:.1} / {:.1} % |", a * 100.0, f * 100.0)
            });
        let _ = writeln!(
            md,
            "| {name} | {dpi} | {} | {:.1} / {:.1} % |{}",
            truth.len(),
            accuracy * 100.0,
            recall * 100.0,
            theirs.unwrap_or_default()
        );
    }
    let _ = writeln!(
        md,
        "\nMean in-order accuracy: docflow **{:.1} %**{} (goal ≥ 90 %).\n",
        mean(ours_mean) * 100.0,
        if theirs_mean.is_empty() {
            String::new()
        } else {
            format!(", RapidOCR {:.1} %", mean(theirs_mean) * 100.0)
        }
    );

    let _ = writeln!(
        md,
        "## Every distinct page (first pass)\n\n| # | page | dpi | turned / found | size | words | in order | found | wall | CPU | peak RSS |\n|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for r in rows.iter().take(distinct) {
        let s = &samples[r.sample];
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} / {} | {}×{} | {} | {:.1} % | {:.1} % | {:.0} ms | {:.0} ms | {:.0} MiB |{}",
            r.sample + 1,
            s.name,
            s.dpi,
            s.turned,
            r.rotation,
            s.size.0,
            s.size.1,
            s.truth.len(),
            r.accuracy * 100.0,
            r.recall * 100.0,
            r.ms,
            r.cpu_ms,
            r.peak as f64 / MIB,
            r.failed
                .as_deref()
                .map(|e| format!(" FAILED: {e}"))
                .unwrap_or_default()
        );
    }

    if let Some(csv) = &args.csv {
        let mut out = String::from(
            "page,name,dpi,turned,found_turn,words,in_order,found,wall_ms,cpu_ms,rss_mib,peak_mib,data_mib,failed\n",
        );
        for r in &rows {
            let s = &samples[r.sample];
            let _ = writeln!(
                out,
                "{},{:?},{},{},{},{},{:.4},{:.4},{:.0},{:.0},{:.1},{:.1},{:.1},{:?}",
                r.sample + 1,
                s.name,
                s.dpi,
                s.turned,
                r.rotation,
                s.truth.len(),
                r.accuracy,
                r.recall,
                r.ms,
                r.cpu_ms,
                r.rss as f64 / MIB,
                r.peak as f64 / MIB,
                r.data as f64 / MIB,
                r.failed.as_deref().unwrap_or("")
            );
        }
        std::fs::write(csv, out)?;
    }
    docflow_bench::write_report(&args.out, &md)
}
