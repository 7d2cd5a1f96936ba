//! Loading onnxruntime (one environment per process) and the three models on the device
//! `--ocr-device` asks for, and running one of them.

use std::path::Path;

use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::Tensor;

use super::{CLS_MODEL, DET_MODEL, Ocr, OcrConfig, OcrDevice, OcrError, REC_MODEL, rt};

impl Ocr {
    /// Loads onnxruntime and both models.
    pub fn load(config: OcrConfig) -> Result<Self, OcrError> {
        let det_path = config.models.join(DET_MODEL);
        let rec_path = config.models.join(REC_MODEL);
        let cls_path = config.models.join(CLS_MODEL);
        for (what, path) in [
            ("onnxruntime library", &config.runtime),
            ("detection model", &det_path),
            ("recognition model", &rec_path),
            ("orientation model", &cls_path),
        ] {
            if !path.exists() {
                return Err(OcrError::Missing {
                    what,
                    path: path.clone(),
                });
            }
        }
        let env = environment(&config.runtime)?;
        let session = |path: &Path, cuda: bool| -> Result<Session, OcrError> {
            let mut providers = Vec::new();
            if cuda {
                providers.push(ort::ep::CUDA::default().build().error_on_failure());
            }
            providers.push(ort::ep::CPU::default().with_arena_allocator(false).build());
            Session::builder(&env)
                .map_err(rt)?
                .with_optimization_level(GraphOptimizationLevel::Level3)
                .map_err(rt)?
                .with_intra_threads(config.threads)
                .map_err(rt)?
                // Idle pool threads sleep instead of spinning: a stage runs several workers
                // on the same cores, and a spinning thread takes CPU another worker needs.
                .with_intra_op_spinning(false)
                .map_err(rt)?
                // Every page has its own input shape. onnxruntime's CPU arena keeps the
                // largest blocks any shape needed and its memory patterns are cached per
                // shape: both grow a long-lived worker from page to page. Without them each
                // run takes its memory from the system allocator and gives it back.
                .with_memory_pattern(false)
                .map_err(rt)?
                .with_execution_providers(providers)
                .map_err(rt)?
                .commit_from_file(path)
                .map_err(rt)
        };
        let sessions = |cuda: bool| -> Result<(Session, Session, Session), OcrError> {
            Ok((
                session(&det_path, cuda)?,
                session(&rec_path, cuda)?,
                session(&cls_path, cuda)?,
            ))
        };
        let on_gpu = || -> Result<(Session, Session, Session), String> {
            use ort::ep::ExecutionProvider as _;
            match ort::ep::CUDA::is_available() {
                Ok(true) => {
                    sessions(true).map_err(|e| format!("the CUDA execution provider failed: {e}"))
                }
                Ok(false) => Err(format!(
                    "{} has no CUDA execution provider (a CPU build; point --onnxruntime-lib at an onnxruntime-gpu build)",
                    config.runtime.display()
                )),
                Err(e) => Err(format!("listing onnxruntime's execution providers: {e}")),
            }
        };
        let ((det, rec, cls), device) = match config.device {
            OcrDevice::Cpu => (sessions(false)?, ("cpu", "--ocr-device cpu".to_owned())),
            OcrDevice::Cuda => (
                on_gpu().map_err(OcrError::Device)?,
                ("cuda", "--ocr-device cuda".to_owned()),
            ),
            OcrDevice::Auto => match on_gpu() {
                Ok(s) => (
                    s,
                    (
                        "cuda",
                        "--ocr-device auto: the CUDA execution provider took the models".to_owned(),
                    ),
                ),
                Err(why) => (
                    sessions(false)?,
                    ("cpu", format!("--ocr-device auto: {why}")),
                ),
            },
        };
        let characters = rec
            .metadata()
            .map_err(rt)?
            .custom("character")
            .ok_or(OcrError::NoDictionary)?;
        // CTC class 0 is the blank; the model's last class is the space.
        let mut dictionary = vec![String::new()];
        dictionary.extend(characters.lines().map(str::to_owned));
        dictionary.push(" ".to_owned());
        Ok(Ocr {
            det,
            rec,
            cls,
            dictionary,
            config,
            device,
        })
    }

    /// Where the models run: `cpu` or `cuda`.
    pub fn device(&self) -> &'static str {
        self.device.0
    }

    /// Why they run there (`--ocr-device auto: …` names what was missing for a GPU).
    pub fn device_reason(&self) -> &str {
        &self.device.1
    }
}

/// Runs `session` on `input` and hands its first output (shape, values) to `read`, which
/// answers `None` for a shape it does not expect: an error naming `model` and the shape.
pub(super) fn run_first<T>(
    session: &mut Session,
    input: Tensor<f32>,
    model: &'static str,
    read: impl FnOnce(&[i64], &[f32]) -> Option<T>,
) -> Result<T, OcrError> {
    let outputs = session.run(ort::inputs![input]).map_err(rt)?;
    let Some(value) = outputs.values().next() else {
        return Err(OcrError::Shape {
            model,
            shape: Vec::new(),
        });
    };
    let (shape, data) = value.try_extract_tensor::<f32>().map_err(rt)?;
    let dims: Vec<i64> = shape.iter().copied().collect();
    read(&dims, data).ok_or(OcrError::Shape { model, shape: dims })
}

/// onnxruntime allows one environment per process: made by the first engine, shared by the
/// others (a worker has one engine; the benchmarks and tests several).
fn environment(runtime: &Path) -> Result<ort::environment::Environment, OcrError> {
    static ENV: std::sync::Mutex<Option<ort::environment::Environment>> =
        std::sync::Mutex::new(None);
    let mut env = ENV
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(e) = env.as_ref() {
        return Ok(e.clone());
    }
    let built = ort::init_from(runtime)
        .map_err(rt)?
        .with_name("docflow-ocr")
        .build()
        .map_err(rt)?;
    *env = Some(built.clone());
    Ok(built)
}
