//! `docflow-ocr-embeddings`: consumer group `ocr-embeddings` of `doc.uploaded`.
//!
//! For each document: the text of every page (a PDF page's own text layer when it holds real
//! text, otherwise the page rasterised and read by PP-OCR; images read by OCR), cut into
//! chunks the embedding model sees whole, each chunk embedded with all-MiniLM-L6-v2, and an
//! extractive summary (the sentences closest to the document's mean). Pages and chunk vectors
//! go to the result store (`document_pages`, `document_chunks`), where ingest's
//! `GET /v1/search` finds them; the run is recorded and announced on `doc.processed` by the
//! stage layer, keyed by sha256(bytes ‖ stage ‖ version) like every stage.
//!
//! Reading pages (pdfium, image decoding, onnxruntime) runs in isolated worker processes
//! ([`docflow_stage::isolate`]); embedding runs in this process, one model shared by every
//! in-flight document through a token-budget batcher ([`docflow_embed::Batcher`]).

use std::path::{Path, PathBuf};

use clap::Parser;
use docflow_embed::{Batcher, EmbedArgs, Embedder};
use docflow_stage::isolate::{
    self, Isolated, IsolationArgs, IsolationError, MemoryUse, Refusal, Reply, StartError, Workers,
};
use docflow_stage::service::BuildError;
use docflow_stage::{LocalTools, StageArgs, StageService};
use docflow_telemetry::TelemetryArgs;

pub mod ocr;
pub mod pages;
pub mod stage;

pub use stage::{OcrEmbeddings, STAGE_VERSION};

/// Command line of `docflow-ocr-embeddings`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "docflow-ocr-embeddings",
    version,
    about = "docflow stage: page text (text layer or OCR), chunk embeddings, summaries",
    // A worker job is one page (or a document's plan): a dense page takes seconds of CPU,
    // a whole long scan many minutes, so the limits are a page's, with room to spare.
    mut_arg("worker_memory", |a| a.default_value("2GiB")),
    mut_arg("stage_memory", |a| a.default_value("8GiB")),
    mut_arg("worker_cpu", |a| a.default_value("120s")),
    mut_arg("worker_timeout", |a| a.default_value("300s")),
)]
pub struct Config {
    /// Path of `libpdfium.so` (`make tools` links it under .tools/lib).
    #[arg(
        long,
        env = "DOCFLOW_PDFIUM_LIB",
        default_value = ".tools/lib/libpdfium.so"
    )]
    pub pdfium_lib: PathBuf,

    /// OCR options and the page limits.
    #[command(flatten)]
    pub read: ReadArgs,

    /// Sentences in a document's extractive summary.
    #[arg(long, env = "DOCFLOW_SUMMARY_SENTENCES", default_value_t = 3)]
    pub summary_sentences: usize,

    /// Most chunks one document is cut into (a dense 500-page book is ~15,000); more is a
    /// permanent error (`over_limits`), found before anything is embedded.
    #[arg(long, env = "DOCFLOW_MAX_CHUNKS", default_value_t = 20_000)]
    pub max_chunks: usize,

    /// The embedding model.
    #[command(flatten)]
    pub embed: EmbedArgs,

    /// Group, topics, Kafka, registry, database, object store, consumer runtime.
    #[command(flatten)]
    pub stage: StageArgs,

    /// Limits of the page-reading worker processes (memory, CPU time, wall-clock time).
    #[command(flatten)]
    pub isolation: IsolationArgs,

    /// Logging.
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
}

