//! Detection: the detector's input size for any image shape ([`det_input`]), the
//! detection model, and its probability map through the DB post-process and reading order
//! ([`geometry`]).

use std::time::Instant;

use image::imageops::FilterType;
use image::{RgbImage, imageops};
use ort::value::Tensor;

use super::geometry::{self, DbParams, Detection, ProbMap};
use super::image_ops::chw_bgr;
use super::session::run_first;
use super::{Ocr, OcrError, Timings, ms, rt};

/// The detector's short side is scaled up to at least this (RapidOCR: 736, `limit_type: min`).
const DET_MIN_SIDE: u32 = 736;
/// The detector's inputs are multiples of this on both sides (its stride).
const DET_STRIDE: u32 = 32;

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
    pub(super) fn detect(
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
        let mut data = chw_bgr(&resized, dw as usize, dh as usize, 1.0);
        timings.prepare_ms += ms(clock);
        let clock = Instant::now();
        // The detector runs on the whole input, or on strips of its rows when it is larger
        // than --ocr-det-strip-pixels (each strip's map kept away from its cut edges).
        // RapidOCR dilates the binary map with a 2x2 kernel before finding regions; a 2x2
        // maximum filter of the probabilities has the same effect on the threshold. Only
        // the image's part of the map is kept (not the padding).
        let (rw, rh) = (rw as usize, rh as usize);
        let (dw, dh) = (dw as usize, dh as usize);
        let mut map = vec![0f32; dw * dh];
        for strip in strips(dw, dh, self.config.det_strip_pixels) {
            let (a, b) = (strip.input.start, strip.input.end);
            let input = if (a, b) == (0, dh) {
                std::mem::take(&mut data)
            } else {
                // The strip's rows of each channel plane.
                let mut rows = Vec::with_capacity(3 * (b - a) * dw);
                for c in 0..3 {
                    rows.extend_from_slice(&data[c * dw * dh + a * dw..c * dw * dh + b * dw]);
                }
                rows
            };
            let tensor = Tensor::from_array(([1usize, 3, b - a, dw], input)).map_err(rt)?;
            let keep = strip.keep.clone();
            run_first(&mut self.det, tensor, "detection", |dims, out| match dims {
                [_, _, mh, mw] if *mh as usize == b - a && *mw as usize == dw => {
                    map[keep.start * dw..keep.end * dw]
                        .copy_from_slice(&out[(keep.start - a) * dw..(keep.end - a) * dw]);
                    Some(())
                }
                _ => None,
            })?;
        }
        let dilated = dilate2x2(&map, dw, dh, rw, rh);
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
}

/// Rows of context a strip of the detector's input carries above and below the rows it
/// keeps: the map near a cut edge differs from the whole page's (the network sees past it),
/// and this far from it the difference is gone (see `bench/results/ocr-pages.md`).
pub const DET_STRIP_MARGIN: usize = 64;

/// One run of the detector over rows `input` of its input, of which rows `keep` go into the
/// page's map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strip {
    /// Rows given to the detector.
    pub input: std::ops::Range<usize>,
    /// Rows of its map kept (inside `input`).
    pub keep: std::ops::Range<usize>,
}

/// The detector's runs over an input `w` x `h` (multiples of the stride) of at most
/// `max_pixels` each (0: no bound): the whole input at once when it fits, else strips of
/// rows, each keeping its own rows and reading [`DET_STRIP_MARGIN`] more on each side where
/// the page goes on. Every row is kept by exactly one strip. A bound under a strip of one
/// stride with its margins gives strips of that size (an input one stride wide cannot be
/// cut finer).
pub fn strips(w: usize, h: usize, max_pixels: usize) -> Vec<Strip> {
    let stride = DET_STRIDE as usize;
    if max_pixels == 0 || w * h <= max_pixels {
        return vec![Strip {
            input: 0..h,
            keep: 0..h,
        }];
    }
    let rows = (max_pixels / w.max(1)) / stride * stride;
    let keep = rows.saturating_sub(2 * DET_STRIP_MARGIN).max(stride);
    (0..h)
        .step_by(keep)
        .map(|y| {
            let end = (y + keep).min(h);
            Strip {
                input: y.saturating_sub(DET_STRIP_MARGIN)..(end + DET_STRIP_MARGIN).min(h),
                keep: y..end,
            }
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn dilation_spreads_right_and_down() {
        let data = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        let out = dilate2x2(&data, 3, 3, 3, 3);
        assert_eq!(out, vec![1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
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

    #[test]
    fn a_page_over_the_bound_is_detected_in_strips_that_overlap() {
        // Under the bound: one run.
        assert_eq!(strips(1536, 2016, 0).len(), 1);
        assert_eq!(strips(1536, 2016, 1536 * 2016).len(), 1);
        // 2016 x 2016 within 1.5 MP: runs of at most 736 rows, keeping 608 each.
        let s = strips(2016, 2016, 1_500_000);
        assert_eq!(
            s,
            vec![
                Strip {
                    input: 0..672,
                    keep: 0..608
                },
                Strip {
                    input: 544..1280,
                    keep: 608..1216
                },
                Strip {
                    input: 1152..1888,
                    keep: 1216..1824
                },
                Strip {
                    input: 1760..2016,
                    keep: 1824..2016
                },
            ]
        );
    }

    proptest! {
        #[test]
        fn strips_keep_every_row_once_within_the_bound(
            w in 1usize..80,
            h in 1usize..80,
            max_pixels in 0usize..20_000_000,
        ) {
            let (w, h) = (w * 32, h * 32);
            let s = strips(w, h, max_pixels);
            let mut next = 0;
            for strip in &s {
                prop_assert_eq!(strip.keep.start, next, "{:?}", s);
                prop_assert!(strip.keep.end > strip.keep.start);
                prop_assert!(strip.input.start <= strip.keep.start && strip.keep.end <= strip.input.end);
                prop_assert!(strip.input.end <= h);
                // Context on each side where the page goes on.
                prop_assert_eq!(strip.keep.start - strip.input.start, strip.keep.start.min(DET_STRIP_MARGIN));
                prop_assert_eq!(strip.input.end - strip.keep.end, (h - strip.keep.end).min(DET_STRIP_MARGIN));
                let bound = max_pixels.max(w * (32 + 2 * DET_STRIP_MARGIN));
                prop_assert!(s.len() == 1 || strip.input.len() * w <= bound, "{:?}", s);
                prop_assert!(strip.input.len() % 32 == 0);
                next = strip.keep.end;
            }
            prop_assert_eq!(next, h);
            prop_assert!(s.len() > 1 || max_pixels == 0 || w * h <= max_pixels || h <= 32);
        }
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
    }
}
