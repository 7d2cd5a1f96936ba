//! First-page rendering: PDF through pdfium (`libpdfium.so`, loaded at run time), PNG, JPEG
//! and TIFF through `image`; the result is a PNG that fits in a `max_px` square.
//!
//! The type is sniffed from the bytes, never taken from the event. Every failure here is
//! about the document itself (corrupt, encrypted, not an image), so it is permanent.

use std::io::Cursor;
use std::path::Path;

use image::{DynamicImage, ImageFormat};
use pdfium_render::prelude::{PdfRenderConfig, Pdfium};

/// Why a document cannot be rendered (permanent) or the renderer cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// pdfium cannot be loaded, or the image is unsupported, undecodable or over the limits
    /// (the stage layer's page-reading errors, shared with the other stages).
    #[error(transparent)]
    Media(#[from] MediaError),
    /// The PDF cannot be opened or rendered (corrupt, encrypted, no pages).
    #[error("unrenderable PDF: {0}")]
    Pdf(String),
}

/// A rendered thumbnail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thumbnail {
    /// PNG bytes.
    pub png: Vec<u8>,
    /// Width, pixels.
    pub width: u32,
    /// Height, pixels.
    pub height: u32,
    /// Pages of the document (1 for images).
    pub pages: u32,
}

/// Renders thumbnails; cheap to share across workers.
#[derive(Debug, Clone, Copy)]
pub struct Renderer {
    pdfium: &'static Pdfium,
    max_px: u32,
}

use docflow_stage::media::{self, MediaError};
pub use docflow_stage::media::{MAX_PIXELS, MAX_SIDE};

impl Renderer {
    /// Loads pdfium from `library` (once per process) and renders into `max_px` squares.
    pub fn new(library: &Path, max_px: u32) -> Result<Self, RenderError> {
        let pdfium = media::pdfium(library)?;
        Ok(Renderer {
            pdfium,
            max_px: max_px.clamp(16, 4096),
        })
    }

    /// The first page of `bytes` as a PNG. CPU-bound: call it from a blocking thread.
    pub fn render(&self, bytes: &[u8]) -> Result<Thumbnail, RenderError> {
        let (image, pages) = if bytes.starts_with(b"%PDF-") {
            self.pdf_first_page(bytes)?
        } else {
            (self.image(bytes)?, 1)
        };
        let image = if image.width() > self.max_px || image.height() > self.max_px {
            image.thumbnail(self.max_px, self.max_px)
        } else {
            image
        };
        let image = DynamicImage::ImageRgba8(image.to_rgba8());
        let mut png = Vec::new();
        image
            .write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
            .map_err(|e| MediaError::Image(format!("encoding PNG: {e}")))?;
        Ok(Thumbnail {
            png,
            width: image.width(),
            height: image.height(),
            pages,
        })
    }

    fn pdf_first_page(&self, bytes: &[u8]) -> Result<(DynamicImage, u32), RenderError> {
        let pdf = |e: pdfium_render::prelude::PdfiumError| RenderError::Pdf(e.to_string());
        let doc = self
            .pdfium
            .load_pdf_from_byte_slice(bytes, None)
            .map_err(pdf)?;
        let pages = doc.pages();
        let count = u32::try_from(pages.len()).unwrap_or(0);
        if count == 0 {
            return Err(RenderError::Pdf("the document has no pages".into()));
        }
        let side = i32::try_from(self.max_px).unwrap_or(256);
        let config = PdfRenderConfig::new()
            .set_target_width(side)
            .set_maximum_width(side)
            .set_maximum_height(side);
        let image = pages
            .get(0)
            .map_err(pdf)?
            .render_with_config(&config)
            .map_err(pdf)?
            .as_image()
            .map_err(pdf)?;
        Ok((image, count))
    }

