//! OCR with PP-OCRv6 (detection + recognition ONNX models from the `rapidocr` wheel) on
//! ONNX Runtime, the way RapidOCR runs them, plus a page orientation step:
//!
//! 1. the image is scaled to fit `--ocr-max-side` (RapidOCR: 2000 px), colours as BGR;
//! 2. **detection** on the image scaled so its short side is at least 736 px — but never
//!    past `--ocr-max-side` on the long side, and a side still under 32 px padded, not
//!    stretched ([`det_input`]) — both sides multiples of 32, normalised to
//!    `(x/255 - 0.5) / 0.5`; the probability map goes through the DB post-process in
//!    [`geometry`] (threshold → components → minimum-area rotated rectangles → unclip →
//!    boxes, at most [`geometry::MAX_BOXES`], the rest counted);
//! 3. **orientation**: boxes much taller than wide outweighing the wide ones mean a page on
//!    its side; the longest lines, cut as recognition cuts them, vote 0 or 180 degrees with
//!    the PP-OCR line classifier; a turned page is turned back and detected again (one line's
//!    verdict is unreliable — why RapidOCR leaves the classifier off — a page's vote is not);
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

use std::path::{Path, PathBuf};
use std::time::Instant;

use image::imageops::FilterType;
use image::{RgbImage, imageops};
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::Tensor;

use geometry::{DbParams, Detection, ProbMap, TextBox};

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

/// Height of the recognition input.
const REC_HEIGHT: u32 = 48;
/// Strips per recognition batch at most (RapidOCR: 6; 16 was slower here, measured).
const REC_BATCH: usize = 6;
/// A batch is at least this many heights wide. RapidOCR pads every batch to 320 pixels
/// (6.7 heights); a batch of short words (forms are full of them) then costs a long line's
/// compute. Two heights read the same words for 6 % less CPU on the dense pages of
/// bench/results/ocr-pages.md.
const REC_MIN_RATIO: f32 = 2.0;
/// Pixels of one recognition batch at most (6 strips of 48 x 1,600): a batch of very wide
/// strips is split, so a page of long lines costs no more memory than one of short ones.
const REC_BATCH_PIXELS: usize = REC_BATCH * REC_HEIGHT as usize * 1600;
/// Widest recognition input: a strip longer than this (a 160:1 line, a rule read as text)
/// is squeezed to it rather than given an input of unbounded width.
const REC_MAX_WIDTH: usize = REC_HEIGHT as usize * 160;
/// Width of the orientation classifier's input (its height is [`REC_HEIGHT`]).
const CLS_WIDTH: usize = 192;
/// Lines (the longest) whose orientation votes for their page's.
const CLS_SAMPLE: usize = 16;
/// A page is upside down when its lines' mean probability of 180 degrees is over this.
const CLS_FLIP: f32 = 0.5;
/// The detector's short side is scaled up to at least this (RapidOCR: 736, `limit_type: min`).
const DET_MIN_SIDE: u32 = 736;
/// The detector's inputs are multiples of this on both sides (its stride).
const DET_STRIDE: u32 = 32;

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

/// The detector's input for an image of `w` x `h` (already within `--ocr-max-side`): the
/// image is resized to `resized` (the short side scaled up towards [`DET_MIN_SIDE`] as
/// RapidOCR does, but never past `max_side` on the long side, and both sides rounded to
/// the stride) and padded to `padded` where a side is still under one stride (a 2000 x 1
/// strip). So every shape gives an input of at most `max_side` x `max_side` (rounded to the
/// stride), never the 92,000 x 736 input a naive scale-up gives a 2000 x 16 image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DetInput {
    /// The image's size in the input.
    pub resized: (u32, u32),
    /// The input's size.
    pub padded: (u32, u32),
}

