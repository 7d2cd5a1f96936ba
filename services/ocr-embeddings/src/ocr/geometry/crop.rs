//! Crops, [`crop_quad`]: a perspective warp of one box to an upright strip (bilinear, edges
//! replicated), turned a quarter when it is much taller than wide (vertical text).

use super::{Quad, Rgb, RgbRef, dist};

/// Longest side of a cropped strip; a box larger than this is sampled down.
pub const MAX_CROP_SIDE: usize = 4096;

/// Solves the 8 unknowns of the homography taking `from[i]` to `to[i]`.
fn homography(from: &[(f32, f32); 4], to: &[(f32, f32); 4]) -> Option<[f64; 8]> {
    let mut m = [[0f64; 9]; 8];
    for i in 0..4 {
        let (x, y) = (f64::from(from[i].0), f64::from(from[i].1));
        let (u, v) = (f64::from(to[i].0), f64::from(to[i].1));
        m[2 * i] = [x, y, 1.0, 0.0, 0.0, 0.0, -u * x, -u * y, u];
        m[2 * i + 1] = [0.0, 0.0, 0.0, x, y, 1.0, -v * x, -v * y, v];
    }
    for col in 0..8 {
        let pivot = (col..8).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[pivot][col].abs() < 1e-12 {
            return None;
        }
        m.swap(col, pivot);
        for row in 0..8 {
            if row != col {
                let f = m[row][col] / m[col][col];
                let pivot_row = m[col];
                for (cell, p) in m[row].iter_mut().zip(pivot_row).skip(col) {
                    *cell -= f * p;
                }
            }
        }
    }
    let mut h = [0f64; 8];
    for (i, v) in h.iter_mut().enumerate() {
        *v = m[i][8] / m[i][i];
    }
    Some(h)
}

/// The size of the warped region of `quad` before any turn: its longer edges' lengths,
/// within [`MAX_CROP_SIDE`], at least 1 x 1 (a degenerate or non-finite quad gives 1 x 1).
pub fn crop_size(quad: &Quad) -> (usize, usize) {
    let side = |a: f32, b: f32| {
        let v = a.max(b).round();
        if v.is_finite() { v.max(1.0) } else { 1.0 }
    };
    let w = side(dist(quad[0], quad[1]), dist(quad[3], quad[2]));
    let h = side(dist(quad[0], quad[3]), dist(quad[1], quad[2]));
    let scale = (MAX_CROP_SIDE as f32 / w.max(h)).min(1.0);
    (
        ((w * scale).round() as usize).clamp(1, MAX_CROP_SIDE),
        ((h * scale).round() as usize).clamp(1, MAX_CROP_SIDE),
    )
}

/// Whether a crop of `cw` x `ch` is vertical text, turned a quarter into a strip.
pub fn is_vertical(cw: usize, ch: usize) -> bool {
    ch as f32 >= cw as f32 * 1.5
}

/// The size (width, height) of [`crop_quad`]'s strip for `quad`, without cropping.
pub fn strip_size(quad: &Quad) -> (usize, usize) {
    let (cw, ch) = crop_size(quad);
    if is_vertical(cw, ch) {
        (ch, cw)
    } else {
        (cw, ch)
    }
}

