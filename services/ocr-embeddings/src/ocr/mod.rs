//! OCR with PP-OCRv6 (detection + recognition ONNX models from the `rapidocr` wheel) on
//! ONNX Runtime, the way RapidOCR runs them, with the angle classifier off (pages are upright;
//! on upright text the classifier flips lines more often than it fixes them):
//!
//! 1. the image is scaled to fit `--ocr-max-side` (RapidOCR: 2000 px), colours as BGR;
//! 2. **detection** on the image scaled so its short side is at least 736 px and both sides
//!    are multiples of 32, normalised to `(x/255 - 0.5) / 0.5`; the probability map goes
//!    through the DB post-process in [`geometry`] (threshold → components → minimum-area
//!    rotated rectangles → unclip → boxes), in reading order;
//! 3. each box is **cropped** with a perspective warp to an upright strip and **recognised**
//!    in batches of strips of similar width at height 48 (CTC: best class per step, repeats and
//!    blanks dropped; the dictionary is the model's `character` metadata, with the blank first
//!    and a space last); lines under `--ocr-min-confidence` are dropped.

pub mod geometry;

use std::path::{Path, PathBuf};

use image::imageops::FilterType;
use image::{RgbImage, imageops};
use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::Tensor;

use geometry::{DbParams, ProbMap, Rgb, TextBox};

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
}

/// One recognised line.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// Its text.
    pub text: String,
    /// Mean probability of its characters.
    pub confidence: f32,
    /// Its box, in the input image's pixels.
    pub quad: geometry::Quad,
}

