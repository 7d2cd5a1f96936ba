//! OCR with PP-OCRv6 (detection + recognition ONNX models from the `rapidocr` wheel) on
//! ONNX Runtime, the way RapidOCR runs them, plus a page orientation step:
//!
//! 1. the image is scaled to fit `--ocr-max-side` (RapidOCR: 2000 px), colours as BGR;
//! 2. **detection** on the image scaled so its short side is at least 736 px — but never
//!    past `--ocr-max-side` on the long side, and a side still under 32 px padded, not
//!    stretched ([`det_input`]) — both sides multiples of 32, normalised to
//!    `(x/255 - 0.5) / 0.5`, run whole or, past `OcrConfig::det_strip_pixels`, in strips of
//!    rows ([`strips`]); the probability map goes through the DB post-process in
//!    [`geometry`] (threshold → components → minimum-area rotated rectangles → unclip →
//!    boxes, at most [`geometry::MAX_BOXES`], the rest counted);
//! 3. **orientation**: boxes much taller than wide outweighing the wide ones mean a page on
//!    its side; the longest lines, recognised as cut and half a turn round, say whether it is
//!    upside down (the more confident reading wins; the PP-OCR line classifier votes where
//!    the lines are too short to read); a turned page is turned back and detected again;
//! 4. the boxes in reading order ([`geometry::reading_order`]);
//! 5. each box is **cropped** with a perspective warp to an upright strip and **recognised**
//!    in batches of strips of similar width at height 48, a batch at a time (at most
//!    `REC_BATCH` strips and `REC_BATCH_PIXELS` pixels); CTC: best class per step,
//!    repeats and blanks dropped; the dictionary is the model's `character` metadata, with
//!    the blank first and a space last; lines under `--ocr-min-confidence` are dropped.
//!
//! onnxruntime's CPU arena and memory patterns are off (both keep memory per input shape,
//! and every page has its own), and idle pool threads sleep rather than spin.

pub mod geometry;

mod detect;
mod image_ops;
mod orient;
mod recognize;
mod session;

use std::path::PathBuf;
use std::time::Instant;

use image::imageops::FilterType;
use image::{RgbImage, imageops};
use ort::session::Session;

pub use detect::{DET_STRIP_MARGIN, DetInput, Strip, det_input, strips};
pub use image_ops::is_blank;
pub use recognize::ctc_decode;

use orient::{turn, unturn};

/// OCR failures.
#[derive(Debug, thiserror::Error)]
pub enum OcrError {
    /// A model or the runtime library is missing.
    #[error(
        "{what} {path}: not found (run `make tools` to install the OCR models and onnxruntime)"
    )]
    Missing {
        /// Which file.
        what: &'static str,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// ONNX Runtime failed.
    #[error("onnxruntime: {0}")]
    Runtime(String),
    /// The recognition model has no dictionary.
    #[error("the recognition model has no `character` metadata")]
    NoDictionary,
    /// `--ocr-device cuda`, and no GPU can run the models.
    #[error("--ocr-device cuda: {0}")]
    Device(String),
    /// A model's output has an unexpected shape.
    #[error("unexpected {model} output shape {shape:?}")]
    Shape {
        /// Which model.
        model: &'static str,
        /// The shape.
        shape: Vec<i64>,
    },
}

fn rt(e: impl std::fmt::Display) -> OcrError {
    OcrError::Runtime(e.to_string())
}

/// Where the models are and how OCR runs.
#[derive(Debug, Clone)]
pub struct OcrConfig {
    /// Directory with `PP-OCRv6_det_small.onnx` and `PP-OCRv6_rec_small.onnx`.
    pub models: PathBuf,
    /// `libonnxruntime.so`.
    pub runtime: PathBuf,
    /// Threads of one OCR engine (one engine per worker process).
    pub threads: usize,
    /// Longest side the image is scaled to before detection (RapidOCR: 2000).
    pub max_side: u32,
    /// Most pixels of the detector's input in one run (0: the whole page at once); a larger
    /// input runs in strips of rows (see [`detect::strips`]), which bounds the detector's
    /// activations, most of a page's peak memory.
    pub det_strip_pixels: usize,
    /// Lines recognised with a lower mean confidence are dropped (RapidOCR: 0.5).
    pub min_confidence: f32,
    /// Whether each page's orientation (0/90/180/270 degrees) is found and the page read
    /// upright; off, pages are read as they come.
    pub orientation: bool,
    /// Where the models run.
    pub device: OcrDevice,
}

/// Where OCR's models run (`--ocr-device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OcrDevice {
    /// A GPU when the onnxruntime library has the CUDA execution provider and a GPU takes
    /// the models, else the CPU (the reason said once).
    #[default]
    Auto,
    /// The CPU.
    Cpu,
    /// A GPU, or an error saying why not.
    Cuda,
}

impl OcrDevice {
    /// `auto`, `cpu` or `cuda`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "auto" => Some(OcrDevice::Auto),
            "cpu" => Some(OcrDevice::Cpu),
            "cuda" => Some(OcrDevice::Cuda),
            _ => None,
        }
    }
}

/// One recognised line.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// Its text.
    pub text: String,
    /// Mean probability of its characters.
    pub confidence: f32,
    /// Its box, in the input image's pixels: top-left, top-right, bottom-right,
    /// bottom-left corners.
    pub quad: geometry::Quad,
}

/// Loaded models; one per worker process.
pub struct Ocr {
    det: Session,
    rec: Session,
    cls: Session,
    dictionary: Vec<String>,
    config: OcrConfig,
    /// Where the models run (`cpu`, `cuda`) and why.
    device: (&'static str, String),
}

impl std::fmt::Debug for Ocr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ocr")
            .field("config", &self.config)
            .field("dictionary", &self.dictionary.len())
            .finish_non_exhaustive()
    }
}

