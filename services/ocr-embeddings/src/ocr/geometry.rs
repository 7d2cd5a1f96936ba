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

/// A band this many line heights tall or more with no text across the whole width
/// separates rows, which are read before any column (see [`reading_order`]).
const ROW_GAP: f32 = 0.5;

/// Longest side of a cropped strip; a box larger than this is sampled down.
pub const MAX_CROP_SIDE: usize = 4096;

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

/// The text boxes of `map`, scaled to an image of `image_width` x `image_height`. Any map
/// (NaN, infinities, one pixel, a million specks) gives boxes inside the image, in time
/// linear in its pixels plus its regions' sizes.
pub fn detect_boxes(
    map: &ProbMap<'_>,
    params: &DbParams,
    image_width: usize,
    image_height: usize,
) -> Detection {
    let mut found = Detection::default();
    let (w, h) = (map.width, map.height);
    if w == 0 || h == 0 || map.data.len() < w.saturating_mul(h) {
        return found;
    }
    let sx = image_width as f32 / w as f32;
    let sy = image_height as f32 / h as f32;
    // NaN is not text.
    let text = |p: f32| p > params.threshold;
    let mut seen = vec![false; w * h];
    let mut stack = Vec::new();
    for start in 0..w * h {
        if seen[start] || !text(map.data[start]) {
            continue;
        }
        // Flood fill (8-connected); keep each row's leftmost and rightmost pixel, which is
        // all the convex hull needs.
        let mut rows: std::collections::BTreeMap<usize, (usize, usize)> = Default::default();
        seen[start] = true;
        stack.push(start);
        while let Some(i) = stack.pop() {
            let (x, y) = (i % w, i / w);
            let row = rows.entry(y).or_insert((x, x));
            row.0 = row.0.min(x);
            row.1 = row.1.max(x);
            for dy in -1i64..=1 {
                for dx in -1i64..=1 {
                    let (nx, ny) = (x as i64 + dx, y as i64 + dy);
                    if nx < 0 || ny < 0 || nx >= w as i64 || ny >= h as i64 {
                        continue;
                    }
                    let j = ny as usize * w + nx as usize;
                    if !seen[j] && text(map.data[j]) {
                        seen[j] = true;
                        stack.push(j);
                    }
                }
            }
        }
        let mut points: Vec<(f32, f32)> = Vec::with_capacity(rows.len() * 2);
        for (&y, &(x0, x1)) in &rows {
            points.push((x0 as f32, y as f32));
            if x1 != x0 {
                points.push((x1 as f32, y as f32));
            }
        }
        let hull = convex_hull(points);
        let Some(rect) = min_area_rect(&hull) else {
            continue;
        };
        if rect.short_side() < params.min_size {
            continue;
        }
        let score = mean_inside(map, &rect.corners());
        if score.is_nan() || score < params.box_threshold {
            continue;
        }
        let grown = rect.unclip(params.unclip_ratio);
        if grown.short_side() < params.min_size + 2.0 {
            continue;
        }
        let quad = order_corners(grown.corners()).map(|(x, y)| {
            (
                (x * sx).clamp(0.0, image_width as f32),
                (y * sy).clamp(0.0, image_height as f32),
            )
        });
        if found.boxes.len() < params.max_boxes {
            found.boxes.push(TextBox { quad, score });
        } else {
            found.dropped += 1;
        }
    }
    found
}

/// Andrew's monotone chain; counter-clockwise (in y-down coordinates: clockwise on screen),
/// without repeated points.
fn convex_hull(mut points: Vec<(f32, f32)>) -> Vec<(f32, f32)> {
    points.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    points.dedup();
    if points.len() < 3 {
        return points;
    }
    let cross = |o: (f32, f32), a: (f32, f32), b: (f32, f32)| {
        (a.0 - o.0) * (b.1 - o.1) - (a.1 - o.1) * (b.0 - o.0)
    };
    let mut hull: Vec<(f32, f32)> = Vec::with_capacity(points.len() * 2);
    for pass in 0..2 {
        let start = hull.len();
        let iter: Box<dyn Iterator<Item = &(f32, f32)>> = if pass == 0 {
            Box::new(points.iter())
        } else {
            Box::new(points.iter().rev())
        };
        for &p in iter {
            while hull.len() >= start + 2
                && cross(hull[hull.len() - 2], hull[hull.len() - 1], p) <= 0.0
            {
                hull.pop();
            }
            hull.push(p);
        }
        hull.pop();
    }
    hull
}