/// Loaded models; one per worker process.
pub struct Ocr {
    det: Session,
    rec: Session,
    dictionary: Vec<String>,
    config: OcrConfig,
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

/// Height of the recognition input.
const REC_HEIGHT: u32 = 48;
/// Strips per recognition batch (RapidOCR: 6).
const REC_BATCH: usize = 6;
/// The detector's short side is scaled up to at least this (RapidOCR: 736, `limit_type: min`).
const DET_MIN_SIDE: u32 = 736;

impl Ocr {
    /// Loads onnxruntime and both models.
    pub fn load(config: OcrConfig) -> Result<Self, OcrError> {
        let det_path = config.models.join(DET_MODEL);
        let rec_path = config.models.join(REC_MODEL);
        for (what, path) in [
            ("onnxruntime library", &config.runtime),
            ("detection model", &det_path),
            ("recognition model", &rec_path),
        ] {
            if !path.exists() {
                return Err(OcrError::Missing {
                    what,
                    path: path.clone(),
                });
            }
        }
        let env = environment(&config.runtime)?;
        let session = |path: &Path| -> Result<Session, OcrError> {
            Session::builder(&env)
                .map_err(rt)?
                .with_optimization_level(GraphOptimizationLevel::Level3)
                .map_err(rt)?
                .with_intra_threads(config.threads)
                .map_err(rt)?
                .commit_from_file(path)
                .map_err(rt)
        };
        let det = session(&det_path)?;
        let rec = session(&rec_path)?;
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
            dictionary,
            config,
        })
    }

    /// The lines of `image`, in reading order.
    pub fn read(&mut self, image: &RgbImage) -> Result<Vec<Line>, OcrError> {
        let (w, h) = image.dimensions();
        if w == 0 || h == 0 {
            return Ok(Vec::new());
        }
        // 1. Fit in max_side (the crops come from this image too, as in RapidOCR).
        let scale = (self.config.max_side as f32 / w.max(h) as f32).min(1.0);
        let work = if scale < 1.0 {
            imageops::resize(
                image,
                ((w as f32 * scale).round() as u32).max(1),
                ((h as f32 * scale).round() as u32).max(1),
                FilterType::Triangle,
            )
        } else {
            image.clone()
        };
        let boxes = self.detect(&work)?;
        if boxes.is_empty() {
            return Ok(Vec::new());
        }
        let rgb = Rgb {
            width: work.width() as usize,
            height: work.height() as usize,
            data: work.into_raw(),
        };
        let strips: Vec<Rgb> = boxes
            .iter()
            .map(|b| geometry::crop_quad(&rgb, &b.quad))
            .collect();
        let texts = self.recognize(&strips)?;
        let back = 1.0 / scale;
        Ok(boxes
            .into_iter()
            .zip(texts)
            .filter(|(_, (text, conf))| {
                !text.trim().is_empty() && *conf >= self.config.min_confidence
            })
            .map(|(b, (text, confidence))| Line {
                text,
                confidence,
                quad: b.quad.map(|(x, y)| (x * back, y * back)),
            })
            .collect())
    }

    fn detect(&mut self, image: &RgbImage) -> Result<Vec<TextBox>, OcrError> {
        let (w, h) = image.dimensions();
        let ratio = if w.min(h) < DET_MIN_SIDE {
            DET_MIN_SIDE as f32 / w.min(h) as f32
        } else {
            1.0
        };
        let to32 = |v: u32| ((((v as f32 * ratio) / 32.0).round() as u32) * 32).max(32);
        let (dw, dh) = (to32(w), to32(h));
        let resized = imageops::resize(image, dw, dh, FilterType::Triangle);
        let input = chw_bgr(&resized, dw as usize, dh as usize, dw as usize);
        let tensor =
            Tensor::from_array(([1usize, 3, dh as usize, dw as usize], input)).map_err(rt)?;
        let outputs = self.det.run(ort::inputs![tensor]).map_err(rt)?;
        let Some(out) = outputs.values().next() else {
            return Err(OcrError::Shape {
                model: "detection",
                shape: Vec::new(),
            });
        };
        let (shape, data) = out.try_extract_tensor::<f32>().map_err(rt)?;
        let dims: Vec<i64> = shape.iter().copied().collect();
        let (mh, mw) = match dims.as_slice() {
            [_, _, mh, mw] => (*mh as usize, *mw as usize),
            _ => {
                return Err(OcrError::Shape {
                    model: "detection",
                    shape: dims,
                });
            }
        };
        // RapidOCR dilates the binary map with a 2x2 kernel before finding regions; a 2x2
        // maximum filter of the probabilities has the same effect on the threshold.
        let dilated = dilate2x2(data, mw, mh);
        let map = ProbMap {
            width: mw,
            height: mh,
            data: &dilated,
        };
        let params = DbParams {
            unclip_ratio: 1.6,
            ..DbParams::default()
        };
        let mut boxes = geometry::detect_boxes(&map, &params, w as usize, h as usize);
        geometry::reading_order(&mut boxes);
        Ok(boxes)
    }

    /// (text, confidence) per strip.
    fn recognize(&mut self, strips: &[Rgb]) -> Result<Vec<(String, f32)>, OcrError> {
        let mut out = vec![(String::new(), 0.0); strips.len()];
        // Similar widths together: less padding per batch.
        let mut order: Vec<usize> = (0..strips.len()).collect();
        let ratio = |s: &Rgb| s.width as f32 / s.height.max(1) as f32;
        order.sort_by(|&a, &b| ratio(&strips[a]).total_cmp(&ratio(&strips[b])));
        for group in order.chunks(REC_BATCH) {
            let max_ratio = group
                .iter()
                .map(|&i| ratio(&strips[i]))
                .fold(320.0 / 48.0, f32::max);
            let width = ((REC_HEIGHT as f32 * max_ratio) as usize).max(1);
            let mut input = vec![0f32; group.len() * 3 * REC_HEIGHT as usize * width];
            for (slot, &i) in group.iter().enumerate() {
                let s = &strips[i];
                let Some(img) = RgbImage::from_raw(s.width as u32, s.height as u32, s.data.clone())
                else {
                    continue;
                };
                let resized_w = ((REC_HEIGHT as f32 * ratio(s)).ceil() as usize).clamp(1, width);
                let resized =
                    imageops::resize(&img, resized_w as u32, REC_HEIGHT, FilterType::Triangle);
                let plane = 3 * REC_HEIGHT as usize * width;
                let chw = chw_bgr(&resized, resized_w, REC_HEIGHT as usize, width);
                input[slot * plane..(slot + 1) * plane].copy_from_slice(&chw);
            }
            let tensor = Tensor::from_array(([group.len(), 3, REC_HEIGHT as usize, width], input))
                .map_err(rt)?;
            let outputs = self.rec.run(ort::inputs![tensor]).map_err(rt)?;
            let Some(value) = outputs.values().next() else {
                return Err(OcrError::Shape {
                    model: "recognition",
                    shape: Vec::new(),
                });
            };
            let (shape, data) = value.try_extract_tensor::<f32>().map_err(rt)?;
            let dims: Vec<i64> = shape.iter().copied().collect();
            let (steps, classes) = match dims.as_slice() {
                [_, t, c] => (*t as usize, *c as usize),
                _ => {
                    return Err(OcrError::Shape {
                        model: "recognition",
                        shape: dims,
                    });
                }
            };
            for (slot, &i) in group.iter().enumerate() {
                let from = slot * steps * classes;
                let Some(probs) = data.get(from..from + steps * classes) else {
                    continue;
                };
                out[i] = ctc_decode(probs, steps, classes, &self.dictionary);
            }
        }
        Ok(out)
    }
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
/// normalised to `(x/255 - 0.5) / 0.5`, placed at the left of a `width`-wide plane (the rest
/// stays 0, the padding value).
fn chw_bgr(image: &RgbImage, w: usize, h: usize, width: usize) -> Vec<f32> {
    let mut out = vec![0f32; 3 * h * width];
    for (x, y, px) in image.enumerate_pixels() {
        let (x, y) = (x as usize, y as usize);
        if x >= w.min(width) || y >= h {
            continue;
        }
        for (c, channel) in [2usize, 1, 0].into_iter().enumerate() {
            out[c * h * width + y * width + x] = (f32::from(px[channel]) / 255.0 - 0.5) / 0.5;
        }
    }
    out
}

/// A 2x2 maximum filter, OpenCV's `dilate` with a 2x2 kernel (anchor at its centre, so each
/// pixel takes the max of itself and its left, upper and upper-left neighbours): the
/// probability-map equivalent of dilating the thresholded map.
fn dilate2x2(data: &[f32], w: usize, h: usize) -> Vec<f32> {
    let at = |x: usize, y: usize| data.get(y * w + x).copied().unwrap_or(0.0);
    let mut out = vec![0f32; w * h];
    for y in 0..h {
        for x in 0..w {
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
            out[y * w + x] = m;
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
        let out = dilate2x2(&data, 3, 3);
        assert_eq!(out, vec![1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
    }
}
