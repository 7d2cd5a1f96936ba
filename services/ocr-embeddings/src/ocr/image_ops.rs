//! Pixels in: whether a page is blank, and the models' inputs — BGR, CHW, normalised — from
//! an image or from a box's strip.

use image::imageops::FilterType;
use image::{RgbImage, imageops};

use super::{REC_HEIGHT, geometry};

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
pub(super) fn strip_into(
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

/// `image` (RGB) as a CHW tensor in BGR order (the models were trained on OpenCV's BGR),
/// normalised to `(x/255 - 0.5) / 0.5`, placed at the top left of a `width` x `height`
/// plane whose rest is `pad`.
pub(super) fn chw_bgr(image: &RgbImage, width: usize, height: usize, pad: f32) -> Vec<f32> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