/// How pages are read, and the limits of one document (the page-reading workers' settings,
/// with `--pdfium-lib`).
#[derive(Debug, Clone, clap::Args, serde::Serialize, serde::Deserialize)]
pub struct ReadArgs {
    /// Directory of the PP-OCR models (`PP-OCRv6_det_small.onnx`, `PP-OCRv6_rec_small.onnx`,
    /// `ch_ppocr_mobile_v2.0_cls_mobile.onnx`; `make tools` links it as .tools/models/ppocr).
    #[arg(
        long,
        env = "DOCFLOW_OCR_MODELS",
        default_value = ".tools/models/ppocr"
    )]
    pub ocr_models: PathBuf,

    /// Path of `libonnxruntime.so` (`make tools` links it under .tools/lib).
    #[arg(
        long,
        env = "DOCFLOW_ONNXRUNTIME_LIB",
        default_value = ".tools/lib/libonnxruntime.so"
    )]
    pub onnxruntime_lib: PathBuf,

    /// Threads of one worker's OCR (0: onnxruntime's default, one per core). Pages run in
    /// parallel across workers (--ocr-parallel-pages), so one thread each keeps every core
    /// busy without the threads waiting on each other.
    #[arg(long, env = "DOCFLOW_OCR_THREADS", default_value_t = 1)]
    pub ocr_threads: usize,

    /// Where OCR runs: `auto` (a GPU when --onnxruntime-lib has the CUDA execution provider
    /// and a GPU takes the models, else the CPU, the reason logged once at start), `cpu`, or
    /// `cuda` (the stage fails at start, saying why, when it cannot).
    #[arg(
        long,
        env = "DOCFLOW_OCR_DEVICE",
        default_value = "auto",
        value_parser = ["auto", "cpu", "cuda"]
    )]
    pub ocr_device: String,

    /// Pages of one document read at once, each in its own worker (0: one per core), within
    /// the stage's --workers: a long scan uses every core, and other documents' pages take
    /// their turn between its pages.
    #[arg(long, env = "DOCFLOW_OCR_PARALLEL_PAGES", default_value_t = 0)]
    pub ocr_parallel_pages: usize,

    /// Longest side an image or page is scaled to before OCR (RapidOCR's default: 2000).
    #[arg(long, env = "DOCFLOW_OCR_MAX_SIDE", default_value_t = 2000)]
    pub ocr_max_side: u32,

    /// Most pixels of the text detector's input in one run (0: a whole page at once); a
    /// larger page is detected in strips of rows, each with 64 rows of context either side,
    /// which bounds a worker's peak memory at a few percent more detection time.
    #[arg(long, env = "DOCFLOW_OCR_DET_STRIP_PIXELS", default_value_t = ocr::DET_STRIP_PIXELS)]
    pub ocr_det_strip_pixels: usize,

    /// OCR lines under this mean character confidence are dropped.
    #[arg(long, env = "DOCFLOW_OCR_MIN_CONFIDENCE", default_value_t = 0.5)]
    pub ocr_min_confidence: f32,

    /// Find each scanned page's orientation (0/90/180/270 degrees) and read it upright
    /// (`false`: pages are read as they come, for input known to be upright).
    #[arg(
        long,
        env = "DOCFLOW_OCR_ORIENTATION",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub ocr_orientation: bool,

    /// Resolution pages without a text layer are rasterised at (then capped by
    /// --ocr-max-side and --max-page-pixels).
    #[arg(long, env = "DOCFLOW_OCR_DPI", default_value_t = 300.0)]
    pub dpi: f32,

    /// Most pages of a document; more is a permanent error (`over_limits`).
    #[arg(long, env = "DOCFLOW_MAX_PAGES", default_value_t = 500)]
    pub max_pages: u32,

    /// Most pixels of an image document; a larger one is refused before decoding
    /// (`over_limits`). Rasterised PDF pages are scaled to fit instead.
    #[arg(long, env = "DOCFLOW_MAX_PAGE_PIXELS", default_value_t = 40_000_000)]
    pub max_page_pixels: u64,

    /// Most pixels rasterised or decoded for OCR in one document (`over_limits` past it,
    /// known before the first page is rasterised).
    #[arg(
        long,
        env = "DOCFLOW_MAX_TOTAL_PIXELS",
        default_value_t = 1_000_000_000
    )]
    pub max_total_pixels: u64,
}