/// The region `quad` of `image` warped to an upright strip (see the module docs).
pub fn crop_quad(image: &RgbRef<'_>, quad: &Quad) -> Rgb {
    let (cw, ch) = crop_size(quad);
    let target = [
        (0.0, 0.0),
        (cw as f32, 0.0),
        (cw as f32, ch as f32),
        (0.0, ch as f32),
    ];
    let blank = |width: usize, height: usize| Rgb {
        width,
        height,
        data: vec![0; width * height * 3],
    };
    let homography = if image.width == 0
        || image.height == 0
        || image.data.len() < image.width * image.height * 3
    {
        None
    } else {
        homography(&target, quad)
    };
    let Some(hm) = homography else {
        // Nothing to sample: a blank strip of the size `strip_size` promises.
        return if is_vertical(cw, ch) {
            blank(ch, cw)
        } else {
            blank(cw, ch)
        };
    };
    let mut out = blank(cw, ch);
    // Off the image (or not finite, from a degenerate quad): the edge pixels, as `pixel`
    // replicates them; never an integer overflow past them.
    let inside = |v: f64, size: usize| {
        if v.is_nan() {
            0.0
        } else {
            v.clamp(-1.0, size as f64)
        }
    };
    let pixel = |x: i64, y: i64, c: usize| -> f64 {
        let x = x.clamp(0, image.width as i64 - 1) as usize;
        let y = y.clamp(0, image.height as i64 - 1) as usize;
        f64::from(image.data[(y * image.width + x) * 3 + c])
    };
    for ty in 0..ch {
        for tx in 0..cw {
            // Pixel centres map to pixel centres.
            let (x, y) = (tx as f64 + 0.5, ty as f64 + 0.5);
            let d = hm[6] * x + hm[7] * y + 1.0;
            let sx = inside((hm[0] * x + hm[1] * y + hm[2]) / d - 0.5, image.width);
            let sy = inside((hm[3] * x + hm[4] * y + hm[5]) / d - 0.5, image.height);
            let (x0, y0) = (sx.floor(), sy.floor());
            let (fx, fy) = (sx - x0, sy - y0);
            let (x0, y0) = (x0 as i64, y0 as i64);
            for c in 0..3 {
                let top = pixel(x0, y0, c) * (1.0 - fx) + pixel(x0 + 1, y0, c) * fx;
                let bottom = pixel(x0, y0 + 1, c) * (1.0 - fx) + pixel(x0 + 1, y0 + 1, c) * fx;
                out.data[(ty * cw + tx) * 3 + c] = (top * (1.0 - fy) + bottom * fy).round() as u8;
            }
        }
    }
    if is_vertical(cw, ch) {
        rotate_counterclockwise(&out)
    } else {
        out
    }
}

/// A quarter turn anticlockwise (numpy's `rot90`): vertical text becomes a horizontal strip.
fn rotate_counterclockwise(image: &Rgb) -> Rgb {
    let (w, h) = (image.width, image.height);
    let mut data = vec![0u8; w * h * 3];
    for y in 0..h {
        for x in 0..w {
            // (x, y) goes to (y, w - 1 - x) in an h-wide image.
            let (nx, ny) = (y, w - 1 - x);
            let from = (y * w + x) * 3;
            let to = (ny * h + nx) * 3;
            data[to..to + 3].copy_from_slice(&image.data[from..from + 3]);
        }
    }
    Rgb {
        width: h,
        height: w,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::super::strategies::any_quad;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_crop_of_an_axis_aligned_box_is_the_same_pixels() {
        let (w, h) = (20usize, 10usize);
        let data: Vec<u8> = (0..w * h * 3).map(|i| (i % 251) as u8).collect();
        let image = RgbRef {
            width: w,
            height: h,
            data: &data,
        };
        let strip = crop_quad(&image, &[(4.0, 2.0), (14.0, 2.0), (14.0, 7.0), (4.0, 7.0)]);
        assert_eq!((strip.width, strip.height), (10, 5));
        for y in 0..5 {
            for x in 0..10 {
                for c in 0..3 {
                    assert_eq!(
                        strip.data[(y * 10 + x) * 3 + c],
                        image.data[((y + 2) * w + x + 4) * 3 + c]
                    );
                }
            }
        }
    }

    #[test]
    fn a_tall_crop_is_turned_into_a_strip() {
        let data = vec![200; 10 * 40 * 3];
        let image = RgbRef {
            width: 10,
            height: 40,
            data: &data,
        };
        let strip = crop_quad(
            &image,
            &[(0.0, 0.0), (10.0, 0.0), (10.0, 40.0), (0.0, 40.0)],
        );
        assert_eq!((strip.width, strip.height), (40, 10));
        assert!(strip.data.iter().all(|&v| v == 200));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// A crop of any quad is the size `strip_size` says, filled, never a panic.
        #[test]
        fn any_quad_crops_to_its_strip_size(
            quad in any_quad(),
            (w, h) in (1usize..40, 1usize..40),
        ) {
            let data: Vec<u8> = (0..w * h * 3).map(|i| (i % 256) as u8).collect();
            let image = RgbRef { width: w, height: h, data: &data };
            let strip = crop_quad(&image, &quad);
            prop_assert_eq!((strip.width, strip.height), strip_size(&quad));
            prop_assert_eq!(strip.data.len(), strip.width * strip.height * 3);
        }

        /// Whatever a quad's size, its strip stays within MAX_CROP_SIDE.
        #[test]
        fn strips_are_bounded(quad in prop::array::uniform4((-1e9f32..1e9, -1e9f32..1e9))) {
            let (w, h) = strip_size(&quad);
            prop_assert!((1..=MAX_CROP_SIDE).contains(&w) && (1..=MAX_CROP_SIDE).contains(&h));
        }
    }
}