/// See [`DetInput`].
pub fn det_input(w: u32, h: u32, max_side: u32) -> DetInput {
    let (w, h) = (w.max(1), h.max(1));
    let max_side = max_side.max(DET_MIN_SIDE);
    let up = if w.min(h) < DET_MIN_SIDE {
        DET_MIN_SIDE as f32 / w.min(h) as f32
    } else {
        1.0
    };
    let ratio = up
        .min(max_side as f32 / w.max(h) as f32)
        .max(f32::MIN_POSITIVE);
    let side = |v: u32| {
        let scaled = (v as f32 * ratio).round().max(1.0) as u32;
        if scaled < DET_STRIDE {
            scaled
        } else {
            // To the nearest stride (the image is stretched by less than half a stride).
            (((scaled as f32 / DET_STRIDE as f32).round() as u32) * DET_STRIDE)
                .min(max_side.div_ceil(DET_STRIDE) * DET_STRIDE)
        }
    };
    let resized = (side(w), side(h));
    DetInput {
        resized,
        padded: (resized.0.max(DET_STRIDE), resized.1.max(DET_STRIDE)),
    }
}

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

    /// Degrees clockwise `image` turns to read upright (0, 90, 180 or 270), from its text
    /// boxes and a vote of the orientation classifier:
    ///
    /// * boxes much taller than wide outweighing (by length) those much wider than tall: the
    ///   page lies on its side (90 or 270);
    /// * the longest lines (up to [`CLS_SAMPLE`]) are cut as recognition would (a tall one
    ///   turned a quarter anticlockwise) and classified 0 or 180; the page is upside down
    ///   (as cut) when their mean probability of 180 is over [`CLS_FLIP`]. One line's
    ///   verdict is unreliable (why RapidOCR leaves the classifier off by default); a page's
    ///   vote is not.
    fn orientation(&mut self, image: &RgbImage, boxes: &[TextBox]) -> Result<u16, OcrError> {
        let (mut vertical, mut horizontal) = (0f32, 0f32);
        let mut sized: Vec<(usize, bool, usize)> = Vec::with_capacity(boxes.len());
        for (i, b) in boxes.iter().enumerate() {
            let (cw, ch) = geometry::crop_size(&b.quad);
            let tall = geometry::is_vertical(cw, ch);
            if tall {
                vertical += ch as f32;
            } else if geometry::is_vertical(ch, cw) {
                // As much wider than tall as a vertical one is taller than wide.
                horizontal += cw as f32;
            } else {
                continue;
            }
            sized.push((cw.max(ch), tall, i));
        }
        let sideways = vertical > horizontal;
        sized.retain(|&(_, tall, _)| tall == sideways);
        sized.sort_by(|a, b| b.0.cmp(&a.0).then(a.2.cmp(&b.2)));
        sized.truncate(CLS_SAMPLE);
        let flip = if sized.is_empty() {
            false
        } else {
            let (iw, ih) = image.dimensions();
            let rgb = geometry::RgbRef {
                width: iw as usize,
                height: ih as usize,
                data: image.as_raw(),
            };
            let plane = 3 * REC_HEIGHT as usize * CLS_WIDTH;
            let mut input = vec![0f32; sized.len() * plane];
            for (slot, &(_, _, i)) in sized.iter().enumerate() {
                let slot = &mut input[slot * plane..(slot + 1) * plane];
                strip_into(slot, &rgb, &boxes[i].quad, CLS_WIDTH);
            }
            let tensor =
                Tensor::from_array(([sized.len(), 3, REC_HEIGHT as usize, CLS_WIDTH], input))
                    .map_err(rt)?;
            let n = sized.len();
            run_first(&mut self.cls, tensor, "orientation", |dims, data| {
                if dims != [n as i64, 2] {
                    return None;
                }
                let upside_down: f32 = data.chunks_exact(2).map(|p| p[1]).sum();
                Some(upside_down / n as f32 > CLS_FLIP)
            })?
        };
        Ok(match (sideways, flip) {
            (false, false) => 0,
            (false, true) => 180,
            // Tall strips read upright once turned anticlockwise: so does the page.
            (true, false) => 270,
            (true, true) => 90,
        })
    }

    fn detect(
        &mut self,
        image: &RgbImage,
        timings: &mut Timings,
        clock: Instant,
    ) -> Result<Detection, OcrError> {
        let (w, h) = image.dimensions();
        let input = det_input(w, h, self.config.max_side);
        let ((rw, rh), (dw, dh)) = (input.resized, input.padded);
        let resized = imageops::resize(image, rw, rh, FilterType::Triangle);
        // Padding is white (1.0 after normalisation), as paper around the page.
        let data = chw_bgr(&resized, dw as usize, dh as usize, 1.0);
        let tensor =
            Tensor::from_array(([1usize, 3, dh as usize, dw as usize], data)).map_err(rt)?;
        timings.prepare_ms += ms(clock);
        let clock = Instant::now();
        // RapidOCR dilates the binary map with a 2x2 kernel before finding regions; a 2x2
        // maximum filter of the probabilities has the same effect on the threshold. Only
        // the image's part of the map is kept (not the padding).
        let (rw, rh) = (rw as usize, rh as usize);
        let dilated = run_first(
            &mut self.det,
            tensor,
            "detection",
            |dims, data| match dims {
                [_, _, mh, mw] if *mh as u32 == dh && *mw as u32 == dw => {
                    Some(dilate2x2(data, *mw as usize, *mh as usize, rw, rh))
                }
                _ => None,
            },
        )?;
        timings.detect_ms += ms(clock);
        let clock = Instant::now();
        let map = ProbMap {
            width: rw,
            height: rh,
            data: &dilated,
        };
        let params = DbParams {
            unclip_ratio: 1.6,
            ..DbParams::default()
        };
        let mut detection = geometry::detect_boxes(&map, &params, w as usize, h as usize);
        geometry::reading_order(&mut detection.boxes);
        timings.boxes_ms += ms(clock);
        Ok(detection)
    }

    /// (text, confidence) per box of `image`. Strips are cut a batch at a time, so a page of
    /// thousands of lines never holds more than one batch of strips.
    fn recognize(
        &mut self,
        image: &RgbImage,
        boxes: &[TextBox],
        timings: &mut Timings,
    ) -> Result<Vec<(String, f32)>, OcrError> {
        let mut out = vec![(String::new(), 0.0); boxes.len()];
        // Similar widths together: less padding per batch.
        let ratios: Vec<f32> = boxes
            .iter()
            .map(|b| {
                let (w, h) = geometry::strip_size(&b.quad);
                w as f32 / h.max(1) as f32
            })
            .collect();
        let mut order: Vec<usize> = (0..boxes.len()).collect();
        order.sort_by(|&a, &b| ratios[a].total_cmp(&ratios[b]));
        let width_of =
            |ratio: f32| ((REC_HEIGHT as f32 * ratio).ceil() as usize).clamp(1, REC_MAX_WIDTH);
        let (iw, ih) = image.dimensions();
        let rgb = geometry::RgbRef {
            width: iw as usize,
            height: ih as usize,
            data: image.as_raw(),
        };
        let mut rest = order.as_slice();
        while !rest.is_empty() {
            let clock = Instant::now();
            // The batch: up to REC_BATCH strips within REC_BATCH_PIXELS at the width of its
            // widest (the last, as they are sorted); always at least one.
            let mut n = 1;
            while n < rest.len().min(REC_BATCH) {
                let width = width_of(ratios[rest[n]].max(REC_MIN_RATIO));
                if (n + 1) * width * REC_HEIGHT as usize > REC_BATCH_PIXELS {
                    break;
                }
                n += 1;
            }
            let (group, tail) = rest.split_at(n);
            rest = tail;
            let max_ratio = group
                .iter()
                .map(|&i| ratios[i])
                .fold(REC_MIN_RATIO, f32::max);
            let width = width_of(max_ratio);
            let plane = 3 * REC_HEIGHT as usize * width;
            let mut input = vec![0f32; group.len() * plane];
            for (slot, &i) in group.iter().enumerate() {
                let slot = &mut input[slot * plane..(slot + 1) * plane];
                strip_into(slot, &rgb, &boxes[i].quad, width);
            }
            let tensor = Tensor::from_array(([group.len(), 3, REC_HEIGHT as usize, width], input))
                .map_err(rt)?;
            timings.crop_ms += ms(clock);
            let clock = Instant::now();
            let dictionary = &self.dictionary;
            run_first(&mut self.rec, tensor, "recognition", |dims, data| {
                let [_, t, c] = dims else {
                    return None;
                };
                let (steps, classes) = (*t as usize, *c as usize);
                for (slot, &i) in group.iter().enumerate() {
                    let from = slot * steps * classes;
                    let Some(probs) = data.get(from..from + steps * classes) else {
                        continue;
                    };
                    out[i] = ctc_decode(probs, steps, classes, dictionary);
                }
                Some(())
            })?;
            timings.recognize_ms += ms(clock);
        }
        Ok(out)
    }
}