impl ReadArgs {
    /// Every file reading needs, or a message that names it and `make tools`.
    pub fn check_files(&self, pdfium_lib: &Path) -> Result<(), String> {
        let det = self.ocr_models.join(ocr::DET_MODEL);
        let rec = self.ocr_models.join(ocr::REC_MODEL);
        let cls = self.ocr_models.join(ocr::CLS_MODEL);
        for (what, path) in [
            ("libpdfium", pdfium_lib),
            ("onnxruntime library", self.onnxruntime_lib.as_path()),
            ("OCR detection model", det.as_path()),
            ("OCR recognition model", rec.as_path()),
            ("OCR orientation model", cls.as_path()),
        ] {
            if !path.is_file() {
                return Err(format!(
                    "{what} not found at {} (run `make tools` to install it)",
                    path.display()
                ));
            }
        }
        Ok(())
    }
}

impl Config {
    /// Every setting at its command-line default, the tools (libraries, models) those under
    /// `tools_dir` (a checkout's `.tools`): for benchmarks and tests of the page reading.
    pub fn with_tools(tools_dir: &Path) -> Result<Self, clap::Error> {
        let mut config = Self::try_parse_from(["docflow-ocr-embeddings"])?;
        config.pdfium_lib = tools_dir.join("lib/libpdfium.so");
        config.read.ocr_models = tools_dir.join("models/ppocr");
        config.read.onnxruntime_lib = tools_dir.join("lib/libonnxruntime.so");
        config.embed.embed_model_dir = tools_dir.join("models/minilm");
        Ok(config)
    }

    /// What this configuration's page-reading workers are started with.
    pub fn read_settings(&self) -> ReadSettings {
        ReadSettings {
            pdfium_lib: self.pdfium_lib.clone(),
            read: self.read.clone(),
        }
    }
}

/// What a page-reading worker is started with.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ReadSettings {
    /// Path of `libpdfium.so`.
    pub pdfium_lib: PathBuf,
    /// How pages are read.
    pub read: ReadArgs,
}

impl StageService for OcrEmbeddings {
    const BINARY: &'static str = "docflow-ocr-embeddings";
    type Config = Config;
    type Worker = ReadWorker;

    fn stage_args(config: &Config) -> &StageArgs {
        &config.stage
    }

    fn telemetry(config: &Config) -> &TelemetryArgs {
        &config.telemetry
    }

    fn local(stage: StageArgs, tools: &LocalTools) -> Result<Config, clap::Error> {
        let mut config = Config::with_tools(&tools.tools_dir)?;
        config.pdfium_lib = tools.pdfium_lib.clone();
        config.isolation.worker_exe = tools.worker_exe.clone();
        config.stage = stage;
        Ok(config)
    }

    /// The model loaded, one page-reading worker started and probed (a missing model or
    /// library fails here, naming `make tools`, rather than on every document).
    async fn build(config: &Config, registry: &prometheus::Registry) -> Result<Self, BuildError> {
        config.read.check_files(&config.pdfium_lib)?;
        let embedder = Embedder::load(&config.embed.embed_model_dir, &config.embed.device)?;
        tracing::info!(
            device = embedder.device(),
            reason = embedder.device_reason(),
            "embedding model loaded"
        );
        let budget = config.embed.batch_tokens(&embedder);
        tracing::info!(max_batch_tokens = budget, "embedding batches");
        let batcher = Batcher::start(embedder, budget)?;
        let isolation = config
            .isolation
            .clone()
            .for_workers(config.stage.consumer.workers);
        let workers = Workers::new(isolation, &config.read_settings())?;
        let probe = read_document(&workers, &ReadWorker::probe(), 1)
            .await
            .map_err(|e| format!("the page-reading worker does not work: {e}"))?;
        tracing::info!(
            device = probe.device.as_deref().unwrap_or("unknown"),
            "page-reading workers ready"
        );
        let parallel_pages = parallel_pages(config.read.ocr_parallel_pages, &workers);
        Ok(OcrEmbeddings::new(
            workers,
            batcher,
            stage::Settings {
                chunk_overlap: config.embed.chunk_overlap,
                summary_sentences: config.summary_sentences,
                parallel_pages,
                max_chunks: config.max_chunks,
            },
            registry,
        )?)
    }
}

