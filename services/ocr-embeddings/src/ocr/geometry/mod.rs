//! The geometry of the DB text detector's post-process, without OpenCV:
//!
//! * [`detect_boxes`]: threshold the probability map, label 8-connected regions, take each
//!   region's convex hull and its minimum-area rotated rectangle (rotating calipers), score it
//!   by the mean probability inside, "unclip" it (the detector was trained on text shrunk by
//!   `d = area · ratio / perimeter`; growing each side by `d` restores it) and scale it to the
//!   image;
//! * [`reading_order`]: recursive XY-cut — split at the widest empty band: across the page
//!   where rows are half a line apart or more (titles, table and form rows), else between
//!   columns when a gutter is wider than a line is tall — so two-column pages read column
//!   by column and tables row by row;
//! * [`crop_quad`]: a perspective warp of one box to an upright strip (bilinear, edges
//!   replicated), turned a quarter when it is much taller than wide (vertical text).

mod boxes;
mod crop;
mod order;

pub use boxes::detect_boxes;
pub use crop::{MAX_CROP_SIDE, crop_quad, crop_size, is_vertical, strip_size};
pub use order::reading_order;

/// The detector's output: one probability per pixel, row-major.
#[derive(Debug, Clone, Copy)]
pub struct ProbMap<'a> {
    /// Width of the map.
    pub width: usize,
    /// Height of the map.
    pub height: usize,
    /// `width * height` probabilities.
    pub data: &'a [f32],
}

impl ProbMap<'_> {
    fn at(&self, x: usize, y: usize) -> f32 {
        self.data.get(y * self.width + x).copied().unwrap_or(0.0)
    }
}

/// Parameters of the post-process (defaults: PaddleOCR's and RapidOCR's).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DbParams {
    /// A pixel is text above this probability.
    pub threshold: f32,
    /// A region is kept when its mean probability is at least this.
    pub box_threshold: f32,
    /// How much a region grows back (`d = area · ratio / perimeter`).
    pub unclip_ratio: f32,
    /// Regions with a shorter side (map pixels) are dropped.
    pub min_size: f32,
    /// At most this many boxes are kept (in the map's row order); the rest are counted in
    /// [`Detection::dropped`], never dropped silently.
    pub max_boxes: usize,
}

impl Default for DbParams {
    fn default() -> Self {
        DbParams {
            threshold: 0.3,
            box_threshold: 0.5,
            unclip_ratio: 1.5,
            min_size: 3.0,
            max_boxes: MAX_BOXES,
        }
    }
}

/// Boxes one page keeps at most (PaddleOCR keeps 1,000 regions and drops the rest unsaid; a
/// dense 600 dpi page has over 1,000 lines).
pub const MAX_BOXES: usize = 20_000;

/// What [`detect_boxes`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Detection {
    /// The boxes kept.
    pub boxes: Vec<TextBox>,
    /// Boxes found past [`DbParams::max_boxes`] and not kept.
    pub dropped: usize,
}

/// Four corners: top-left, top-right, bottom-right, bottom-left.
pub type Quad = [(f32, f32); 4];

/// A detected text region.
#[derive(Debug, Clone, PartialEq)]
pub struct TextBox {
    /// Its corners in image pixels.
    pub quad: Quad,
    /// Mean probability inside it.
    pub score: f32,
}

/// An RGB image, row-major, 3 bytes a pixel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rgb {
    /// Width, pixels.
    pub width: usize,
    /// Height, pixels.
    pub height: usize,
    /// `width * height * 3` bytes.
    pub data: Vec<u8>,
}

/// An RGB image borrowed, row-major, 3 bytes a pixel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RgbRef<'a> {
    /// Width, pixels.
    pub width: usize,
    /// Height, pixels.
    pub height: usize,
    /// `width * height * 3` bytes.
    pub data: &'a [u8],
}

fn dist(a: (f32, f32), b: (f32, f32)) -> f32 {
    ((a.0 - b.0).powi(2) + (a.1 - b.1).powi(2)).sqrt()
}

/// Proptest strategies the submodules' tests share.
#[cfg(test)]
mod strategies {
    use proptest::prelude::*;

    use super::Quad;

    /// Any corner coordinate, the odd ones often.
    fn any_coord() -> impl Strategy<Value = f32> {
        prop_oneof![
            6 => -50.0f32..300.0,
            1 => Just(f32::NAN),
            1 => Just(f32::INFINITY),
            1 => Just(-1e30f32),
            1 => Just(0.0f32),
        ]
    }

    pub(super) fn any_quad() -> impl Strategy<Value = Quad> {
        prop::array::uniform4((any_coord(), any_coord()))
    }
}