    fn image(&self, bytes: &[u8]) -> Result<DynamicImage, RenderError> {
        Ok(media::decode_image(bytes)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(width: u32, height: u32) -> Vec<u8> {
        let img = image::RgbImage::from_fn(width, height, |x, y| {
            image::Rgb([(x % 256) as u8, (y % 256) as u8, 128])
        });
        let mut out = Vec::new();
        DynamicImage::ImageRgb8(img)
            .write_to(&mut Cursor::new(&mut out), ImageFormat::Png)
            .unwrap();
        out
    }

    fn renderer() -> Renderer {
        Renderer::new(&docflow_stack::pdfium_library(), 256).expect("pdfium (run `make tools`)")
    }

    fn decode(png: &[u8]) -> DynamicImage {
        image::load_from_memory_with_format(png, ImageFormat::Png).unwrap()
    }

    /// A PNG that is only a signature and a header announcing `width` x `height` grey
    /// pixels: enough for any reader to learn the size, nothing to decode.
    fn png_header(width: u32, height: u32) -> Vec<u8> {
        fn crc32(data: &[u8]) -> u32 {
            let mut c = 0xFFFF_FFFFu32;
            for &b in data {
                c ^= u32::from(b);
                for _ in 0..8 {
                    c = if c & 1 == 1 {
                        (c >> 1) ^ 0xEDB8_8320
                    } else {
                        c >> 1
                    };
                }
            }
            !c
        }
        let mut header = width.to_be_bytes().to_vec();
        header.extend_from_slice(&height.to_be_bytes());
        header.extend_from_slice(&[8, 0, 0, 0, 0]); // 8-bit grey, no interlace
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        // Readers learn the size from IHDR but read on to the first IDAT: an empty one.
        for (kind, data) in [(&b"IHDR"[..], &header[..]), (b"IDAT", &[]), (b"IEND", &[])] {
            let mut chunk = kind.to_vec();
            chunk.extend_from_slice(data);
            out.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
            out.extend_from_slice(&chunk);
            out.extend_from_slice(&crc32(&chunk).to_be_bytes());
        }
        out
    }

    #[test]
    fn oversized_images_are_refused_from_their_header() {
        let r = renderer();
        for (w, h) in [(1, 500_000_000), (40_000, 10), (12_000, 12_000)] {
            let err = r.render(&png_header(w, h)).unwrap_err();
            assert!(
                matches!(err, RenderError::Media(MediaError::TooLarge { width, height }) if (width, height) == (w, h)),
                "{w}x{h}: {err}"
            );
        }
        // Within the limits the header alone passes the check and the decoder reports the
        // missing data.
        let err = r.render(&png_header(100, 100)).unwrap_err();
        assert!(
            matches!(err, RenderError::Media(MediaError::Image(_))),
            "{err}"
        );
    }

    #[test]
    fn images_are_scaled_to_fit() {
        let r = renderer();
        let t = r.render(&png(1000, 500)).unwrap();
        assert_eq!((t.width, t.height, t.pages), (256, 128, 1));
        let img = decode(&t.png);
        assert_eq!((img.width(), img.height()), (256, 128));
        // Small images are not enlarged.
        let t = r.render(&png(40, 30)).unwrap();
        assert_eq!((t.width, t.height), (40, 30));
    }

    #[test]
    fn pdfs_render_their_first_page() {
        let r = renderer();
        let pdf = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../samples/report-q3.pdf"
        ))
        .unwrap();
        let t = r.render(&pdf).unwrap();
        assert!(t.pages >= 1);
        assert!(t.width <= 256 && t.height <= 256 && t.width.max(t.height) == 256);
        let img = decode(&t.png).to_luma8();
        // A page with text is mostly white with some dark pixels.
        let dark = img.pixels().filter(|p| p.0[0] < 128).count();
        let total = img.pixels().count();
        assert!(dark > 0 && dark < total / 2, "{dark} dark of {total}");
    }

    #[test]
    fn bad_documents_are_permanent_errors() {
        let r = renderer();
        assert!(matches!(
            r.render(b"just some text"),
            Err(RenderError::Media(MediaError::Unsupported))
        ));
        assert!(matches!(
            r.render(b"GIF89a......"),
            Err(RenderError::Media(MediaError::Unsupported))
        ));
        assert!(matches!(
            r.render(b"%PDF-1.7\n garbage with no objects"),
            Err(RenderError::Pdf(_))
        ));
        let mut truncated = png(64, 64);
        truncated.truncate(60);
        assert!(matches!(
            r.render(&truncated),
            Err(RenderError::Media(MediaError::Image(_)))
        ));
    }
}