/// File name of the detection model in the models directory.
pub const DET_MODEL: &str = "PP-OCRv6_det_small.onnx";
/// File name of the recognition model in the models directory.
pub const REC_MODEL: &str = "PP-OCRv6_rec_small.onnx";
/// File name of the text-line orientation classifier (0 or 180 degrees) in the models
/// directory.
pub const CLS_MODEL: &str = "ch_ppocr_mobile_v2.0_cls_mobile.onnx";

/// The default of [`OcrConfig::det_strip_pixels`] (`--ocr-det-strip-pixels`): a page's
/// detector input of 2016 x 2016 runs in 3 strips (see `docs/ocr.md`, Memory).
pub const DET_STRIP_PIXELS: usize = 1_500_000;

/// Height of the recognition input.
const REC_HEIGHT: u32 = 48;

/// Time spent in each step of [`Ocr::read`], milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Timings {
    /// Scaling the image and building the detector's input.
    pub prepare_ms: f64,
    /// The detection model.
    pub detect_ms: f64,
    /// The DB post-process and reading order.
    pub boxes_ms: f64,
    /// Finding the page's orientation (the classifier's vote; a turned page's second
    /// detection counts under `prepare_ms`, `detect_ms` and `boxes_ms`).
    pub orient_ms: f64,
    /// Cropping strips and building the recognition inputs.
    pub crop_ms: f64,
    /// The recognition model and CTC decoding.
    pub recognize_ms: f64,
}

/// What OCR found in one image.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// The lines, in reading order, their boxes on the page as read: upright, at the
    /// image's scale (see [`Reading::delivered_lines`] for the image's own frame).
    pub lines: Vec<Line>,
    /// The image's size, pixels.
    pub size: (u32, u32),
    /// Text boxes found past the page's cap ([`geometry::MAX_BOXES`]) and not read.
    pub dropped_boxes: usize,
    /// Degrees clockwise the image was turned to read it upright: 0, 90, 180 or 270 (the
    /// lines' boxes are in the image's own coordinates all the same).
    pub rotation: u16,
    /// Where the time went.
    pub timings: Timings,
}

impl Reading {
    /// The lines with their boxes in the image's own pixels, as delivered (before any
    /// turn), each corner inside the image.
    pub fn delivered_lines(&self) -> Vec<Line> {
        let (w, h) = (self.size.0 as f32, self.size.1 as f32);
        self.lines
            .iter()
            .map(|l| Line {
                text: l.text.clone(),
                confidence: l.confidence,
                quad: l.quad.map(|p| {
                    let (x, y) = unturn(p, self.rotation, (w, h));
                    (x.clamp(0.0, w), y.clamp(0.0, h))
                }),
            })
            .collect()
    }
}

impl Ocr {
    /// The lines of `image`, in reading order.
    pub fn read(&mut self, image: &RgbImage) -> Result<Reading, OcrError> {
        let (w, h) = image.dimensions();
        let mut reading = Reading {
            size: (w, h),
            ..Reading::default()
        };
        if w == 0 || h == 0 {
            return Ok(reading);
        }
        let clock = Instant::now();
        // A blank page (a scanner's empty back side) costs a pass over its pixels, not a
        // detection.
        if is_blank(image) {
            reading.timings.prepare_ms += ms(clock);
            return Ok(reading);
        }
        // 1. Fit in max_side (the crops come from this image too, as in RapidOCR).
        let scale = (self.config.max_side as f32 / w.max(h) as f32).min(1.0);
        let resized;
        let work = if scale < 1.0 {
            resized = imageops::resize(
                image,
                ((w as f32 * scale).round() as u32).max(1),
                ((h as f32 * scale).round() as u32).max(1),
                FilterType::Triangle,
            );
            &resized
        } else {
            image
        };
        let mut detection = self.detect(work, &mut reading.timings, clock)?;
        if detection.boxes.is_empty() {
            return Ok(reading);
        }
        // 2. Orientation: a page read sideways or upside down is turned and detected again.
        let turned;
        let mut upright = work;
        if self.config.orientation {
            let clock = Instant::now();
            reading.rotation = self.orientation(work, &detection.boxes)?;
            reading.timings.orient_ms += ms(clock);
            if reading.rotation != 0 {
                let clock = Instant::now();
                turned = turn(work, reading.rotation);
                upright = &turned;
                detection = self.detect(upright, &mut reading.timings, clock)?;
            }
        }
        reading.dropped_boxes = detection.dropped;
        let boxes = detection.boxes;
        let texts = self.recognize(upright, &boxes, &mut reading.timings)?;
        // Back to the image's scale, each axis on its own (the work size was rounded).
        let (uw, uh) = upright.dimensions();
        let (ow, oh) = if reading.rotation.is_multiple_of(180) {
            (w, h)
        } else {
            (h, w)
        };
        let (sx, sy) = (ow as f32 / uw as f32, oh as f32 / uh as f32);
        reading.lines = boxes
            .into_iter()
            .zip(texts)
            .filter(|(_, (text, conf))| {
                !text.trim().is_empty() && *conf >= self.config.min_confidence
            })
            .map(|(b, (text, confidence))| Line {
                text,
                confidence,
                quad: b.quad.map(|(x, y)| {
                    (
                        (x * sx).clamp(0.0, ow as f32),
                        (y * sy).clamp(0.0, oh as f32),
                    )
                }),
            })
            .collect();
        Ok(reading)
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}