/// A rotated rectangle: centre, unit axis `u` (and `v` perpendicular), half extents.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Rect {
    centre: (f32, f32),
    u: (f32, f32),
    half: (f32, f32),
}

impl Rect {
    fn short_side(&self) -> f32 {
        2.0 * self.half.0.min(self.half.1)
    }

    fn corners(&self) -> [(f32, f32); 4] {
        let (c, u) = (self.centre, self.u);
        let v = (-u.1, u.0);
        let at = |a: f32, b: f32| (c.0 + a * u.0 + b * v.0, c.1 + a * u.1 + b * v.1);
        let (hu, hv) = self.half;
        [at(-hu, -hv), at(hu, -hv), at(hu, hv), at(-hu, hv)]
    }

    /// Grown by `d = area · ratio / perimeter` on every side.
    fn unclip(&self, ratio: f32) -> Rect {
        let (w, h) = (2.0 * self.half.0, 2.0 * self.half.1);
        let perimeter = 2.0 * (w + h);
        let d = if perimeter > 0.0 {
            w * h * ratio / perimeter
        } else {
            0.0
        };
        Rect {
            half: (self.half.0 + d, self.half.1 + d),
            ..*self
        }
    }
}

/// The minimum-area rectangle around a convex hull (rotating calipers: one side of it lies
/// on a hull edge). `None` for an empty hull.
fn min_area_rect(hull: &[(f32, f32)]) -> Option<Rect> {
    let first = *hull.first()?;
    if hull.len() == 1 {
        return Some(Rect {
            centre: first,
            u: (1.0, 0.0),
            half: (0.0, 0.0),
        });
    }
    let mut best: Option<(f32, Rect)> = None;
    for i in 0..hull.len() {
        let (a, b) = (hull[i], hull[(i + 1) % hull.len()]);
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let len = (dx * dx + dy * dy).sqrt();
        if len == 0.0 {
            continue;
        }
        let u = (dx / len, dy / len);
        let v = (-u.1, u.0);
        let (mut u0, mut u1, mut v0, mut v1) = (f32::MAX, f32::MIN, f32::MAX, f32::MIN);
        for p in hull {
            let pu = p.0 * u.0 + p.1 * u.1;
            let pv = p.0 * v.0 + p.1 * v.1;
            u0 = u0.min(pu);
            u1 = u1.max(pu);
            v0 = v0.min(pv);
            v1 = v1.max(pv);
        }
        let area = (u1 - u0) * (v1 - v0);
        if best.as_ref().is_none_or(|(a, _)| area < *a) {
            let (cu, cv) = ((u0 + u1) / 2.0, (v0 + v1) / 2.0);
            let centre = (cu * u.0 + cv * v.0, cu * u.1 + cv * v.1);
            // Keep `u` the longer axis, pointing right: corners then come out in a stable order.
            let (mut u, mut half) = (u, ((u1 - u0) / 2.0, (v1 - v0) / 2.0));
            if half.1 > half.0 {
                u = (-u.1, u.0);
                half = (half.1, half.0);
            }
            if u.0 < 0.0 || (u.0 == 0.0 && u.1 < 0.0) {
                u = (-u.0, -u.1);
            }
            best = Some((area, Rect { centre, u, half }));
        }
    }
    best.map(|(_, r)| r)
}

/// Corners as top-left, top-right, bottom-right, bottom-left (PaddleOCR's `get_mini_boxes`:
/// of the two leftmost points the upper is top-left; of the two rightmost the upper is
/// top-right).
fn order_corners(mut pts: [(f32, f32); 4]) -> Quad {
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (tl, bl) = if pts[0].1 <= pts[1].1 {
        (pts[0], pts[1])
    } else {
        (pts[1], pts[0])
    };
    let (tr, br) = if pts[2].1 <= pts[3].1 {
        (pts[2], pts[3])
    } else {
        (pts[3], pts[2])
    };
    [tl, tr, br, bl]
}

