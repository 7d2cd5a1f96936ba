//! The page's orientation: a vote of its text boxes' shapes and of the line classifier
//! (0/90/180/270 degrees), and turning a page (and points on it) by such a turn.

use image::{RgbImage, imageops};
use ort::value::Tensor;

use super::geometry::{self, TextBox};
use super::image_ops::strip_into;
use super::session::run_first;
use super::{Ocr, OcrError, REC_HEIGHT, rt};

/// Width of the orientation classifier's input (its height is [`REC_HEIGHT`]).
const CLS_WIDTH: usize = 192;
/// Lines (the longest) whose orientation votes for their page's.
const CLS_SAMPLE: usize = 16;
/// A page is upside down when its lines' mean probability of 180 degrees is over this.
const CLS_FLIP: f32 = 0.5;

impl Ocr {
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