/// A page-reading worker's answer.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum ReadAnswer {
    /// To [`pages::Request::Plan`].
    Plan(pages::Planned),
    /// To [`pages::Request::Document`] and [`pages::Request::Page`].
    Pages(pages::Extracted),
}

/// The page-reading worker: this binary started by the stage's [`Workers`]. Loads pdfium
/// and the OCR models and reads one request (a plan, a document, a page) a job.
pub struct ReadWorker {
    extractor: pages::Extractor,
    /// The device OCR runs on, and why.
    device: String,
}

impl std::fmt::Debug for ReadWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadWorker")
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl Isolated for ReadWorker {
    type Settings = ReadSettings;
    type Answer = ReadAnswer;
    const CLASSES: &'static [&'static str] = stage::REFUSALS;

    fn start(settings: ReadSettings) -> Result<Self, StartError> {
        let read = &settings.read;
        let engine = ocr::Ocr::load(ocr::OcrConfig {
            models: read.ocr_models.clone(),
            runtime: read.onnxruntime_lib.clone(),
            threads: read.ocr_threads,
            max_side: read.ocr_max_side,
            det_strip_pixels: read.ocr_det_strip_pixels,
            min_confidence: read.ocr_min_confidence,
            orientation: read.ocr_orientation,
            device: ocr::OcrDevice::parse(&read.ocr_device).unwrap_or_default(),
        })?;
        let device = format!("{} ({})", engine.device(), engine.device_reason());
        let limits = pages::Limits {
            max_pages: read.max_pages,
            max_page_pixels: read.max_page_pixels,
            max_total_pixels: read.max_total_pixels,
            dpi: read.dpi,
            max_side: read.ocr_max_side,
        };
        let extractor = pages::Extractor::new(&settings.pdfium_lib, engine, limits)?;
        Ok(ReadWorker { extractor, device })
    }

    fn run(&mut self, job: &[u8]) -> Result<Reply<ReadAnswer>, Refusal> {
        MemoryUse::reset_peak();
        let cpu = isolate::process_cpu_seconds();
        let refusal = |e: pages::PageError| e.refusal();
        let (request, bytes) = pages::Request::decode(job).map_err(refusal)?;
        let mut extracted = match request {
            pages::Request::Plan => {
                let planned = self.extractor.plan(bytes).map_err(refusal)?;
                return Ok(Reply::new(ReadAnswer::Plan(planned)));
            }
            pages::Request::Document => self.extractor.extract(bytes).map_err(refusal)?,
            pages::Request::Page(n) => {
                pages::Extracted::of(vec![self.extractor.page(bytes, n).map_err(refusal)?], 0)
            }
        };
        extracted.device = Some(self.device.clone());
        extracted.memory = MemoryUse::now();
        extracted.cpu_seconds = cpu
            .zip(isolate::process_cpu_seconds())
            .map(|(before, after)| after - before);
        Ok(Reply::new(ReadAnswer::Pages(extracted)))
    }

    /// A 64 x 32 PNG with three dark bars, so detection, the orientation vote and
    /// recognition all run once (a blank page would skip them all).
    fn probe() -> Vec<u8> {
        let image = image::RgbImage::from_fn(64, 32, |x, y| {
            let bar = (8..24).contains(&y) && x % 16 >= 4 && x % 16 < 12;
            if bar {
                image::Rgb([20, 20, 20])
            } else {
                image::Rgb([255, 255, 255])
            }
        });
        let mut png = Vec::new();
        // Encoding a small image into memory cannot fail; an empty probe would be refused.
        let _ = image::DynamicImage::ImageRgb8(image)
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png);
        png
    }
}