fn inside_convex(quad: &[(f32, f32); 4], p: (f32, f32)) -> bool {
    let mut sign = 0i8;
    for i in 0..4 {
        let (a, b) = (quad[i], quad[(i + 1) % 4]);
        let c = (b.0 - a.0) * (p.1 - a.1) - (b.1 - a.1) * (p.0 - a.0);
        let s = if c > 0.0 {
            1
        } else if c < 0.0 {
            -1
        } else {
            0
        };
        if s != 0 {
            if sign != 0 && s != sign {
                return false;
            }
            sign = s;
        }
    }
    true
}

/// Mean probability of the map's pixels inside `quad` (PaddleOCR's `box_score_fast`).
fn mean_inside(map: &ProbMap<'_>, quad: &[(f32, f32); 4]) -> f32 {
    let clampx = |v: f32| (v.max(0.0) as usize).min(map.width - 1);
    let clampy = |v: f32| (v.max(0.0) as usize).min(map.height - 1);
    let x0 = clampx(quad.iter().map(|p| p.0).fold(f32::MAX, f32::min).floor());
    let x1 = clampx(quad.iter().map(|p| p.0).fold(f32::MIN, f32::max).ceil());
    let y0 = clampy(quad.iter().map(|p| p.1).fold(f32::MAX, f32::min).floor());
    let y1 = clampy(quad.iter().map(|p| p.1).fold(f32::MIN, f32::max).ceil());
    let (mut sum, mut n) = (0f64, 0usize);
    for y in y0..=y1 {
        for x in x0..=x1 {
            if inside_convex(quad, (x as f32, y as f32)) {
                sum += f64::from(map.at(x, y));
                n += 1;
            }
        }
    }
    if n == 0 { 0.0 } else { (sum / n as f64) as f32 }
}

/// Axis-aligned bounds: x0, y0, x1, y1.
fn bounds(q: &Quad) -> [f32; 4] {
    let xs = q.iter().map(|p| p.0);
    let ys = q.iter().map(|p| p.1);
    [
        xs.clone().fold(f32::MAX, f32::min),
        ys.clone().fold(f32::MAX, f32::min),
        xs.fold(f32::MIN, f32::max),
        ys.fold(f32::MIN, f32::max),
    ]
}

/// Puts `boxes` in reading order (recursive XY-cut, see the module docs).
pub fn reading_order(boxes: &mut Vec<TextBox>) {
    if boxes.len() < 2 {
        return;
    }
    // On a skewed scan a row's boxes climb or fall across the page, closing the gaps between
    // rows; the rows are found on the page turned back by its skew (the boxes' median slope).
    let (sin, cos) = (-skew(boxes)).sin_cos();
    let rects: Vec<[f32; 4]> = boxes
        .iter()
        .map(|b| bounds(&b.quad.map(|(x, y)| (x * cos - y * sin, x * sin + y * cos))))
        .collect();
    let mut heights: Vec<f32> = rects.iter().map(|r| r[3] - r[1]).collect();
    heights.sort_by(f32::total_cmp);
    let line_height = heights[heights.len() / 2].max(1.0);
    let mut order = Vec::with_capacity(boxes.len());
    xy_cut(&rects, (0..boxes.len()).collect(), line_height, &mut order);
    let mut taken: Vec<Option<TextBox>> = std::mem::take(boxes).into_iter().map(Some).collect();
    boxes.extend(order.into_iter().filter_map(|i| taken[i].take()));
}

/// The page's skew, radians: the median slope of the top edges of its boxes that are
/// clearly lines (at least twice as wide as tall); 0 without such boxes, and never past
/// 10 degrees (a larger turn is orientation's business, not skew).
fn skew(boxes: &[TextBox]) -> f32 {
    let mut slopes: Vec<f32> = boxes
        .iter()
        .filter_map(|b| {
            let [tl, tr, _, bl] = b.quad;
            let (dx, dy) = (tr.0 - tl.0, tr.1 - tl.1);
            let height = dist(tl, bl);
            let wide = dx > 0.0 && dx.hypot(dy) >= 2.0 * height;
            wide.then(|| dy.atan2(dx)).filter(|a| a.is_finite())
        })
        .collect();
    if slopes.is_empty() {
        return 0.0;
    }
    slopes.sort_by(f32::total_cmp);
    let limit = 10f32.to_radians();
    slopes[slopes.len() / 2].clamp(-limit, limit)
}

