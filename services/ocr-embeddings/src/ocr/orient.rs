//! The page's orientation (0/90/180/270 degrees): its text boxes' shapes say whether it
//! lies on its side, and its longest lines recognised both ways round whether it is upside
//! down (the line classifier where they are too short to read); and turning a page (and
//! points on it) by such a turn.

use image::{RgbImage, imageops};
use ort::value::Tensor;

use super::geometry::{self, TextBox};
use super::image_ops::strip_into;
use super::session::run_first;
use super::{Ocr, OcrError, REC_HEIGHT, Timings, rt};

/// Width of the orientation classifier's input (its height is [`REC_HEIGHT`]).
const CLS_WIDTH: usize = 192;
/// Lines (the longest) whose orientation votes for their page's.
const CLS_SAMPLE: usize = 16;
/// A page is upside down when its lines' mean probability of 180 degrees is over this
/// (when the recognition vote cannot tell).
const CLS_FLIP: f32 = 0.5;
/// Lines (the longest of the sample) recognised both ways round for the page's vote.
const REC_VOTE: usize = 3;
/// Characters each reading of the vote needs for its confidence to count.
const REC_VOTE_CHARS: usize = 12;
/// Widest strip (width : height) the vote prefers: 30 heights hold 40–60 characters.
const REC_VOTE_RATIO: usize = 30;

impl Ocr {
    /// Degrees clockwise `image` turns to read upright (0, 90, 180 or 270), from its text
    /// boxes and a vote of the orientation classifier:
    ///
    /// * boxes much taller than wide outweighing (by length) those much wider than tall: the
    ///   page lies on its side (90 or 270);
    /// * the longest lines (up to [`REC_VOTE`]) are recognised as cut (a tall one turned a
    ///   quarter anticlockwise) and half a turn round: the page is upside down (as cut) when
    ///   the turned reading's characters are the more confident. Text the wrong way up
    ///   still decodes, but at a mean confidence of 0.5–0.7 against 0.98–0.99 the right way
    ///   up. The line classifier's vote (the mean probability of 180 over the longest
    ///   [`CLS_SAMPLE`] lines, past [`CLS_FLIP`]) misread pages whose lines it put at
    ///   0.3–0.5; it decides only when those lines hold too few characters to read
    ///   ([`REC_VOTE_CHARS`]).
    pub(super) fn orientation(
        &mut self,
        image: &RgbImage,
        boxes: &[TextBox],
    ) -> Result<u16, OcrError> {
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
        // The longest lines up to REC_VOTE_RATIO (recognition's cost grows with a strip's
        // width: a form's page-wide rules and lines would make the vote dear), then, if too
        // few, the longest of the rest.
        let short_enough = |&&(_, _, i): &&(usize, bool, usize)| {
            let (w, h) = geometry::strip_size(&boxes[i].quad);
            w <= h.max(1) * REC_VOTE_RATIO
        };
        let mut lines: Vec<usize> = sized
            .iter()
            .filter(short_enough)
            .take(REC_VOTE)
            .map(|&(_, _, i)| i)
            .collect();
        if lines.len() < REC_VOTE {
            let rest = sized
                .iter()
                .filter(|l| !short_enough(l))
                .map(|&(_, _, i)| i);
            lines.extend(rest.take(REC_VOTE - lines.len()));
        }
        let flip = match self.read_both_ways(image, boxes, &lines)? {
            Some((as_cut, turned)) => turned > as_cut,
            None => self.upside_down_by_classifier(image, boxes, &sized)? > CLS_FLIP,
        };
        Ok(match (sideways, flip) {
            (false, false) => 0,
            (false, true) => 180,
            // Tall strips read upright once turned anticlockwise: so does the page.
            (true, false) => 270,
            (true, true) => 90,
        })
    }
}

impl Ocr {
    /// The line classifier's mean probability that the `sized` lines (length, tall, index
    /// into `boxes`) of `image` are upside down as cut: the vote when the lines hold too
    /// few characters to read both ways.
    fn upside_down_by_classifier(
        &mut self,
        image: &RgbImage,
        boxes: &[TextBox],
        sized: &[(usize, bool, usize)],
    ) -> Result<f32, OcrError> {
        if sized.is_empty() {
            return Ok(0.0);
        }
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
        let tensor = Tensor::from_array(([sized.len(), 3, REC_HEIGHT as usize, CLS_WIDTH], input))
            .map_err(rt)?;
        let n = sized.len();
        run_first(&mut self.cls, tensor, "orientation", |dims, data| {
            if dims != [n as i64, 2] {
                return None;
            }
            let upside_down: f32 = data.chunks_exact(2).map(|p| p[1]).sum();
            Some(upside_down / n as f32)
        })
    }

    /// The mean confidence, a character at a time, of `lines` of `image` recognised as
    /// cut and turned half a turn: `None` when either reading has too few characters
    /// ([`REC_VOTE_CHARS`]) to tell.
    fn read_both_ways(
        &mut self,
        image: &RgbImage,
        boxes: &[TextBox],
        lines: &[usize],
    ) -> Result<Option<(f32, f32)>, OcrError> {
        if lines.is_empty() {
            return Ok(None);
        }
        let mut both: Vec<TextBox> = Vec::with_capacity(2 * lines.len());
        both.extend(lines.iter().map(|&i| boxes[i].clone()));
        both.extend(lines.iter().map(|&i| {
            let q = boxes[i].quad;
            // The same corners from the opposite one: the strip is cut half a turn round.
            TextBox {
                quad: [q[2], q[3], q[0], q[1]],
                score: boxes[i].score,
            }
        }));
        let texts = self.recognize(image, &both, &mut Timings::default())?;
        let (as_cut, turned) = texts.split_at(lines.len());
        let mean = |texts: &[(String, f32)]| {
            let (mut sum, mut chars) = (0f32, 0usize);
            for (text, confidence) in texts {
                let n = text.chars().filter(|c| !c.is_whitespace()).count();
                if confidence.is_finite() {
                    sum += confidence * n as f32;
                    chars += n;
                }
            }
            (chars >= REC_VOTE_CHARS).then(|| sum / chars as f32)
        };
        Ok(mean(as_cut).zip(mean(turned)))
    }
}

/// `image` turned `degrees` clockwise (0, 90, 180 or 270).
pub(super) fn turn(image: &RgbImage, degrees: u16) -> RgbImage {
    match degrees {
        90 => imageops::rotate90(image),
        180 => imageops::rotate180(image),
        270 => imageops::rotate270(image),
        _ => image.clone(),
    }
}

/// A point of an image turned `degrees` clockwise by [`turn`], back in the coordinates of
/// the image before the turn (`size`: its width and height).
pub(super) fn unturn((x, y): (f32, f32), degrees: u16, (w, h): (f32, f32)) -> (f32, f32) {
    match degrees {
        90 => (y, h - x),
        180 => (w - x, h - y),
        270 => (w - y, x),
        _ => (x, y),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