/// Why a document's pages were not all read: the failed job's error, and its page.
#[derive(Debug, thiserror::Error)]
#[error("{}{error}", page.map(|p| format!("page {p}: ")).unwrap_or_default())]
pub struct ReadFailure {
    /// The page being read (`None`: the document's plan).
    pub page: Option<u32>,
    /// What went wrong.
    #[source]
    pub error: IsolationError,
}

/// Reads every page of `bytes` in `pool`'s workers: first the plan (one job: the limits,
/// the text layers, the blank pages), then each page to OCR as a job of its own, up to
/// `parallel` at once ([`read_pages`]). Each page job gets the worker's whole CPU and time
/// budget, so a long honest document finishes however many pages it has. The first failed
/// page fails the document (the others are stopped: their workers are killed, not left
/// running).
pub async fn read_document(
    pool: &Workers<ReadWorker>,
    bytes: &[u8],
    parallel: usize,
) -> Result<pages::Extracted, ReadFailure> {
    use futures::TryStreamExt;
    let planned = plan_document(pool, bytes).await?;
    let mut out = pages::Extracted::of(planned.pages, planned.ocr_pixels);
    let mut read = std::pin::pin!(read_pages(pool, bytes, planned.ocr, parallel));
    while let Some(page) = read.try_next().await? {
        out.absorb(page);
    }
    out.pages.sort_by_key(|p| p.page);
    Ok(out)
}

/// What each page of `bytes` needs ([`pages::Request::Plan`] in one of `pool`'s workers).
pub async fn plan_document(
    pool: &Workers<ReadWorker>,
    bytes: &[u8],
) -> Result<pages::Planned, ReadFailure> {
    let answer = pool
        .run(&pages::Request::Plan.encode(bytes))
        .await
        .map_err(|error| ReadFailure { page: None, error })?;
    match answer.value {
        ReadAnswer::Plan(planned) => Ok(planned),
        ReadAnswer::Pages(_) => Err(malformed(None)),
    }
}

/// Pages `numbers` of `bytes` read by OCR, each a job of its own in `pool`'s workers, up to
/// `parallel` at once, as they finish (not in order). Dropping the stream stops the pages
/// still being read (their workers are killed).
pub fn read_pages<'a>(
    pool: &'a Workers<ReadWorker>,
    bytes: &'a [u8],
    numbers: Vec<u32>,
    parallel: usize,
) -> impl futures::Stream<Item = Result<pages::Extracted, ReadFailure>> + 'a {
    use futures::StreamExt;
    futures::stream::iter(numbers)
        .map(move |n| async move {
            let answer = pool
                .run(&pages::Request::Page(n).encode(bytes))
                .await
                .map_err(|error| ReadFailure {
                    page: Some(n),
                    error,
                })?;
            match answer.value {
                ReadAnswer::Pages(extracted) => Ok(extracted),
                ReadAnswer::Plan(_) => Err(malformed(Some(n))),
            }
        })
        .buffer_unordered(parallel.max(1))
}

/// A worker's answer of the wrong kind.
fn malformed(page: Option<u32>) -> ReadFailure {
    ReadFailure {
        page,
        error: IsolationError::Malformed {
            detail: "an answer of the wrong kind".to_owned(),
        },
    }
}

/// Pages of one document read at once: `setting` (0: one per core), within the pool's
/// workers.
pub fn parallel_pages(setting: usize, pool: &Workers<ReadWorker>) -> usize {
    let wanted = if setting == 0 {
        std::thread::available_parallelism().map_or(1, usize::from)
    } else {
        setting
    };
    match pool.max_workers() {
        0 => wanted,
        workers => wanted.min(workers),
    }
}
