//! The text of every page of a document, inside a worker process: a PDF page's own text
//! layer when it holds real text, otherwise the page rasterised and read by OCR; an image
//! (PNG, JPEG, TIFF) read by OCR. The limits are checked before any page is rasterised or
//! any image decoded, so a document over them costs a parse, never a render.

use std::path::Path;

use docflow_stage::isolate::MemoryUse;
use docflow_stage::media::{self, MediaError};
use docflow_stage::{LineBox, PageLayout};
use image::{DynamicImage, RgbImage};
use pdfium_render::prelude::{PdfPageObjectsCommon, PdfRenderConfig, Pdfium};
use serde::{Deserialize, Serialize};

use crate::ocr::{Line, Ocr, OcrError, Reading};

/// A page's text as the worker answers it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page {
    /// 1-based page number.
    pub page: u32,
    /// `text_layer` or `ocr`.
    pub source: String,
    /// OCR only: the mean character confidence of the page's lines.
    pub confidence: Option<f32>,
    /// The text, lines separated by `\n`.
    pub text: String,
    /// OCR only: the image read, its turn, the boxes past the page's cap (never dropped
    /// silently: the stage counts them and marks the page) and each line with its box (in
    /// the image's pixels, as delivered) and confidence — stored with the page as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<PageLayout>,
    /// OCR only: where the page's time went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<crate::ocr::Timings>,
}

impl Page {
    /// A page read without OCR: its text layer, or nothing to read.
    fn without_ocr(page: u32, source: &str, text: &str) -> Self {
        Page {
            page,
            source: source.to_owned(),
            confidence: None,
            text: text.to_owned(),
            layout: None,
            timings: None,
        }
    }
}

/// What a PDF page needs.
enum Plan {
    /// Its text layer, as it is.
    Text(String),
    /// Nothing: the page draws nothing (no objects, no annotations).
    Blank,
    /// OCR of the page rendered at this size.
    Raster(i32, i32),
}

/// What a worker answers for one document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Extracted {
    /// Every page, in order.
    pub pages: Vec<Page>,
    /// Pixels rasterised or decoded for OCR.
    pub ocr_pixels: u64,
    /// The worker's memory after the document (its peak: during the document).
    #[serde(default)]
    pub memory: Option<MemoryUse>,
    /// CPU time the worker spent on the document, every thread, seconds.
    #[serde(default)]
    pub cpu_seconds: Option<f64>,
}

/// Limits of one document, checked before the expensive work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Most pages.
    pub max_pages: u32,
    /// Most pixels of one image (a PDF page is rasterised within this instead).
    pub max_page_pixels: u64,
    /// Most pixels rasterised or decoded for OCR in one document.
    pub max_total_pixels: u64,
    /// Resolution pages are rasterised at (dots per inch), before the OCR size cap.
    pub dpi: f32,
    /// Longest side of a rasterised page (no more than OCR reads: `--ocr-max-side`).
    pub max_side: u32,
}

/// Why a document yields no text (all but `Setup` are about the document: permanent).
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// pdfium or the OCR models cannot be used.
    #[error("{0}")]
    Setup(String),
    /// Not a PDF, PNG, JPEG or TIFF.
    #[error("unsupported document type (not PDF, PNG, JPEG or TIFF)")]
    Unsupported,
    /// The PDF cannot be opened (corrupt, encrypted) or has no pages.
    #[error("unreadable PDF: {0}")]
    Pdf(String),
    /// The image cannot be decoded.
    #[error("undecodable image: {0}")]
    Image(String),
    /// Over one of [`Limits`].
    #[error("{0}")]
    OverLimits(String),
    /// OCR failed on this document.
    #[error("ocr: {0}")]
    Ocr(String),
}

