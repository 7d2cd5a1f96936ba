//! A small SVG line chart: panels stacked vertically, each with its lines over a shared
//! time axis — what `docflow simulate` and the autoscaler's load test draw.

use std::fmt::Write as _;

/// One line.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend.
    pub name: String,
    /// (time s, value).
    pub points: Vec<(f64, f64)>,
    /// Dashed (a simulated counterpart of a measured line).
    pub dashed: bool,
}

/// One panel: its title and lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// Title (what is plotted, with its unit).
    pub title: String,
    /// Lines.
    pub series: Vec<Series>,
}

const COLOURS: [&str; 6] = [
    "#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02",
];

/// The chart; the same legend colours in every panel (by series position).
pub fn svg(panels: &[Panel], duration_s: f64) -> String {
    const W: f64 = 760.0;
    const H: f64 = 180.0;
    const LEFT: f64 = 60.0;
    const GAP: f64 = 45.0;
    let names: Vec<(&str, bool)> = panels
        .iter()
        .flat_map(|p| p.series.iter().map(|s| (s.name.as_str(), s.dashed)))
        .fold(Vec::new(), |mut v, n| {
            if !v.iter().any(|(m, _)| *m == n.0) {
                v.push(n);
            }
            v
        });
    let height = panels.len() as f64 * (H + GAP) + 30.0 + 18.0 * names.len() as f64;
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height:.0}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        W + LEFT + 20.0
    );
    let colour = |name: &str| {
        let i = names.iter().position(|(n, _)| *n == name).unwrap_or(0);
        COLOURS[i % COLOURS.len()]
    };
    for (k, panel) in panels.iter().enumerate() {
        let top = 25.0 + k as f64 * (H + GAP);
        let max = panel
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .fold(1e-9_f64, f64::max);
        let _ = write!(
            out,
            "<text x=\"{LEFT}\" y=\"{:.0}\">{} (max {max:.0})</text>\n<rect x=\"{LEFT}\" y=\"{top}\" width=\"{W}\" height=\"{H}\" fill=\"none\" stroke=\"#999\"/>\n<text x=\"{LEFT}\" y=\"{:.0}\">0 s</text><text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"end\">{duration_s:.0} s</text>\n",
            top - 8.0,
            panel.title,
            top + H + 14.0,
            LEFT + W,
            top + H + 14.0,
        );
        for s in &panel.series {
            let pts: Vec<String> = s
                .points
                .iter()
                .map(|(t, v)| {
                    format!(
                        "{:.1},{:.1}",
                        LEFT + t / duration_s * W,
                        top + H - v / max * H
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"{} points=\"{}\"/>",
                colour(&s.name),
                if s.dashed {
                    " stroke-dasharray=\"5,3\""
                } else {
                    ""
                },
                pts.join(" ")
            );
        }
    }
    let mut y = panels.len() as f64 * (H + GAP) + 20.0;
    for (name, dashed) in &names {
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{:.0}\" x2=\"{:.0}\" y2=\"{:.0}\" stroke=\"{}\" stroke-width=\"2\"{}/><text x=\"{:.0}\" y=\"{y:.0}\">{}</text>",
            y - 4.0,
            LEFT + 30.0,
            y - 4.0,
            colour(name),
            if *dashed {
                " stroke-dasharray=\"5,3\""
            } else {
                ""
            },
            LEFT + 38.0,
            name.replace('&', "&amp;").replace('<', "&lt;")
        );
        y += 18.0;
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_series_and_its_legend() {
        let s = svg(
            &[Panel {
                title: "lag".into(),
                series: vec![
                    Series {
                        name: "measured".into(),
                        points: vec![(0.0, 0.0), (10.0, 5.0)],
                        dashed: false,
                    },
                    Series {
                        name: "simulated".into(),
                        points: vec![(0.0, 0.0), (10.0, 4.0)],
                        dashed: true,
                    },
                ],
            }],
            10.0,
        );
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.contains(">measured</text>") && s.contains(">simulated</text>"));
        assert!(s.contains("stroke-dasharray"));
    }
}