/// The widest empty band across `axis` (0: a vertical gap between columns, 1: a horizontal
/// gap between rows) among `idx`: (its width, the boxes before it, the boxes after it).
fn widest_gap(
    rects: &[[f32; 4]],
    idx: &[usize],
    axis: usize,
) -> Option<(f32, Vec<usize>, Vec<usize>)> {
    let mut sorted = idx.to_vec();
    sorted.sort_by(|&a, &b| rects[a][axis].total_cmp(&rects[b][axis]));
    let mut reach = f32::MIN;
    let mut best: Option<(f32, usize)> = None;
    for (k, &i) in sorted.iter().enumerate() {
        if k > 0 {
            let gap = rects[i][axis] - reach;
            if gap > 0.0 && best.is_none_or(|(g, _)| gap > g) {
                best = Some((gap, k));
            }
        }
        reach = reach.max(rects[i][axis + 2]);
    }
    best.map(|(gap, k)| {
        let after = sorted.split_off(k);
        (gap, sorted, after)
    })
}

fn xy_cut(rects: &[[f32; 4]], idx: Vec<usize>, line_height: f32, out: &mut Vec<usize>) {
    if idx.len() < 2 {
        out.extend(idx);
        return;
    }
    let rows = widest_gap(rects, &idx, 1);
    // A column gutter must be wider than a line is tall, or the words of one line would be
    // read as columns.
    let columns = widest_gap(rects, &idx, 0).filter(|(gap, _, _)| *gap > line_height);
    let cut = match (rows, columns) {
        // Rows apart by half a line or more are rows of their own (a title, a table's or a
        // form's rows), read one after the other across the page; lines of running text are
        // closer than that, so text columns still read column by column.
        (Some(r), _) if r.0 >= ROW_GAP * line_height => Some(r),
        // A gutter wider than the rows' gap splits columns of running text, whose lines
        // fill their column; between a table's columns (short cells, a figure's column
        // beside a description) the rows win, and the table reads row by row.
        (Some(r), Some(c)) => Some(
            if c.0 > r.0 && text_column(rects, &c.1) && text_column(rects, &c.2) {
                c
            } else {
                r
            },
        ),
        (r, c) => r.or(c),
    };
    match cut {
        Some((_, before, after)) => {
            xy_cut(rects, before, line_height, out);
            xy_cut(rects, after, line_height, out);
        }
        None => out.extend(by_lines(rects, idx, line_height)),
    }
}

/// Whether the boxes `idx` look like a column of running text: their median width is at
/// least half the column's.
fn text_column(rects: &[[f32; 4]], idx: &[usize]) -> bool {
    let Some(left) = idx.iter().map(|&i| rects[i][0]).min_by(f32::total_cmp) else {
        return false;
    };
    let right = idx
        .iter()
        .map(|&i| rects[i][2])
        .max_by(f32::total_cmp)
        .unwrap_or(left);
    let mut widths: Vec<f32> = idx.iter().map(|&i| rects[i][2] - rects[i][0]).collect();
    widths.sort_by(f32::total_cmp);
    widths[widths.len() / 2] >= 0.5 * (right - left)
}

/// Boxes whose rows overlap (a skewed page, a table row with ragged cells) in reading
/// order: grouped into lines — sorted by their vertical centres, a box joins the current
/// line while its centre is within half a line height of the line's first box — and each
/// line read left to right. Every comparison is a total order (`f32::total_cmp`), so no
/// input, NaN included, can make the sort panic.
fn by_lines(rects: &[[f32; 4]], mut idx: Vec<usize>, line_height: f32) -> Vec<usize> {
    let centre = |i: usize| (rects[i][1] + rects[i][3]) / 2.0;
    idx.sort_by(|&a, &b| {
        centre(a)
            .total_cmp(&centre(b))
            .then_with(|| by_rect(rects, a, b))
    });
    let mut out = Vec::with_capacity(idx.len());
    let mut line: Vec<usize> = Vec::new();
    let mut line_centre = f32::NAN;
    for i in idx {
        // A NaN distance is not "near": it starts a new line.
        let near = (centre(i) - line_centre).abs() < line_height / 2.0;
        if line.is_empty() || !near {
            flush_line(rects, &mut line, &mut out);
            line_centre = centre(i);
        }
        line.push(i);
    }
    flush_line(rects, &mut line, &mut out);
    out
}