impl PageError {
    /// The DLQ error class.
    pub fn class(&self) -> &'static str {
        match self {
            PageError::Setup(_) => crate::stage::class::SETUP,
            PageError::Unsupported => crate::stage::class::UNSUPPORTED_TYPE,
            PageError::Pdf(_) | PageError::Image(_) => crate::stage::class::UNREADABLE,
            PageError::OverLimits(_) => crate::stage::class::OVER_LIMITS,
            PageError::Ocr(_) => crate::stage::class::OCR_FAILED,
        }
    }
}

impl From<MediaError> for PageError {
    fn from(e: MediaError) -> Self {
        match e {
            MediaError::Library { .. } => PageError::Setup(e.to_string()),
            MediaError::Unsupported => PageError::Unsupported,
            MediaError::Image(m) => PageError::Image(m),
            MediaError::TooLarge { .. } => PageError::OverLimits(e.to_string()),
        }
    }
}

impl From<OcrError> for PageError {
    fn from(e: OcrError) -> Self {
        match e {
            OcrError::Missing { .. } | OcrError::NoDictionary => PageError::Setup(e.to_string()),
            other => PageError::Ocr(other.to_string()),
        }
    }
}

/// A page's text layer counts as real text from this many letters and digits on: fewer is a
/// scan with a stamped page number or an invisible OCR remnant, which OCR reads better.
pub const MIN_TEXT_LAYER_CHARS: usize = 16;

/// Reads documents; one per worker process.
#[derive(Debug)]
pub struct Extractor {
    pdfium: &'static Pdfium,
    ocr: Ocr,
    limits: Limits,
}

/// Whether `text` holds real text (see [`MIN_TEXT_LAYER_CHARS`]).
pub fn is_real_text(text: &str) -> bool {
    text.chars().filter(|c| c.is_alphanumeric()).count() >= MIN_TEXT_LAYER_CHARS
}

/// Lines joined into page text: boxes on the same row (their vertical spans overlap by half
/// the shorter) with a space, rows with a newline.
pub fn join_lines(lines: &[Line]) -> String {
    let mut out = String::new();
    let mut previous: Option<(f32, f32)> = None;
    for line in lines {
        let ys = line.quad.iter().map(|p| p.1);
        let (top, bottom) = (
            ys.clone().fold(f32::MAX, f32::min),
            ys.fold(f32::MIN, f32::max),
        );
        if let Some((pt, pb)) = previous {
            let overlap = bottom.min(pb) - top.max(pt);
            let shorter = (bottom - top).min(pb - pt).max(1.0);
            out.push(if overlap >= shorter / 2.0 { ' ' } else { '\n' });
        }
        out.push_str(line.text.trim());
        previous = Some((top, bottom));
    }
    out
}

/// Where `reading`'s lines are on the image as delivered. Values that are not finite (no
/// OCR output should hold one) are stored as 0, so the stored JSON always reads back.
fn layout(reading: &Reading) -> PageLayout {
    let finite = |v: f32| if v.is_finite() { v } else { 0.0 };
    PageLayout {
        width: reading.size.0,
        height: reading.size.1,
        rotation: reading.rotation,
        unread_boxes: reading.dropped_boxes,
        lines: reading
            .delivered_lines()
            .into_iter()
            .map(|l| LineBox {
                text: l.text,
                confidence: finite(l.confidence),
                quad: l.quad.map(|(x, y)| [finite(x), finite(y)]),
            })
            .collect(),
    }
}

/// Mean confidence of `lines` weighted by their length.
fn confidence(lines: &[Line]) -> Option<f32> {
    let chars: usize = lines.iter().map(|l| l.text.chars().count()).sum();
    if chars == 0 {
        return None;
    }
    let weighted: f32 = lines
        .iter()
        .map(|l| l.confidence * l.text.chars().count() as f32)
        .sum();
    Some(weighted / chars as f32)
}

impl Extractor {
    /// pdfium from `pdfium_lib`, the OCR engine loaded.
    pub fn new(pdfium_lib: &Path, ocr: Ocr, limits: Limits) -> Result<Self, PageError> {
        Ok(Extractor {
            pdfium: media::pdfium(pdfium_lib)?,
            ocr,
            limits,
        })
    }

