//! The DB post-process, [`detect_boxes`]: threshold the probability map, label 8-connected
//! regions, take each region's convex hull and its minimum-area rotated rectangle (rotating
//! calipers), score it by the mean probability inside, "unclip" it (the detector was trained
//! on text shrunk by `d = area · ratio / perimeter`; growing each side by `d` restores it)
//! and scale it to the image.

use super::{DbParams, Detection, ProbMap, Quad, TextBox};

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

#[cfg(test)]
mod tests {
    use super::super::dist;
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
    }
}
