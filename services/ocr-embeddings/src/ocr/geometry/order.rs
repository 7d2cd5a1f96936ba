//! Reading order, [`reading_order`]: recursive XY-cut — split at the widest empty band:
//! across the page where rows are half a line apart or more (titles, table and form rows),
//! else between columns when a gutter is wider than a line is tall — so two-column pages read
//! column by column and tables row by row. The bands are found on the page turned back by its
//! skew; boxes no band separates are read line by line.

use super::{Quad, TextBox, dist};

/// A band this many line heights tall or more with no text across the whole width
/// separates rows, which are read before any column (see [`reading_order`]).
const ROW_GAP: f32 = 0.5;

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

#[cfg(test)]
mod tests {
    use super::super::strategies::any_quad;
    use super::*;
    use proptest::prelude::*;

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

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

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
    }
}