/// Whether `image` is blank: fewer ink pixels than a lone digit at 150 dpi has (24, or one
/// in 200,000 on a page over 4.8 MP) — a few specks of dust at most. A pixel is ink when it
/// differs from the page's background (the median level) by more than the page's own noise
/// allows: twice the deviation three pixels in four stay within, plus 8 levels, between 16
/// and 64 — so a clean page's faint yellow or pencil type is ink, a noisy scan's grain
/// (clipped at white or not) is not, and ink covering most of a page cannot raise the bar
/// past what any real type clears. Anything more than the specks is read (the safe side: a
/// page wrongly thought blank would lose its text silently; one wrongly read costs a
/// detection).
pub fn is_blank(image: &RgbImage) -> bool {
    let (w, h) = image.dimensions();
    let pixels = u64::from(w) * u64::from(h);
    let luma =
        |p: &[u8]| (299 * u32::from(p[0]) + 587 * u32::from(p[1]) + 114 * u32::from(p[2])) / 1000;
    let mut histogram = [0u64; 256];
    for p in image.as_raw().chunks_exact(3) {
        histogram[luma(p).min(255) as usize] += 1;
    }
    // The level `num / den` of the pixels are at or under.
    let quantile = |histogram: &[u64], num: u64, den: u64| {
        let mut seen = 0;
        histogram
            .iter()
            .position(|&n| {
                seen += n;
                seen * den >= pixels * num
            })
            .unwrap_or(0) as i32
    };
    let background = quantile(&histogram, 1, 2);
    let mut deviations = [0u64; 256];
    for (level, &n) in histogram.iter().enumerate() {
        deviations[(level as i32 - background).unsigned_abs() as usize] += n;
    }
    let contrast = (2 * quantile(&deviations, 3, 4) + 8).clamp(16, 64);
    let ink: u64 = histogram
        .iter()
        .enumerate()
        .filter(|&(level, _)| (level as i32 - background).abs() > contrast)
        .map(|(_, &n)| n)
        .sum();
    ink < (pixels / 200_000).max(24)
}

