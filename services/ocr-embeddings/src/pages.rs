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
    /// Where the worker's OCR runs and why (`cpu (--ocr-device auto: …)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}

impl Extracted {
    /// `pages` and the pixels read for them, with no worker's figures yet (a plan's pages,
    /// or one page's, before the worker adds its memory, CPU time and device).
    pub fn of(pages: Vec<Page>, ocr_pixels: u64) -> Self {
        Extracted {
            pages,
            ocr_pixels,
            memory: None,
            cpu_seconds: None,
            device: None,
        }
    }

    /// Adds the pages `other` read, its CPU time and its memory (the larger peak).
    pub fn absorb(&mut self, other: Extracted) {
        self.memory = match (self.memory, other.memory) {
            (Some(a), Some(b)) if a.peak_rss_bytes >= b.peak_rss_bytes => Some(a),
            (a, b) => b.or(a),
        };
        self.cpu_seconds = match (self.cpu_seconds, other.cpu_seconds) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.ocr_pixels += other.ocr_pixels;
        self.pages.extend(other.pages);
        self.device = self.device.take().or(other.device);
    }
}

/// What the stage asks a page-reading worker: a header line, then the document's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Every page, one after the other: answered with [`Extracted`].
    Document,
    /// What each page needs: answered with [`Planned`] (the pages without OCR done).
    Plan,
    /// One page (1-based) read by OCR: answered with [`Extracted`] holding that page.
    Page(u32),
}

/// How a request's header line starts.
const REQUEST_HEADER: &str = "docflow-read ";

impl Request {
    /// The job for this request on `bytes`.
    pub fn encode(self, bytes: &[u8]) -> Vec<u8> {
        let header = match self {
            Request::Document => format!("{REQUEST_HEADER}document\n"),
            Request::Plan => format!("{REQUEST_HEADER}plan\n"),
            Request::Page(n) => format!("{REQUEST_HEADER}page {n}\n"),
        };
        let mut job = Vec::with_capacity(header.len() + bytes.len());
        job.extend_from_slice(header.as_bytes());
        job.extend_from_slice(bytes);
        job
    }

    /// The request and the document's bytes in `job`; bytes without a header are a
    /// [`Request::Document`].
    pub fn decode(job: &[u8]) -> Result<(Request, &[u8]), PageError> {
        let Some(rest) = job.strip_prefix(REQUEST_HEADER.as_bytes()) else {
            return Ok((Request::Document, job));
        };
        let end = rest
            .iter()
            .take(32)
            .position(|&b| b == b'\n')
            .ok_or_else(|| PageError::Request("no end to the request line".into()))?;
        let (line, bytes) = (&rest[..end], &rest[end + 1..]);
        let line = std::str::from_utf8(line).unwrap_or("");
        let request = match line.split_once(' ') {
            None if line == "document" => Request::Document,
            None if line == "plan" => Request::Plan,
            Some(("page", n)) => match n.parse::<u32>() {
                Ok(n) if n >= 1 => Request::Page(n),
                _ => return Err(PageError::Request(format!("bad page number {n:?}"))),
            },
            _ => return Err(PageError::Request(format!("unknown request {line:?}"))),
        };
        Ok((request, bytes))
    }
}

/// What a worker answers a [`Request::Plan`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Planned {
    /// The pages read without OCR (their text layer, or blank), in order.
    pub pages: Vec<Page>,
    /// The pages left to OCR, 1-based, in order.
    pub ocr: Vec<u32>,
    /// Pixels those pages take rasterised or decoded.
    pub ocr_pixels: u64,
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
    /// The stage sent a request this worker does not understand (a stage and worker of
    /// different versions).
    #[error("bad request: {0}")]
    Request(String),
}

