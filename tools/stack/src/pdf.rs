//! Small PDFs made in code for tests and benchmarks: pages of text (a real text layer) and
//! pages that are only a grey image (a scan, no text layer).

use image::GrayImage;

/// A PDF of pages of text in Helvetica 12 pt, one line per string, 14 pt apart.
pub fn text_pdf(pages: &[&[&str]]) -> Vec<u8> {
    let contents: Vec<Vec<u8>> = pages
        .iter()
        .map(|lines| {
            let mut s = String::from("BT /F1 12 Tf 14 TL 72 770 Td\n");
            for line in *lines {
                let escaped = line
                    .replace('\\', "\\\\")
                    .replace('(', "\\(")
                    .replace(')', "\\)");
                s.push_str(&format!("({escaped}) Tj T*\n"));
            }
            s.push_str("ET\n");
            s.into_bytes()
        })
        .collect();
    build_pdf(&contents, None)
}

/// A run of text placed on a page: Helvetica `size` pt, its baseline starting at (`x`, `y`)
/// in PDF points from the page's bottom-left corner.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    /// Left edge, points.
    pub x: f32,
    /// Baseline, points from the bottom.
    pub y: f32,
    /// Font size, points.
    pub size: f32,
    /// The text (one line).
    pub text: String,
}

/// A PDF of A4 pages of placed text (columns, tables, forms): the order of each page's
/// runs is its reading order, known by construction.
pub fn layout_pdf(pages: &[Vec<Placed>]) -> Vec<u8> {
    let contents: Vec<Vec<u8>> = pages
        .iter()
        .map(|runs| {
            let mut s = String::new();
            for r in runs {
                let escaped = r
                    .text
                    .replace('\\', "\\\\")
                    .replace('(', "\\(")
                    .replace(')', "\\)");
                s.push_str(&format!(
                    "BT /F1 {:.1} Tf {:.1} {:.1} Td ({escaped}) Tj ET\n",
                    r.size, r.x, r.y
                ));
            }
            s.into_bytes()
        })
        .collect();
    build_pdf(&contents, None)
}

/// `words` wrapped into lines of at most `width` points of Helvetica at `size` pt (an
/// upper bound of its glyph widths: lines never run past `width`).
pub fn wrap(words: &[&str], width: f32, size: f32) -> Vec<String> {
    let per_char = 0.6 * size;
    let mut lines = Vec::new();
    let mut line = String::new();
    for w in words {
        let next = if line.is_empty() {
            w.len()
        } else {
            line.len() + 1 + w.len()
        };
        if !line.is_empty() && next as f32 * per_char > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(w);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// A PDF with one page per scan, each drawn over the whole A4 page, no text layer.
pub fn image_pdf(scans: &[&GrayImage]) -> Vec<u8> {
    let contents = vec![b"q 595 0 0 842 0 0 cm /Im0 Do Q\n".to_vec(); scans.len()];
    build_pdf(&contents, Some(scans))
}

/// Objects: 1 catalog, 2 page tree, 3 font, then per page: page, contents, (image).
fn build_pdf(contents: &[Vec<u8>], scans: Option<&[&GrayImage]>) -> Vec<u8> {
    let per_page = if scans.is_some() { 3 } else { 2 };
    let n = contents.len();
    let page_ids: Vec<usize> = (0..n).map(|i| 4 + i * per_page).collect();
    let mut objects: Vec<Vec<u8>> = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        format!(
            "<< /Type /Pages /Count {n} /Kids [{}] >>",
            page_ids
                .iter()
                .map(|i| format!("{i} 0 R"))
                .collect::<Vec<_>>()
                .join(" ")
        )
        .into_bytes(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec(),
    ];
    for (i, content) in contents.iter().enumerate() {
        let id = page_ids[i];
        let resources = if scans.is_some() {
            format!("<< /XObject << /Im0 {} 0 R >> >>", id + 2)
        } else {
            "<< /Font << /F1 3 0 R >> >>".to_owned()
        };
        objects.push(
            format!(
                "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources {resources} /Contents {} 0 R >>",
                id + 1
            )
            .into_bytes(),
        );
        let mut stream = format!("<< /Length {} >>\nstream\n", content.len()).into_bytes();
        stream.extend_from_slice(content);
        stream.extend_from_slice(b"\nendstream");
        objects.push(stream);
        if let Some(scans) = scans {
            let img = scans[i];
            let mut xobject = format!(
                "<< /Type /XObject /Subtype /Image /Width {} /Height {} /ColorSpace /DeviceGray /BitsPerComponent 8 /Length {} >>\nstream\n",
                img.width(),
                img.height(),
                img.as_raw().len()
            )
            .into_bytes();
            xobject.extend_from_slice(img.as_raw());
            xobject.extend_from_slice(b"\nendstream");
            objects.push(xobject);
        }
    }
    assemble(&objects)
}

/// A PDF file of `objects` (object `i + 1` is `objects[i]`, object 1 the catalog) with its
/// cross-reference table and trailer.
pub fn assemble<O: AsRef<[u8]>>(objects: &[O]) -> Vec<u8> {
    let mut out = b"%PDF-1.7\n".to_vec();
    let mut offsets = Vec::new();
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend_from_slice(body.as_ref());
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for o in offsets {
        out.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

/// `image` rotated by `degrees` about its centre (bilinear, white outside) with ±24 grey
/// levels of uniform noise: a skewed, dirty scan.
pub fn noisy_rotated(image: &GrayImage, degrees: f32) -> GrayImage {
    let (w, h) = image.dimensions();
    let (sin, cos) = degrees.to_radians().sin_cos();
    let (cx, cy) = (w as f32 / 2.0, h as f32 / 2.0);
    let mut state = 0x9e37_79b9_u32;
    let at = |x: i64, y: i64| -> f32 {
        if x < 0 || y < 0 || x >= i64::from(w) || y >= i64::from(h) {
            255.0
        } else {
            f32::from(image.get_pixel(x as u32, y as u32)[0])
        }
    };
    GrayImage::from_fn(w, h, |x, y| {
        let (dx, dy) = (x as f32 - cx, y as f32 - cy);
        let (sx, sy) = (cos * dx + sin * dy + cx, -sin * dx + cos * dy + cy);
        let (x0, y0) = (sx.floor() as i64, sy.floor() as i64);
        let (fx, fy) = (sx - sx.floor(), sy - sy.floor());
        let v = at(x0, y0) * (1.0 - fx) * (1.0 - fy)
            + at(x0 + 1, y0) * fx * (1.0 - fy)
            + at(x0, y0 + 1) * (1.0 - fx) * fy
            + at(x0 + 1, y0 + 1) * fx * fy;
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let noise = (state % 49) as f32 - 24.0;
        image::Luma([(v + noise).clamp(0.0, 255.0) as u8])
    })
}