/// The strip of `quad` cut from `image`, scaled to [`REC_HEIGHT`] at its own aspect
/// (within `width`), in `plane`: a CHW plane `width` wide, the rest left as it is (0,
/// the padding value). What both the recognition and the orientation models read.
fn strip_into(
    plane: &mut [f32],
    image: &geometry::RgbRef<'_>,
    quad: &geometry::Quad,
    width: usize,
) {
    let strip = geometry::crop_quad(image, quad);
    let ratio = strip.width as f32 / strip.height.max(1) as f32;
    let scaled = ((REC_HEIGHT as f32 * ratio).ceil() as usize).clamp(1, width);
    let Some(img) = RgbImage::from_raw(strip.width as u32, strip.height as u32, strip.data) else {
        return;
    };
    let resized = imageops::resize(&img, scaled as u32, REC_HEIGHT, FilterType::Triangle);
    plane.copy_from_slice(&chw_bgr(&resized, width, REC_HEIGHT as usize, 0.0));
}

/// Runs `session` on `input` and hands its first output (shape, values) to `read`, which
/// answers `None` for a shape it does not expect: an error naming `model` and the shape.
fn run_first<T>(
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

/// `image` turned `degrees` clockwise (0, 90, 180 or 270).
fn turn(image: &RgbImage, degrees: u16) -> RgbImage {
    match degrees {
        90 => imageops::rotate90(image),
        180 => imageops::rotate180(image),
        270 => imageops::rotate270(image),
        _ => image.clone(),
    }
}

/// A point of an image turned `degrees` clockwise by [`turn`], back in the coordinates of
/// the image before the turn (`size`: its width and height).
fn unturn((x, y): (f32, f32), degrees: u16, (w, h): (f32, f32)) -> (f32, f32) {
    match degrees {
        90 => (y, h - x),
        180 => (w - x, h - y),
        270 => (w - y, x),
        _ => (x, y),
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
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

/// `image` (RGB) as a CHW tensor in BGR order (the models were trained on OpenCV's BGR),
/// normalised to `(x/255 - 0.5) / 0.5`, placed at the top left of a `width` x `height`
/// plane whose rest is `pad`.
fn chw_bgr(image: &RgbImage, width: usize, height: usize, pad: f32) -> Vec<f32> {
    let plane = height * width;
    let mut out = vec![pad; 3 * plane];
    let (w, h) = (image.width() as usize, image.height() as usize);
    let raw = image.as_raw();
    for y in 0..h.min(height) {
        let row = &raw[y * w * 3..(y + 1) * w * 3];
        for (x, px) in row.chunks_exact(3).take(width).enumerate() {
            let at = y * width + x;
            out[at] = f32::from(px[2]) / 127.5 - 1.0;
            out[plane + at] = f32::from(px[1]) / 127.5 - 1.0;
            out[2 * plane + at] = f32::from(px[0]) / 127.5 - 1.0;
        }
    }
    out
}

/// A 2x2 maximum filter, OpenCV's `dilate` with a 2x2 kernel (anchor at its centre, so each
/// pixel takes the max of itself and its left, upper and upper-left neighbours): the
/// probability-map equivalent of dilating the thresholded map. `data` is `w` x `h`; the
/// result is its top-left `rw` x `rh`.
fn dilate2x2(data: &[f32], w: usize, h: usize, rw: usize, rh: usize) -> Vec<f32> {
    let (rw, rh) = (rw.min(w), rh.min(h));
    let at = |x: usize, y: usize| data.get(y * w + x).copied().unwrap_or(0.0);
    let mut out = vec![0f32; rw * rh];
    for y in 0..rh {
        for x in 0..rw {
            let mut m = at(x, y);
            if x > 0 {
                m = m.max(at(x - 1, y));
            }
            if y > 0 {
                m = m.max(at(x, y - 1));
                if x > 0 {
                    m = m.max(at(x - 1, y - 1));
                }
            }
            out[y * rw + x] = m;
        }
    }
    out
}

/// Greedy CTC decoding: the best class per step; repeats collapsed, blanks (class 0) dropped;
/// confidence is the mean probability of the kept characters.
pub fn ctc_decode(
    probs: &[f32],
    steps: usize,
    classes: usize,
    dictionary: &[String],
) -> (String, f32) {
    let mut text = String::new();
    let mut sum = 0f32;
    let mut kept = 0usize;
    let mut previous = usize::MAX;
    for t in 0..steps {
        let Some(row) = probs.get(t * classes..(t + 1) * classes) else {
            break;
        };
        let (best, p) =
            row.iter().enumerate().fold(
                (0usize, f32::MIN),
                |acc, (i, &p)| if p > acc.1 { (i, p) } else { acc },
            );
        if best != 0
            && best != previous
            && let Some(ch) = dictionary.get(best)
        {
            text.push_str(ch);
            sum += p;
            kept += 1;
        }
        previous = best;
    }
    let confidence = if kept == 0 { 0.0 } else { sum / kept as f32 };
    (text, confidence)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ctc_collapses_repeats_and_drops_blanks() {
        let dict: Vec<String> = ["", "a", "b", " "].iter().map(|s| s.to_string()).collect();
        // steps: a a blank a b b space  -> "aab "
        let steps = [1, 1, 0, 1, 2, 2, 3];
        let mut probs = Vec::new();
        for &s in &steps {
            let mut row = vec![0.0f32; 4];
            row[s] = 0.9;
            probs.extend(row);
        }
        let (text, conf) = ctc_decode(&probs, steps.len(), 4, &dict);
        assert_eq!(text, "aab ");
        assert!((conf - 0.9).abs() < 1e-6);
        assert_eq!(ctc_decode(&[], 0, 4, &dict), (String::new(), 0.0));
    }

    #[test]
    fn dilation_spreads_right_and_down() {
        let data = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let out = dilate2x2(&data, 3, 3, 3, 3);
        assert_eq!(out, vec![1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn blank_pages_are_told_from_pages_with_a_little_ink() {
        let white = RgbImage::from_pixel(1700, 2200, image::Rgb([250, 250, 250]));
        assert!(is_blank(&white));
        // A scanner's noise (±24 levels) and a few specks of dust: still blank.
        let mut noisy = white.clone();
        let mut state = 7u32;
        for p in noisy.pixels_mut() {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let v = (250 - 24 + (state % 25) as i32) as u8;
            *p = image::Rgb([v, v, v]);
        }
        for (x, y) in [(10, 10), (900, 1500), (1600, 40)] {
            for d in 0..4 {
                noisy.put_pixel(x + d, y, image::Rgb([20, 20, 20]));
            }
        }
        assert!(is_blank(&noisy));
        // A sheet whose noise (±24 around 250) clips at white, as paper does.
        let mut clipped = white.clone();
        for p in clipped.pixels_mut() {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let v = (250 + (state % 49) as i32 - 24).min(255) as u8;
            *p = image::Rgb([v, v, v]);
        }
        assert!(is_blank(&clipped));
        // One short word (30 x 10 pixels of ink): not blank. Nor is faint grey type.
        let mut word = noisy.clone();
        for x in 800..830 {
            for y in 1100..1110 {
                word.put_pixel(x, y, image::Rgb([30, 30, 30]));
            }
        }
        assert!(!is_blank(&word));
        let mut faint = white.clone();
        for x in 800..830 {
            for y in 1100..1110 {
                faint.put_pixel(x, y, image::Rgb([190, 190, 190]));
            }
        }
        assert!(!is_blank(&faint));
        // Yellow type on white (luma 225 on 255).
        let mut yellow = RgbImage::from_pixel(1700, 2200, image::Rgb([255, 255, 255]));
        for x in 800..830 {
            for y in 1100..1110 {
                yellow.put_pixel(x, y, image::Rgb([255, 230, 60]));
            }
        }
        assert!(!is_blank(&yellow));
        // Light type on a dark page.
        let mut dark = RgbImage::from_pixel(500, 500, image::Rgb([15, 15, 15]));
        for x in 100..140 {
            dark.put_pixel(x, 200, image::Rgb([240, 240, 240]));
            dark.put_pixel(x, 201, image::Rgb([240, 240, 240]));
        }
        assert!(!is_blank(&dark));
    }

    /// A pixel's centre, turned with the image, comes back to where it was.
    #[test]
    fn turned_points_come_back() {
        let (w, h) = (5u32, 3u32);
        let mut image = RgbImage::new(w, h);
        image.put_pixel(3, 1, image::Rgb([255, 0, 0]));
        for degrees in [0u16, 90, 180, 270] {
            let turned = turn(&image, degrees);
            let (x, y) = turned
                .enumerate_pixels()
                .find(|(_, _, p)| p[0] == 255)
                .map(|(x, y, _)| (x, y))
                .unwrap();
            let back = unturn(
                (x as f32 + 0.5, y as f32 + 0.5),
                degrees,
                (w as f32, h as f32),
            );
            assert_eq!(back, (3.5, 1.5), "{degrees} degrees");
        }
    }

    #[test]
    fn thin_long_and_tiny_images_get_bounded_detector_inputs() {
        // A page: as RapidOCR (both sides to the nearest stride, no scaling).
        assert_eq!(
            det_input(1545, 2000, 2000),
            DetInput {
                resized: (1536, 2016),
                padded: (1536, 2016)
            }
        );
        // 2000 x 16: not 92,000 x 736; the thin side padded to one stride.
        assert_eq!(
            det_input(2000, 16, 2000),
            DetInput {
                resized: (2016, 16),
                padded: (2016, 32)
            }
        );
        assert_eq!(det_input(2000, 1, 2000).padded, (2016, 32));
        assert_eq!(det_input(1, 1, 2000).padded, (736, 736));
        // A word: scaled up, within the long side.
        assert_eq!(det_input(100, 30, 2000).resized, (2016, 608));
    }

    proptest! {
        #[test]
        fn any_shape_gives_a_detector_input_within_max_side(
            w in 1u32..300_000,
            h in 1u32..300_000,
            max_side in 1u32..5000,
        ) {
            let d = det_input(w, h, max_side);
            let cap = max_side.max(DET_MIN_SIDE).div_ceil(DET_STRIDE) * DET_STRIDE;
            for (r, p) in [(d.resized.0, d.padded.0), (d.resized.1, d.padded.1)] {
                prop_assert!(p % DET_STRIDE == 0 && p <= cap, "{d:?}");
                prop_assert!(r >= 1 && r <= p, "{d:?}");
                prop_assert!(r == p || p == DET_STRIDE, "padding only for a thin side: {d:?}");
            }
        }

        #[test]
        fn ctc_decodes_any_output(
            probs in prop::collection::vec(prop_oneof![0.0f32..1.0, Just(f32::NAN)], 0..200),
            steps in 0usize..40,
            classes in 0usize..8,
        ) {
            let dict: Vec<String> = ["", "a", "b"].iter().map(|s| s.to_string()).collect();
            let (text, _) = ctc_decode(&probs, steps, classes, &dict);
            prop_assert!(text.chars().all(|c| c == 'a' || c == 'b'));
        }
    }
}