impl PageError {
    /// The DLQ error class.
    pub fn class(&self) -> &'static str {
        match self {
            PageError::Setup(_) | PageError::Request(_) => crate::stage::class::SETUP,
            PageError::Unsupported => crate::stage::class::UNSUPPORTED_TYPE,
            PageError::Pdf(_) | PageError::Image(_) => crate::stage::class::UNREADABLE,
            PageError::OverLimits(_) => crate::stage::class::OVER_LIMITS,
            PageError::Ocr(_) => crate::stage::class::OCR_FAILED,
        }
    }

    /// As the worker's refusal: `setup` (the worker cannot read anything) is retried, the
    /// rest is the document's.
    pub fn refusal(&self) -> docflow_stage::isolate::Refusal {
        use docflow_stage::isolate::Refusal;
        match self {
            PageError::Setup(_) | PageError::Request(_) => Refusal::transient(self.class(), self),
            _ => Refusal::new(self.class(), self),
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

    /// The pages of `bytes` (type sniffed from the bytes), one after the other.
    pub fn extract(&mut self, bytes: &[u8]) -> Result<Extracted, PageError> {
        let planned = self.plan(bytes)?;
        let mut out = Extracted::of(planned.pages, planned.ocr_pixels);
        for number in planned.ocr {
            out.pages.push(self.page(bytes, number)?);
        }
        out.pages.sort_by_key(|p| p.page);
        Ok(out)
    }

    /// What each page of `bytes` needs, the limits checked; the pages that need no OCR
    /// (a text layer, nothing drawn) are read here.
    pub fn plan(&mut self, bytes: &[u8]) -> Result<Planned, PageError> {
        if !bytes.starts_with(b"%PDF-") {
            let pixels = self.image_pixels(bytes)?;
            return Ok(Planned {
                pages: Vec::new(),
                ocr: vec![1],
                ocr_pixels: pixels,
            });
        }
        let doc = self.open_pdf(bytes)?;
        let pages = doc.pages();
        let mut planned = Planned {
            pages: Vec::new(),
            ocr: Vec::new(),
            ocr_pixels: 0,
        };
        for (i, page) in pages.iter().enumerate() {
            let number = i as u32 + 1;
            match self.plan_page(&page) {
                Plan::Text(text) => {
                    planned
                        .pages
                        .push(Page::without_ocr(number, "text_layer", text.trim()))
                }
                // Nothing on it: blank whatever a render would say, at no render's cost.
                Plan::Blank => planned.pages.push(Page::without_ocr(number, "ocr", "")),
                Plan::Raster(w, h) => {
                    planned.ocr_pixels += u64::from(w.unsigned_abs()) * u64::from(h.unsigned_abs());
                    if planned.ocr_pixels > self.limits.max_total_pixels {
                        return Err(PageError::OverLimits(format!(
                            "rasterising the pages without text (to page {number}) takes over {} pixels",
                            self.limits.max_total_pixels
                        )));
                    }
                    planned.ocr.push(number);
                }
            }
        }
        Ok(planned)
    }

    /// Page `number` (1-based) of `bytes` read by OCR: a PDF page rasterised, or the image.
    pub fn page(&mut self, bytes: &[u8], number: u32) -> Result<Page, PageError> {
        if !bytes.starts_with(b"%PDF-") {
            if number != 1 {
                return Err(PageError::Request(format!("an image has no page {number}")));
            }
            self.image_pixels(bytes)?;
            let image = media::decode_image(bytes)?.to_rgb8();
            return self.ocr_page(1, &image);
        }
        let pdf = |e: pdfium_render::prelude::PdfiumError| PageError::Pdf(e.to_string());
        let doc = self.open_pdf(bytes)?;
        let count = u32::try_from(doc.pages().len()).unwrap_or(0);
        let index = number
            .checked_sub(1)
            .filter(|&i| i < count)
            .and_then(|i| i32::try_from(i).ok())
            .ok_or_else(|| PageError::Request(format!("no page {number}")))?;
        let page = doc.pages().get(index).map_err(pdf)?;
        let (w, h) = self.raster_size(page.width().value, page.height().value);
        let config = PdfRenderConfig::new()
            .set_target_width(w)
            .set_maximum_height(h);
        let image: DynamicImage = page
            .render_with_config(&config)
            .map_err(pdf)?
            .as_image()
            .map_err(pdf)?;
        drop(page);
        drop(doc);
        self.ocr_page(number, &image.to_rgb8())
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

    /// The pixels of the image `bytes`, from its header: a bomb is refused before it is
    /// decoded.
    fn image_pixels(&self, bytes: &[u8]) -> Result<u64, PageError> {
        let (_, w, h) = media::image_header(bytes)?;
        let pixels = u64::from(w) * u64::from(h);
        let limit = self
            .limits
            .max_page_pixels
            .min(self.limits.max_total_pixels);
        if pixels > limit {
            return Err(PageError::OverLimits(format!(
                "image of {w} x {h} = {pixels} pixels is over the limit of {limit} pixels a page"
            )));
        }
        Ok(pixels)
    }

    /// The PDF `bytes`, its page count within the limits.
    fn open_pdf<'a>(
        &self,
        bytes: &'a [u8],
    ) -> Result<pdfium_render::prelude::PdfDocument<'a>, PageError> {
        let doc = self
            .pdfium
            .load_pdf_from_byte_slice(bytes, None)
            .map_err(|e| PageError::Pdf(e.to_string()))?;
        let count = u32::try_from(doc.pages().len()).unwrap_or(0);
        if count == 0 {
            return Err(PageError::Pdf("the document has no pages".into()));
        }
        if count > self.limits.max_pages {
            return Err(PageError::OverLimits(format!(
                "{count} pages is over the limit of {}",
                self.limits.max_pages
            )));
        }
        Ok(doc)
    }

    /// What `page` needs (cheap: no render).
    fn plan_page(&self, page: &pdfium_render::prelude::PdfPage<'_>) -> Plan {
        if page.objects().is_empty() && page.annotations().is_empty() {
            return Plan::Blank;
        }
        let text = page.text().map(|t| t.all()).unwrap_or_default();
        if is_real_text(&text) {
            return Plan::Text(text);
        }
        let (w, h) = self.raster_size(page.width().value, page.height().value);
        Plan::Raster(w, h)
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
    fn requests_round_trip_and_bare_bytes_are_a_document() {
        for request in [
            Request::Document,
            Request::Plan,
            Request::Page(1),
            Request::Page(500),
        ] {
            let job = request.encode(b"%PDF-1.7 rest");
            let (got, bytes) = Request::decode(&job).unwrap();
            assert_eq!((got, bytes), (request, &b"%PDF-1.7 rest"[..]));
        }
        assert_eq!(
            Request::decode(b"\x89PNG").unwrap(),
            (Request::Document, &b"\x89PNG"[..])
        );
        for bad in [
            &b"docflow-read page 0\n%PDF"[..],
            b"docflow-read page -1\n",
            b"docflow-read pages\n",
            b"docflow-read plan",
        ] {
            let err = Request::decode(bad).unwrap_err();
            assert_eq!(err.class(), "setup", "{err}");
        }
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