    /// The pages of `bytes` (type sniffed from the bytes).
    pub fn extract(&mut self, bytes: &[u8]) -> Result<Extracted, PageError> {
        if bytes.starts_with(b"%PDF-") {
            self.pdf(bytes)
        } else {
            self.image(bytes)
        }
    }

    fn ocr_page(&mut self, page: u32, image: &RgbImage) -> Result<Page, PageError> {
        let reading = self.ocr.read(image)?;
        Ok(Page {
            page,
            source: "ocr".to_owned(),
            confidence: confidence(&reading.lines),
            // Rows are found on the upright page; the boxes kept are the delivered image's.
            text: join_lines(&reading.lines),
            layout: Some(layout(&reading)),
            timings: Some(reading.timings),
        })
    }

    fn image(&mut self, bytes: &[u8]) -> Result<Extracted, PageError> {
        // The header first: a bomb is refused before it is decoded.
        let (_, w, h) = media::image_header(bytes)?;
        let pixels = u64::from(w) * u64::from(h);
        if pixels
            > self
                .limits
                .max_page_pixels
                .min(self.limits.max_total_pixels)
        {
            return Err(PageError::OverLimits(format!(
                "image of {w} x {h} = {pixels} pixels is over the limit of {} pixels a page",
                self.limits
                    .max_page_pixels
                    .min(self.limits.max_total_pixels)
            )));
        }
        let image = media::decode_image(bytes)?.to_rgb8();
        let page = self.ocr_page(1, &image)?;
        Ok(Extracted {
            pages: vec![page],
            ocr_pixels: pixels,
            memory: None,
            cpu_seconds: None,
        })
    }

    fn pdf(&mut self, bytes: &[u8]) -> Result<Extracted, PageError> {
        let pdf = |e: pdfium_render::prelude::PdfiumError| PageError::Pdf(e.to_string());
        let doc = self
            .pdfium
            .load_pdf_from_byte_slice(bytes, None)
            .map_err(pdf)?;
        let pages = doc.pages();
        let count = u32::try_from(pages.len()).unwrap_or(0);
        if count == 0 {
            return Err(PageError::Pdf("the document has no pages".into()));
        }
        if count > self.limits.max_pages {
            return Err(PageError::OverLimits(format!(
                "{count} pages is over the limit of {}",
                self.limits.max_pages
            )));
        }
        // Pass 1 (cheap): the text layers, the pages with nothing to draw, and the raster
        // size of every other page.
        let mut plan: Vec<Plan> = Vec::with_capacity(count as usize);
        let mut total: u64 = 0;
        for (i, page) in pages.iter().enumerate() {
            if page.objects().is_empty() && page.annotations().is_empty() {
                // Nothing on it: blank whatever a render would say, at no render's cost.
                plan.push(Plan::Blank);
                continue;
            }
            let text = page.text().map(|t| t.all()).unwrap_or_default();
            if is_real_text(&text) {
                plan.push(Plan::Text(text));
                continue;
            }
            let (wp, hp) = (page.width().value, page.height().value);
            let (w, h) = self.raster_size(wp, hp);
            total += u64::from(w.unsigned_abs()) * u64::from(h.unsigned_abs());
            if total > self.limits.max_total_pixels {
                return Err(PageError::OverLimits(format!(
                    "rasterising the pages without text (to page {}) takes over {} pixels",
                    i + 1,
                    self.limits.max_total_pixels
                )));
            }
            plan.push(Plan::Raster(w, h));
        }
        // Pass 2: OCR where needed.
        let mut out = Vec::with_capacity(plan.len());
        for (i, step) in plan.into_iter().enumerate() {
            let number = i as u32 + 1;
            let (w, h) = match step {
                Plan::Raster(w, h) => (w, h),
                Plan::Text(text) => {
                    out.push(Page::without_ocr(number, "text_layer", text.trim()));
                    continue;
                }
                Plan::Blank => {
                    out.push(Page::without_ocr(number, "ocr", ""));
                    continue;
                }
            };
            #[allow(clippy::cast_possible_truncation)]
            let page = pages.get(i as _).map_err(pdf)?;
            let config = PdfRenderConfig::new()
                .set_target_width(w)
                .set_maximum_height(h);
            let image: DynamicImage = page
                .render_with_config(&config)
                .map_err(pdf)?
                .as_image()
                .map_err(pdf)?;
            out.push(self.ocr_page(number, &image.to_rgb8())?);
        }
        Ok(Extracted {
            pages: out,
            ocr_pixels: total,
            memory: None,
            cpu_seconds: None,
        })
    }

