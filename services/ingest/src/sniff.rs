//! What a document really is, from its bytes, and whether a PDF is sane enough to accept.
//! Total functions: any input gives an answer, never a panic (fuzzed by proptest).

/// Accepted document types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// application/pdf
    Pdf,
    /// image/png
    Png,
    /// image/jpeg
    Jpeg,
    /// image/tiff
    Tiff,
}

impl Kind {
    /// MIME type.
    pub fn mime(self) -> &'static str {
        match self {
            Kind::Pdf => "application/pdf",
            Kind::Png => "image/png",
            Kind::Jpeg => "image/jpeg",
            Kind::Tiff => "image/tiff",
        }
    }
}

/// The type of `bytes` from their magic numbers; `None` for anything else.
pub fn sniff(bytes: &[u8]) -> Option<Kind> {
    if bytes.starts_with(b"%PDF-") {
        Some(Kind::Pdf)
    } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(Kind::Png)
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some(Kind::Jpeg)
    } else if bytes.starts_with(b"II*\0") || bytes.starts_with(b"MM\0*") {
        Some(Kind::Tiff)
    } else {
        None
    }
}

/// Why a PDF is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PdfError {
    /// No `%%EOF` marker near the end: truncated.
    #[error("PDF has no %%EOF trailer (truncated upload?)")]
    NoEof,
    /// No `startxref` before the end: the cross-reference table cannot be found.
    #[error("PDF has no startxref pointer")]
    NoStartXref,
    /// The startxref offset points outside the file.
    #[error("PDF startxref offset {0} is outside the file")]
    BadStartXref(u64),
    /// No page objects.
    #[error("PDF has no pages")]
    NoPages,
    /// More pages than allowed.
    #[error("PDF has {found} pages; the limit is {limit}")]
    TooManyPages {
        /// Pages found.
        found: usize,
        /// The limit.
        limit: usize,
    },
}

/// How far from the end the trailer must be (the spec says the last 1024 bytes).
const TRAILER_WINDOW: usize = 1024;

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

/// Counts `/Type /Page` objects (not `/Pages`), with or without the space.
fn count_pages(bytes: &[u8]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while let Some(pos) = bytes[i..].windows(5).position(|w| w == b"/Type") {
        let mut j = i + pos + 5;
        while j < bytes.len() && matches!(bytes[j], b' ' | b'\r' | b'\n' | b'\t') {
            j += 1;
        }
        if bytes[j..].starts_with(b"/Page") && !bytes[j..].starts_with(b"/Pages") {
            n += 1;
        }
        i = i + pos + 5;
        if i >= bytes.len() {
            break;
        }
    }
    n
}

/// Header, trailer and page-count sanity of a PDF; returns the page count.
pub fn check_pdf(bytes: &[u8], max_pages: usize) -> Result<usize, PdfError> {
    let tail_start = bytes.len().saturating_sub(TRAILER_WINDOW);
    let tail = &bytes[tail_start..];
    if find(tail, b"%%EOF").is_none() {
        return Err(PdfError::NoEof);
    }
    let sx = find(tail, b"startxref").ok_or(PdfError::NoStartXref)?;
    let digits: String = tail[sx + 9..]
        .iter()
        .skip_while(|b| b.is_ascii_whitespace())
        .take_while(|b| b.is_ascii_digit())
        .map(|b| char::from(*b))
        .collect();
    let offset: u64 = digits.parse().map_err(|_| PdfError::NoStartXref)?;
    if offset >= bytes.len() as u64 {
        return Err(PdfError::BadStartXref(offset));
    }
    let pages = count_pages(bytes);
    if pages == 0 {
        return Err(PdfError::NoPages);
    }
    if pages > max_pages {
        return Err(PdfError::TooManyPages {
            found: pages,
            limit: max_pages,
        });
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Vec<u8> {
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../samples/report-q3.pdf"
        ))
        .unwrap()
    }

    #[test]
    fn samples_pass_and_count_pages() {
        let pdf = sample();
        assert_eq!(sniff(&pdf), Some(Kind::Pdf));
        assert_eq!(check_pdf(&pdf, 100), Ok(3));
        assert_eq!(
            check_pdf(&pdf, 2),
            Err(PdfError::TooManyPages { found: 3, limit: 2 })
        );
    }

    #[test]
    fn truncated_and_broken_pdfs_are_refused() {
        let pdf = sample();
        assert_eq!(check_pdf(&pdf[..pdf.len() / 2], 100), Err(PdfError::NoEof));
        assert_eq!(
            check_pdf(b"%PDF-1.4\n%%EOF\n", 100),
            Err(PdfError::NoStartXref)
        );
        assert_eq!(
            check_pdf(b"%PDF-1.4\nstartxref\n99999\n%%EOF\n", 100),
            Err(PdfError::BadStartXref(99999))
        );
        assert_eq!(
            check_pdf(b"%PDF-1.4\nxref\nstartxref\n3\n%%EOF\n", 100),
            Err(PdfError::NoPages)
        );
    }

    #[test]
    fn sniffs_images_and_refuses_the_rest() {
        assert_eq!(sniff(b"\x89PNG\r\n\x1a\nrest"), Some(Kind::Png));
        assert_eq!(sniff(&[0xFF, 0xD8, 0xFF, 0xE0]), Some(Kind::Jpeg));
        assert_eq!(sniff(b"II*\0...."), Some(Kind::Tiff));
        assert_eq!(sniff(b"MM\0*...."), Some(Kind::Tiff));
        assert_eq!(sniff(b"hello"), None);
        assert_eq!(sniff(b""), None);
        assert_eq!(Kind::Pdf.mime(), "application/pdf");
    }

    proptest! {
        /// Fuzz: arbitrary bytes, with and without a PDF header and trailer, never panic.
        #[test]
        fn never_panics(body in proptest::collection::vec(any::<u8>(), 0..4096), header in any::<bool>(), trailer in any::<bool>()) {
            let mut bytes = Vec::new();
            if header { bytes.extend_from_slice(b"%PDF-1.7\n"); }
            bytes.extend_from_slice(&body);
            if trailer { bytes.extend_from_slice(b"\nstartxref\n0\n%%EOF\n"); }
            let _ = sniff(&bytes);
            let _ = check_pdf(&bytes, 10);
        }
    }
}
