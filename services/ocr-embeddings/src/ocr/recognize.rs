//! Recognition: strips of similar width batched at height [`REC_HEIGHT`], the recognition
//! model, and greedy CTC decoding ([`ctc_decode`]).

use std::time::Instant;

use image::RgbImage;
use ort::value::Tensor;

use super::geometry::{self, TextBox};
use super::image_ops::strip_into;
use super::session::run_first;
use super::{Ocr, OcrError, REC_HEIGHT, Timings, ms, rt};

/// Strips per recognition batch at most (RapidOCR: 6; 16 was slower here, measured).
const REC_BATCH: usize = 6;
/// A batch is at least this many heights wide. RapidOCR pads every batch to 320 pixels
/// (6.7 heights); a batch of short words (forms are full of them) then costs a long line's
/// compute. Two heights read the same words for 6 % less CPU on the dense pages of
/// bench/results/ocr-pages.md.
const REC_MIN_RATIO: f32 = 2.0;
/// Pixels of one recognition batch at most (6 strips of 48 x 800): a batch of very wide
/// strips is split, so a page of long lines costs no more memory than one of short ones.
/// The model holds about 500 bytes of activations per input pixel: at 1,600 wide a batch
/// took 260 MiB, more than the detector's strips (see `bench/results/ocr-memory.md`).
const REC_BATCH_PIXELS: usize = REC_BATCH * REC_HEIGHT as usize * 800;
/// Widest recognition input: a strip longer than this (a 160:1 line, a rule read as text)
/// is squeezed to it rather than given an input of unbounded width.
const REC_MAX_WIDTH: usize = REC_HEIGHT as usize * 160;

impl Ocr {
    /// (text, confidence) per box of `image`. Strips are cut a batch at a time, so a page of
    /// thousands of lines never holds more than one batch of strips.
    pub(super) fn recognize(
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

    proptest! {
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
