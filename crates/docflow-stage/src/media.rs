//! Reading documents' pages safely, shared by every stage that looks inside a document
//! (thumbnails, ocr-embeddings): pdfium bound once per process, and images decoded only when
//! their header says the decode is affordable. Call these inside an isolated worker
//! ([`crate::isolate`]): they run native code on untrusted bytes.

use std::io::Cursor;
use std::path::Path;
use std::sync::OnceLock;

use image::{DynamicImage, ImageFormat, ImageReader, Limits};
use pdfium_render::prelude::Pdfium;

/// Largest decoded image accepted (decompression bombs are refused, not decoded).
pub const MAX_DECODE_BYTES: u64 = 512 * 1024 * 1024;

/// Longest image side accepted, pixels (an A0 page scanned at 600 dpi is ~20,000 x 28,000).
pub const MAX_SIDE: u32 = 30_000;

/// Most pixels of an image accepted (an A3 page at 600 dpi is ~70 million).
pub const MAX_PIXELS: u64 = 100_000_000;

/// Why a document cannot be read (all but `Library` are about the document: permanent).
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// `libpdfium.so` could not be loaded.
    #[error("cannot load pdfium from {path}: {message} (run `make tools`, or pass --pdfium-lib)")]
    Library {
        /// Where it was looked for.
        path: String,
        /// The loader's error.
        message: String,
    },
    /// Not a PNG, JPEG or TIFF.
    #[error("unsupported document type (not PDF, PNG, JPEG or TIFF)")]
    Unsupported,
    /// The image cannot be decoded (corrupt, over the decoder's memory limit).
    #[error("undecodable image: {0}")]
    Image(String),
    /// The image's header announces more pixels than a document page can have; refused
    /// before decoding anything.
    #[error(
        "image of {width} x {height} pixels is over the limits ({MAX_SIDE} pixels a side, {MAX_PIXELS} in all)"
    )]
    TooLarge {
        /// Width from the header.
        width: u32,
        /// Height from the header.
        height: u32,
    },
}

impl MediaError {
    /// As a worker's refusal, with the shared classes of [`crate::class`]: a library that
    /// does not load is the replica's problem (retried), the rest the document's.
    pub fn refusal(&self) -> crate::isolate::Refusal {
        use crate::class;
        use crate::isolate::Refusal;
        match self {
            MediaError::Library { .. } => Refusal::transient(class::SETUP, self),
            MediaError::Unsupported => Refusal::new(class::UNSUPPORTED_TYPE, self),
            MediaError::Image(_) => Refusal::new(class::UNREADABLE, self),
            MediaError::TooLarge { .. } => Refusal::new(class::OVER_LIMITS, self),
        }
    }
}

/// pdfium binds once per process (its bindings are global).
static PDFIUM: OnceLock<Pdfium> = OnceLock::new();

/// pdfium from `library`, bound on first use.
pub fn pdfium(library: &Path) -> Result<&'static Pdfium, MediaError> {
    if let Some(p) = PDFIUM.get() {
        return Ok(p);
    }
    let bindings = Pdfium::bind_to_library(library).map_err(|e| MediaError::Library {
        path: library.display().to_string(),
        message: e.to_string(),
    })?;
    Ok(PDFIUM.get_or_init(|| Pdfium::new(bindings)))
}

/// The format and size of a PNG, JPEG or TIFF from its header alone (nothing decoded);
/// any other format is [`MediaError::Unsupported`].
pub fn image_header(bytes: &[u8]) -> Result<(ImageFormat, u32, u32), MediaError> {
    let format = image::guess_format(bytes).map_err(|_| MediaError::Unsupported)?;
    if !matches!(
        format,
        ImageFormat::Png | ImageFormat::Jpeg | ImageFormat::Tiff
    ) {
        return Err(MediaError::Unsupported);
    }
    let (width, height) = ImageReader::with_format(Cursor::new(bytes), format)
        .into_dimensions()
        .map_err(|e| MediaError::Image(e.to_string()))?;
    Ok((format, width, height))
}

/// A PNG, JPEG or TIFF decoded, its cost bounded by its header first: a 1 x 500,000,000 grey
/// PNG is a few hundred kilobytes and half a gigabyte decoded.
pub fn decode_image(bytes: &[u8]) -> Result<DynamicImage, MediaError> {
    let (format, width, height) = image_header(bytes)?;
    if width > MAX_SIDE || height > MAX_SIDE || u64::from(width) * u64::from(height) > MAX_PIXELS {
        return Err(MediaError::TooLarge { width, height });
    }
    let mut reader = ImageReader::with_format(Cursor::new(bytes), format);
    let mut limits = Limits::default();
    limits.max_alloc = Some(MAX_DECODE_BYTES);
    limits.max_image_width = Some(MAX_SIDE);
    limits.max_image_height = Some(MAX_SIDE);
    reader.limits(limits);
    reader
        .decode()
        .map_err(|e| MediaError::Image(e.to_string()))
}