fn flush_line(rects: &[[f32; 4]], line: &mut Vec<usize>, out: &mut Vec<usize>) {
    line.sort_by(|&a, &b| by_rect(rects, a, b));
    out.append(line);
}

/// Left edge first, then top, right, bottom: a total order on boxes' bounds, so boxes read
/// the same whatever order they came in.
fn by_rect(rects: &[[f32; 4]], a: usize, b: usize) -> std::cmp::Ordering {
    let (ra, rb) = (rects[a], rects[b]);
    ra[0]
        .total_cmp(&rb[0])
        .then(ra[1].total_cmp(&rb[1]))
        .then(ra[2].total_cmp(&rb[2]))
        .then(ra[3].total_cmp(&rb[3]))
}

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

fn dist(a: (f32, f32), b: (f32, f32)) -> f32 {
    ((a.0 - b.0).powi(2) + (a.1 - b.1).powi(2)).sqrt()
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
    use super::*;
    use proptest::prelude::*;

    /// A map with 1.0 inside the given axis-aligned rectangles (x0, y0, x1, y1 inclusive).
    fn map_with(w: usize, h: usize, rects: &[(usize, usize, usize, usize)]) -> Vec<f32> {
        let mut data = vec![0.0; w * h];
        for &(x0, y0, x1, y1) in rects {
            for y in y0..=y1 {
                for x in x0..=x1 {
                    data[y * w + x] = 0.9;
                }
            }
        }
        data
    }

    #[test]
    fn an_upright_region_becomes_its_unclipped_rectangle() {
        let data = map_with(100, 40, &[(10, 10, 69, 19)]);
        let map = ProbMap {
            width: 100,
            height: 40,
            data: &data,
        };
        let boxes = detect_boxes(&map, &DbParams::default(), 200, 80).boxes;
        assert_eq!(boxes.len(), 1);
        let b = &boxes[0];
        assert!((b.score - 0.9).abs() < 1e-3, "{}", b.score);
        // 59 x 9 between pixel centres; d = 59*9*1.5/(2*68) = 5.856 on every side; then x2.
        let d = 59.0 * 9.0 * 1.5 / 136.0;
        let expect = [
            (10.0 - d, 10.0 - d),
            (69.0 + d, 10.0 - d),
            (69.0 + d, 19.0 + d),
            (10.0 - d, 19.0 + d),
        ];
        for (got, want) in b.quad.iter().zip(expect) {
            assert!(
                (got.0 - want.0 * 2.0).abs() < 0.01,
                "{:?} vs {:?}",
                b.quad,
                expect
            );
            assert!(
                (got.1 - want.1 * 2.0).abs() < 0.01,
                "{:?} vs {:?}",
                b.quad,
                expect
            );
        }
    }

    #[test]
    fn a_rotated_region_gets_a_rotated_rectangle() {
        // A bar 60 long and 8 thick at 30 degrees.
        let (w, h) = (120usize, 120usize);
        let mut data = vec![0.0f32; w * h];
        let (c, s) = (30f32.to_radians().cos(), 30f32.to_radians().sin());
        for y in 0..h {
            for x in 0..w {
                let (dx, dy) = (x as f32 - 60.0, y as f32 - 60.0);
                let (a, b) = (dx * c + dy * s, -dx * s + dy * c);
                if a.abs() <= 30.0 && b.abs() <= 4.0 {
                    data[y * w + x] = 1.0;
                }
            }
        }
        let map = ProbMap {
            width: w,
            height: h,
            data: &data,
        };
        let params = DbParams {
            unclip_ratio: 0.0,
            ..DbParams::default()
        };
        let boxes = detect_boxes(&map, &params, w, h).boxes;
        assert_eq!(boxes.len(), 1);
        let q = boxes[0].quad;
        let angle = (q[1].1 - q[0].1).atan2(q[1].0 - q[0].0).to_degrees();
        assert!((angle - 30.0).abs() < 3.0, "angle {angle}, {q:?}");
        let long = dist(q[0], q[1]);
        let short = dist(q[0], q[3]);
        assert!(
            (long - 60.0).abs() < 3.0 && (short - 8.0).abs() < 2.0,
            "{long} x {short}"
        );
    }

    #[test]
    fn faint_tiny_and_empty_regions_are_dropped() {
        let mut data = map_with(50, 50, &[(5, 5, 6, 6)]); // 1 px between centres: too small
        for y in 20..30 {
            for x in 10..40 {
                data[y * 50 + x] = 0.35; // above the threshold, below the box score
            }
        }
        let map = ProbMap {
            width: 50,
            height: 50,
            data: &data,
        };
        assert!(
            detect_boxes(&map, &DbParams::default(), 50, 50)
                .boxes
                .is_empty()
        );
        let empty = ProbMap {
            width: 0,
            height: 0,
            data: &[],
        };
        assert_eq!(
            detect_boxes(&empty, &DbParams::default(), 10, 10),
            Detection::default()
        );
    }

    fn boxed(x0: f32, y0: f32, x1: f32, y1: f32) -> TextBox {
        TextBox {
            quad: [(x0, y0), (x1, y0), (x1, y1), (x0, y1)],
            score: 1.0,
        }
    }

    #[test]
    fn two_columns_under_a_title_read_column_by_column() {
        // Lines of running text: 15 high, 18 apart (their gaps are under half a line).
        let mut boxes = vec![
            boxed(300.0, 60.0, 500.0, 75.0), // right column, line 1
            boxed(20.0, 60.0, 250.0, 75.0),  // left column, line 1
            boxed(20.0, 10.0, 500.0, 30.0),  // title
            boxed(300.0, 78.0, 480.0, 93.0),
            boxed(20.0, 78.0, 240.0, 93.0),
        ];
        reading_order(&mut boxes);
        let order: Vec<(f32, f32)> = boxes.iter().map(|b| b.quad[0]).collect();
        assert_eq!(
            order,
            vec![
                (20.0, 10.0),
                (20.0, 60.0),
                (20.0, 78.0),
                (300.0, 60.0),
                (300.0, 78.0)
            ]
        );
    }

    #[test]
    fn a_table_reads_row_by_row_across_its_columns() {
        // Three rows of an item and two figures, 15 high, 25 apart; the columns' gutters
        // are wider than the rows' gaps.
        let mut boxes = Vec::new();
        for row in [2.0f32, 0.0, 1.0] {
            let top = 100.0 + row * 25.0;
            boxes.push(boxed(400.0, top, 440.0, top + 15.0));
            boxes.push(boxed(20.0, top, 180.0, top + 15.0));
            boxes.push(boxed(300.0, top, 320.0, top + 15.0));
        }
        reading_order(&mut boxes);
        let order: Vec<(f32, f32)> = boxes.iter().map(|b| b.quad[0]).collect();
        let mut want = Vec::new();
        for top in [100.0, 125.0, 150.0] {
            want.extend([(20.0, top), (300.0, top), (400.0, top)]);
        }
        assert_eq!(order, want);
    }

    #[test]
    fn a_skewed_table_still_reads_row_by_row() {
        // The table above turned 1.5 degrees: each row climbs 11 px over its 430 px, more
        // than the 10 px between rows.
        let (sin, cos) = 1.5f32.to_radians().sin_cos();
        let turn = |(x, y): (f32, f32)| (x * cos - y * sin, x * sin + y * cos);
        let mut boxes = Vec::new();
        for row in [2.0f32, 0.0, 1.0] {
            let top = 100.0 + row * 25.0;
            for (x0, x1) in [(400.0, 440.0), (20.0, 180.0), (300.0, 340.0)] {
                let b = boxed(x0, top, x1, top + 15.0);
                boxes.push(TextBox {
                    quad: b.quad.map(turn),
                    score: 1.0,
                });
            }
        }
        reading_order(&mut boxes);
        let order: Vec<(i32, i32)> = boxes
            .iter()
            .map(|b| {
                let (x, y) = b.quad[0];
                let (x, y) = (x * cos + y * sin, -x * sin + y * cos);
                (x.round() as i32, y.round() as i32)
            })
            .collect();
        let mut want = Vec::new();
        for top in [100, 125, 150] {
            want.extend([(20, top), (300, top), (400, top)]);
        }
        assert_eq!(order, want);
    }

    #[test]
    fn words_of_one_line_read_left_to_right() {
        let mut boxes = vec![
            boxed(120.0, 11.0, 180.0, 29.0),
            boxed(10.0, 10.0, 100.0, 30.0),
            boxed(10.0, 40.0, 100.0, 60.0),
        ];
        reading_order(&mut boxes);
        let xs: Vec<(f32, f32)> = boxes.iter().map(|b| b.quad[0]).collect();
        assert_eq!(xs, vec![(10.0, 10.0), (120.0, 11.0), (10.0, 40.0)]);
    }

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

    /// Any f32 a model could emit, the odd ones often.
    fn any_prob() -> impl Strategy<Value = f32> {
        prop_oneof![
            6 => 0.0f32..1.0,
            1 => Just(f32::NAN),
            1 => Just(f32::INFINITY),
            1 => Just(f32::NEG_INFINITY),
            1 => Just(0.3f32),
            1 => -2.0f32..2.0,
        ]
    }

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

    fn any_quad() -> impl Strategy<Value = Quad> {
        prop::array::uniform4((any_coord(), any_coord()))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Any map — NaN, infinities, one pixel, specks at the edges — gives boxes inside
        /// the image with a finite score, at most the cap of them, the rest counted.
        #[test]
        fn any_map_gives_boxes_inside_the_image(
            (w, h, data) in (1usize..48, 1usize..48).prop_flat_map(|(w, h)| {
                (Just(w), Just(h), prop::collection::vec(any_prob(), w * h))
            }),
            image_w in 1usize..5000,
            image_h in 1usize..5000,
            cap in 0usize..4,
        ) {
            let map = ProbMap { width: w, height: h, data: &data };
            let all = detect_boxes(&map, &DbParams::default(), image_w, image_h);
            prop_assert_eq!(all.dropped, 0);
            for b in &all.boxes {
                prop_assert!(!b.score.is_nan());
                for &(x, y) in &b.quad {
                    prop_assert!((0.0..=image_w as f32).contains(&x), "{:?}", b.quad);
                    prop_assert!((0.0..=image_h as f32).contains(&y), "{:?}", b.quad);
                }
            }
            let params = DbParams { max_boxes: cap, ..DbParams::default() };
            let capped = detect_boxes(&map, &params, image_w, image_h);
            prop_assert_eq!(capped.boxes.len(), all.boxes.len().min(cap));
            prop_assert_eq!(capped.boxes.len() + capped.dropped, all.boxes.len());
        }

        /// Reading order is a permutation of any boxes, NaN and overlapping rows included
        /// (a comparator that is not a total order made Rust's sort panic on dense forms).
        #[test]
        fn reading_order_is_a_permutation_of_any_boxes(
            quads in prop::collection::vec(any_quad(), 0..60),
        ) {
            let mut boxes: Vec<TextBox> = quads
                .iter()
                .enumerate()
                .map(|(i, q)| TextBox { quad: *q, score: i as f32 })
                .collect();
            reading_order(&mut boxes);
            let mut seen: Vec<usize> = boxes.iter().map(|b| b.score as usize).collect();
            seen.sort_unstable();
            prop_assert_eq!(seen, (0..quads.len()).collect::<Vec<_>>());
        }

        /// Reading order on rows that chain into each other (each within half a line of the
        /// next, the first and last far apart): the case whose comparator was not
        /// transitive. Sorted, then the same boxes shuffled give the same order.
        #[test]
        fn chained_rows_read_the_same_whatever_their_order(
            steps in prop::collection::vec((0.0f32..9.0, 0.0f32..400.0), 2..40),
            rotate in 0usize..40,
        ) {
            let mut y = 0.0;
            let mut boxes: Vec<TextBox> = Vec::new();
            for (i, (dy, x)) in steps.iter().enumerate() {
                y += dy;
                boxes.push(TextBox {
                    quad: [(*x, y), (x + 30.0, y), (x + 30.0, y + 20.0), (*x, y + 20.0)],
                    score: i as f32,
                });
            }
            let mut a = boxes.clone();
            reading_order(&mut a);
            let mut b = boxes;
            let k = rotate % b.len();
            b.rotate_left(k);
            reading_order(&mut b);
            let quads = |v: &[TextBox]| v.iter().map(|t| t.quad).collect::<Vec<_>>();
            prop_assert_eq!(quads(&a), quads(&b));
        }

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
