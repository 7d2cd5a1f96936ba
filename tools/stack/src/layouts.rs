//! A4 pages laid out like real documents — columns under a title, three columns, a table,
//! a form, a mixed page — built from any words, whose reading order is known because it is
//! the order the runs are placed in: the reference for measuring reading order on scans of
//! them (a real PDF's text layer is not always in visual order).

use crate::pdf::{Placed, wrap};

/// Page width and height, points (A4).
const PAGE: (f32, f32) = (595.0, 842.0);
/// Margin, points.
const MARGIN: f32 = 50.0;

/// Takes words from a list, round and round.
struct Words<'a> {
    all: &'a [&'a str],
    at: usize,
}

impl<'a> Words<'a> {
    fn take(&mut self, n: usize) -> Vec<&'a str> {
        (0..n)
            .map(|_| {
                let w = self.all[self.at % self.all.len()];
                self.at += 1;
                w
            })
            .collect()
    }
}

/// A named layout, its runs in reading order.
#[derive(Debug, Clone)]
pub struct Layout {
    /// What the page is.
    pub name: &'static str,
    /// Its runs, in reading order.
    pub runs: Vec<Placed>,
}

impl Layout {
    /// The page's text in reading order, a line per run.
    pub fn text(&self) -> String {
        self.runs
            .iter()
            .map(|r| r.text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

fn run(x: f32, y: f32, size: f32, text: impl Into<String>) -> Placed {
    Placed {
        x,
        y,
        size,
        text: text.into(),
    }
}

/// A column of wrapped `words` at `x`, `width` wide, from baseline `top` down to `bottom`:
/// its runs, and the baseline after it.
fn column(
    out: &mut Vec<Placed>,
    words: &mut Words<'_>,
    (x, width): (f32, f32),
    (top, bottom): (f32, f32),
    size: f32,
) -> f32 {
    let leading = size * 1.25;
    let lines_fit = ((top - bottom) / leading).floor().max(0.0) as usize;
    let per_line = (width / (0.6 * size * 6.0)).max(1.0) as usize;
    let mut y = top;
    let mut lines = wrap(&words.take(lines_fit * per_line * 2), width, size);
    lines.truncate(lines_fit);
    for line in lines {
        out.push(run(x, y, size, line));
        y -= leading;
    }
    y
}

/// As many of `words` as fit on one line `width` points wide at `size` pt (a word too long
/// for it is cut).
fn fit(words: &[&str], width: f32, size: f32) -> String {
    let max = (width / (0.6 * size)).max(1.0) as usize;
    let line = wrap(words, width, size)
        .into_iter()
        .next()
        .unwrap_or_default();
    line.chars().take(max).collect()
}

/// Every layout, its words taken from `vocabulary` in turn (non-empty).
pub fn all(vocabulary: &[&str]) -> Vec<Layout> {
    let mut words = Words {
        all: if vocabulary.is_empty() {
            &["text"]
        } else {
            vocabulary
        },
        at: 0,
    };
    let (w, h) = PAGE;
    let body = w - 2.0 * MARGIN;
    let mut out = Vec::new();

    // Two columns under a title spanning both (a paper).
    let mut runs = vec![run(MARGIN, h - 70.0, 16.0, fit(&words.take(7), body, 16.0))];
    let col = (body - 30.0) / 2.0;
    column(
        &mut runs,
        &mut words,
        (MARGIN, col),
        (h - 110.0, 60.0),
        10.0,
    );
    column(
        &mut runs,
        &mut words,
        (MARGIN + col + 30.0, col),
        (h - 110.0, 60.0),
        10.0,
    );
    out.push(Layout {
        name: "two columns under a title",
        runs,
    });

    // Three columns of small print under a header, a page number under them (a magazine).
    let mut runs = vec![run(MARGIN, h - 60.0, 14.0, fit(&words.take(5), body, 14.0))];
    let col = (body - 2.0 * 20.0) / 3.0;
    for c in 0..3 {
        let x = MARGIN + c as f32 * (col + 20.0);
        column(&mut runs, &mut words, (x, col), (h - 95.0, 70.0), 8.0);
    }
    runs.push(run(w / 2.0 - 10.0, 40.0, 9.0, "Page 3"));
    out.push(Layout {
        name: "three columns of small print",
        runs,
    });

    // A table: a header row, 24 rows of an item and three figures (an invoice).
    let xs = [MARGIN, MARGIN + 230.0, MARGIN + 310.0, MARGIN + 400.0];
    let mut runs = vec![run(MARGIN, h - 70.0, 14.0, "Invoice 2024-0042")];
    for (x, head) in xs
        .iter()
        .zip(["Description", "Qty", "Unit price", "Amount"])
    {
        runs.push(run(*x, h - 110.0, 10.0, head));
    }
    for row in 0..24u32 {
        let y = h - 135.0 - row as f32 * 24.0;
        let qty = 1 + row * 7 % 12;
        let cents = 250 + row * 1337 % 9000;
        runs.push(run(xs[0], y, 10.0, fit(&words.take(3), 220.0, 10.0)));
        runs.push(run(xs[1], y, 10.0, qty.to_string()));
        runs.push(run(
            xs[2],
            y,
            10.0,
            format!("{}.{:02}", cents / 100, cents % 100),
        ));
        let total = cents * qty;
        runs.push(run(
            xs[3],
            y,
            10.0,
            format!("{}.{:02}", total / 100, total % 100),
        ));
    }
    out.push(Layout {
        name: "a table of 24 rows",
        runs,
    });

    // A form: labels and their values on rows, two fields a row.
    let mut runs = vec![run(MARGIN, h - 70.0, 14.0, fit(&words.take(4), body, 14.0))];
    for row in 0..22 {
        let y = h - 115.0 - row as f32 * 30.0;
        // Two fields a row: a label (9 pt) and its value (10 pt) 110 pt right of it.
        for (x, value_words, value_width) in [(MARGIN, 3, 140.0), (MARGIN + 260.0, 2, 125.0)] {
            let label = format!("{}:", fit(&words.take(2), 95.0, 9.0));
            runs.push(run(x, y, 9.0, label));
            let value = fit(&words.take(value_words), value_width, 10.0);
            runs.push(run(x + 110.0, y, 10.0, value));
        }
    }
    out.push(Layout {
        name: "a form of labelled fields",
        runs,
    });

    // A title, a paragraph across the page, two columns, a closing paragraph across.
    let mut runs = vec![run(MARGIN, h - 70.0, 16.0, fit(&words.take(6), body, 16.0))];
    let after = column(
        &mut runs,
        &mut words,
        (MARGIN, body),
        (h - 105.0, h - 215.0),
        10.0,
    );
    let col = (body - 30.0) / 2.0;
    let top = after - 20.0;
    column(&mut runs, &mut words, (MARGIN, col), (top, 200.0), 10.0);
    column(
        &mut runs,
        &mut words,
        (MARGIN + col + 30.0, col),
        (top, 200.0),
        10.0,
    );
    column(&mut runs, &mut words, (MARGIN, body), (170.0, 80.0), 10.0);
    out.push(Layout {
        name: "paragraphs across the page around two columns",
        runs,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layout_stays_on_its_page_and_uses_every_run() {
        let vocabulary = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"];
        let layouts = all(&vocabulary);
        assert_eq!(layouts.len(), 5);
        for l in &layouts {
            assert!(l.runs.len() > 20, "{}", l.name);
            for r in &l.runs {
                let width = r.text.len() as f32 * 0.6 * r.size;
                assert!(
                    r.x >= MARGIN && r.x + width <= PAGE.0 - MARGIN + 1.0,
                    "{}: {r:?}",
                    l.name
                );
                assert!(r.y > 30.0 && r.y < PAGE.1 - 50.0, "{}: {r:?}", l.name);
            }
        }
        // Deterministic.
        assert_eq!(all(&vocabulary)[0].text(), layouts[0].text());
    }
}