    /// Pixels of a page `wp` x `hp` points rasterised at `dpi`, within `max_side` and
    /// `max_page_pixels`.
    fn raster_size(&self, wp: f32, hp: f32) -> (i32, i32) {
        raster_size(wp, hp, &self.limits)
    }
}

/// See [`Extractor::raster_size`].
pub fn raster_size(wp: f32, hp: f32, limits: &Limits) -> (i32, i32) {
    let (wp, hp) = (wp.max(1.0), hp.max(1.0));
    let mut scale = limits.dpi / 72.0;
    let long = wp.max(hp) * scale;
    if long > limits.max_side as f32 {
        scale *= limits.max_side as f32 / long;
    }
    let pixels = f64::from(wp * scale) * f64::from(hp * scale);
    if pixels > limits.max_page_pixels as f64 {
        scale *= (limits.max_page_pixels as f64 / pixels).sqrt() as f32;
    }
    // A side scaled to exactly the cap must not lose a pixel to rounding (1999.9998).
    let side = |points: f32| ((f64::from(points) * f64::from(scale) + 1e-3).floor() as i32).max(1);
    (side(wp), side(hp))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str, top: f32, bottom: f32, x: f32) -> Line {
        Line {
            text: text.to_owned(),
            confidence: 0.9,
            quad: [(x, top), (x + 50.0, top), (x + 50.0, bottom), (x, bottom)],
        }
    }

    #[test]
    fn lines_on_one_row_join_with_spaces() {
        let lines = [
            line("Total:", 10.0, 30.0, 0.0),
            line("42 EUR", 12.0, 31.0, 200.0),
            line("Thanks", 50.0, 70.0, 0.0),
        ];
        assert_eq!(join_lines(&lines), "Total: 42 EUR\nThanks");
        assert!((confidence(&lines).unwrap() - 0.9).abs() < 1e-6);
        assert_eq!(confidence(&[]), None);
    }

    #[test]
    fn a_page_number_is_not_a_text_layer() {
        assert!(!is_real_text("  12  "));
        assert!(!is_real_text("- 3 -\n"));
        assert!(is_real_text("Invoice number 2024-0042 for ACME"));
    }

    #[test]
    fn pages_are_rasterised_at_the_dpi_within_the_caps() {
        let limits = Limits {
            max_pages: 10,
            max_page_pixels: 40_000_000,
            max_total_pixels: 100_000_000,
            dpi: 300.0,
            max_side: 4000,
        };
        // A4 at 300 dpi: 2480 x 3508.
        assert_eq!(raster_size(595.0, 842.0, &limits), (2479, 3508));
        // The OCR size cap.
        let capped = Limits {
            max_side: 2000,
            ..limits
        };
        assert_eq!(raster_size(595.0, 842.0, &capped), (1413, 2000));
        // The pixel cap: a 200 x 200 inch poster.
        let (w, h) = raster_size(14_400.0, 14_400.0, &limits);
        assert!(u64::from(w.unsigned_abs()) * u64::from(h.unsigned_abs()) <= 40_000_000);
        assert!(w <= 4000);
    }
}
