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
    /// Its object streams inflate to more than ingest examines.
    #[error("PDF object streams inflate to more than {limit} bytes")]
    TooComplex {
        /// The limit.
        limit: usize,
    },
    /// More pages than allowed.
    #[error("PDF has {found} pages; the limit is {limit}")]
    TooManyPages {
        /// Pages found.
        found: usize,
        /// The limit.
        limit: usize,
    },
}

/// Most bytes the object streams of one PDF may inflate to: what ingest reads to count
/// pages is bounded (a deflate bomb costs at most this much memory and time).
pub const MAX_INFLATED: usize = 64 * 1024 * 1024;

/// Pages inside object streams (PDF 1.5+: many current tools put every object, pages
/// included, into compressed `/Type /ObjStm` streams, where no `/Type /Page` is visible in
/// the raw bytes). Each object stream is inflated (FlateDecode; unfiltered ones read as
/// they are), all of them together at most [`MAX_INFLATED`] bytes. Returns the pages found
/// and how many object streams could not be read (damaged, encrypted, another filter).
fn object_stream_pages(bytes: &[u8]) -> Result<(usize, usize), PdfError> {
    let mut pages = 0;
    let mut unreadable = 0;
    let mut budget = MAX_INFLATED;
    let mut from = 0;
    let mut dicts = NearestBefore::new(bytes, b"<<");
    // Where the last stream read ended: a dictionary starts after it.
    let mut last_end = 0;
    while let Some(pos) = find_from(bytes, b"/ObjStm", from) {
        from = pos + 7;
        // The stream's dictionary: from its `<<` (within 4 KiB before, after the previous
        // stream) to `stream`.
        let Some(dict_start) = dicts.within(pos, LOOK_BACK).filter(|&d| d >= last_end) else {
            continue;
        };
        let Some(kw) = find_from(bytes, b"stream", pos) else {
            break;
        };
        let dict = &bytes[dict_start..kw];
        let mut data_start = kw + 6;
        if bytes.get(data_start) == Some(&b'\r') {
            data_start += 1;
        }
        if bytes.get(data_start) == Some(&b'\n') {
            data_start += 1;
        }
        let Some(end) = find_from(bytes, b"endstream", data_start) else {
            break;
        };
        let data = &bytes[data_start.min(end)..end];
        from = end;
        last_end = end;
        let inflated;
        let content: &[u8] = if find_from(dict, b"/FlateDecode", 0).is_some() {
            match miniz_oxide::inflate::decompress_to_vec_zlib_with_limit(data, budget) {
                Ok(v) => {
                    inflated = v;
                    &inflated
                }
                Err(e) if e.status == miniz_oxide::inflate::TINFLStatus::HasMoreOutput => {
                    return Err(PdfError::TooComplex {
                        limit: MAX_INFLATED,
                    });
                }
                // A damaged or encrypted stream: not counted here.
                Err(_) => {
                    unreadable += 1;
                    continue;
                }
            }
        } else if find_from(dict, b"/Filter", 0).is_none() {
            data
        } else {
            unreadable += 1;
            continue; // another filter: not counted here; the stage sees every page
        };
        budget = budget.saturating_sub(content.len());
        pages += count_pages(content);
    }
    Ok((pages, unreadable))
}

/// How far before a page marker its object header, and before an `/ObjStm` its dictionary's
/// `<<`, may start: both are small.
const LOOK_BACK: usize = 4096;

/// The nearest occurrence of a keyword before each of a series of positions asked in
/// increasing order (the `obj` of each page's header, the `<<` of each object stream's
/// dictionary). Each call searches backwards from its position, like a plain backward
/// search of its window, but stops where the previous call's search began: no byte is read
/// twice for the series. A plain backward search of each window made a crafted file (1 MiB
/// of `/Type/Page` or of `/ObjStm` markers) cost up to 0.47 s a MiB; this costs up to
/// 10–16 ms a MiB (ingest-bench's crafted documents), and an ordinary PDF's few markers
/// each find their keyword a few bytes back.
struct NearestBefore<'a> {
    bytes: &'a [u8],
    needle: &'static [u8],
    /// Where candidates have been searched up to: every occurrence starting before this has
    /// been seen, and the nearest of them is `last`.
    searched: usize,
    /// The last occurrence starting before `searched`, if one was found in a window.
    last: Option<usize>,
}

impl<'a> NearestBefore<'a> {
    fn new(bytes: &'a [u8], needle: &'static [u8]) -> Self {
        NearestBefore {
            bytes,
            needle,
            searched: 0,
            last: None,
        }
    }

    /// Where the last occurrence that ends at or before `pos` starts, if it starts at most
    /// `window` bytes before `pos` (`pos` no smaller than the previous call's).
    fn within(&mut self, pos: usize, window: usize) -> Option<usize> {
        let low = pos.saturating_sub(window);
        // The occurrences that end at or before `pos` start before `end`.
        let end = (pos + 1)
            .saturating_sub(self.needle.len())
            .min(self.bytes.len());
        let from = self.searched.max(low);
        if from < end {
            let first = self.needle.first().copied().unwrap_or_default();
            let found = memchr::memrchr_iter(first, &self.bytes[from..end])
                .map(|i| from + i)
                .find(|&i| self.bytes[i..].starts_with(self.needle));
            if found.is_some() {
                self.last = found;
            }
            self.searched = end;
        }
        self.last.filter(|&i| i >= low)
    }
}

fn find_from(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    memchr::memmem::find(hay.get(from..)?, needle).map(|i| from + i)
}

/// How far from the end the trailer must be (the spec says the last 1024 bytes).
const TRAILER_WINDOW: usize = 1024;

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::rfind(hay, needle)
}

/// Page objects in the raw bytes, each object number once: an incremental update appends a
/// new version of the pages it changes (`3 0 obj` again), which is still one page. A page
/// dictionary with no `obj` keyword of an `N G obj` header within 4 KiB before it (or an
/// `endobj` nearer: a page dictionary is small; damaged) counts on its own.
///
/// No byte is searched twice for the `obj` keywords, and each header is parsed once however
/// many pages follow it (see [`NearestBefore`]).
fn count_page_objects(bytes: &[u8]) -> usize {
    let mut numbers = std::collections::HashSet::new();
    let mut unnumbered = 0;
    let mut objs = NearestBefore::new(bytes, b"obj");
    // The last header parsed: where its `obj` is, and its object number.
    let mut parsed: Option<(usize, Option<u64>)> = None;
    for at in page_positions(bytes) {
        let number = objs.within(at, LOOK_BACK).and_then(|p| match parsed {
            Some((q, n)) if q == p => n,
            _ => {
                let n = object_number_at(bytes, p);
                parsed = Some((p, n));
                n
            }
        });
        match number {
            Some(n) => {
                numbers.insert(n);
            }
            None => unnumbered += 1,
        }
    }
    numbers.len() + unnumbered
}

/// The object number N of the `N G obj` header whose `obj` is at `p`; none for an `endobj`
/// (the nearest is the end of the previous object: the page has no header) or anything else.
fn object_number_at(bytes: &[u8], p: usize) -> Option<u64> {
    let before = &bytes[..p];
    if before.ends_with(b"end") {
        return None;
    }
    // Backwards over: whitespace, generation digits, whitespace, object number digits.
    let mut i = before.len();
    let skip = |i: &mut usize, f: fn(&u8) -> bool| {
        let start = *i;
        while *i > 0 && f(&before[*i - 1]) {
            *i -= 1;
        }
        *i < start
    };
    if !skip(&mut i, u8::is_ascii_whitespace)
        || !skip(&mut i, u8::is_ascii_digit)
        || !skip(&mut i, u8::is_ascii_whitespace)
    {
        return None;
    }
    let end = i;
    if !skip(&mut i, u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(&before[i..end]).ok()?.parse().ok()
}

/// Counts `/Type /Page` objects (not `/Pages`), with or without the space.
fn count_pages(bytes: &[u8]) -> usize {
    page_positions(bytes).count()
}

/// Where each `/Type /Page` (not `/Pages`) is, with or without the space.
fn page_positions(bytes: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        while let Some(pos) = memchr::memmem::find(bytes.get(i..)?, b"/Type") {
            let at = i + pos;
            let mut j = at + 5;
            i = j;
            while j < bytes.len() && matches!(bytes[j], b' ' | b'\r' | b'\n' | b'\t') {
                j += 1;
            }
            if bytes[j..].starts_with(b"/Page") && !bytes[j..].starts_with(b"/Pages") {
                return Some(at);
            }
        }
        None
    })
}

/// Whether the trailer names an `/Encrypt` dictionary: a classic trailer sits in the
/// file's tail; a cross-reference stream (PDF 1.5+, what files with object streams use)
/// carries the trailer keys in its own dictionary at the `startxref` offset, before its
/// data, so that dictionary is read too.
fn is_encrypted(bytes: &[u8], tail: &[u8], startxref: u64) -> bool {
    if find(tail, b"/Encrypt").is_some() {
        return true;
    }
    let Ok(at) = usize::try_from(startxref) else {
        return false;
    };
    let window = &bytes[at.min(bytes.len())..bytes.len().min(at.saturating_add(8192))];
    let dict = find_from(window, b"stream", 0).map_or(window, |end| &window[..end]);
    find_from(dict, b"/Encrypt", 0).is_some()
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
    let (in_streams, unreadable) = object_stream_pages(bytes)?;
    let pages = count_page_objects(bytes) + in_streams;
    // An encrypted file's object streams cannot be read without decrypting them (readers
    // open files encrypted for an empty user password, as most are): its pages are not
    // counted here, so it is not refused for having none. The count that is returned is
    // then a lower bound, and the page limits that matter are the stages' own, checked in
    // their isolated workers before any page is rendered (`--max-pages`).
    if pages == 0 && !(unreadable > 0 && is_encrypted(bytes, tail, offset)) {
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

    /// A PDF 1.5 whose objects, pages included, live in one compressed object stream (as
    /// many current tools write them, e.g. `crazyones.pdf` in pypdf's tests), with an
    /// optional comment after `%%EOF` that looks like a page.
    fn object_stream_pdf(pages: usize, fake_comment: bool) -> Vec<u8> {
        let mut objects = vec![
            "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
            format!(
                "<< /Type /Pages /Kids [{}] /Count {pages} >>",
                (0..pages)
                    .map(|i| format!("{} 0 R", i + 3))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        ];
        for _ in 0..pages {
            objects.push("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>".to_owned());
        }
        let mut header = String::new();
        let mut body = String::new();
        for (i, o) in objects.iter().enumerate() {
            header.push_str(&format!("{} {} ", i + 1, body.len()));
            body.push_str(o);
            body.push('\n');
        }
        let plain = format!("{header}\n{body}");
        let packed = miniz_oxide::deflate::compress_to_vec_zlib(plain.as_bytes(), 6);
        let mut pdf = b"%PDF-1.5\n".to_vec();
        let objstm = pdf.len();
        pdf.extend_from_slice(
            format!(
                "{} 0 obj\n<< /Type /ObjStm /N {} /First {} /Filter /FlateDecode /Length {} >>\nstream\n",
                objects.len() + 1,
                objects.len(),
                header.len() + 1,
                packed.len()
            )
            .as_bytes(),
        );
        pdf.extend_from_slice(&packed);
        pdf.extend_from_slice(b"\nendstream\nendobj\n");
        let xref = pdf.len();
        // An xref stream would be usual; a classic table with the trailer is enough here.
        pdf.extend_from_slice(format!("xref\n0 1\n0000000000 65535 f \ntrailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n", objects.len() + 2).as_bytes());
        let _ = objstm;
        if fake_comment {
            pdf.extend_from_slice(b"%/Type /Page\n");
        }
        pdf
    }

    #[test]
    fn pages_in_object_streams_are_counted() {
        let pdf = object_stream_pdf(3, false);
        assert!(count_pages(&pdf) == 0, "nothing visible in the raw bytes");
        assert_eq!(check_pdf(&pdf, 100), Ok(3));
        // 10,000 pages in an object stream and a page-looking comment after %%EOF: the
        // comment no longer gets it past the limit.
        let big = object_stream_pdf(10_000, true);
        assert_eq!(
            check_pdf(&big, 2_000),
            Err(PdfError::TooManyPages {
                found: 10_001,
                limit: 2_000
            })
        );
    }

    /// An encrypted PDF whose pages sit in object streams (pypdf's AES sample): the streams
    /// cannot be inflated without the key, so no page is counted, and the file is accepted
    /// for the stages (which decrypt and count) rather than refused as page-less. The same
    /// unreadable streams without `/Encrypt` are a damaged file: refused.
    #[test]
    fn encrypted_object_streams_are_left_to_the_stages() {
        let plain = object_stream_pdf(2, false);
        let start = find_from(&plain, b"stream\n", 0).unwrap() + 7;
        let end = find_from(&plain, b"\nendstream", 0).unwrap();
        // Ciphertext: what AES leaves of the deflated stream.
        let mut scrambled = plain.clone();
        for (i, b) in scrambled[start..end].iter_mut().enumerate() {
            *b ^= 0x5a ^ (i as u8);
        }
        let root = find_from(&scrambled, b"/Root 1 0 R >>", end).unwrap();
        let mut encrypted = scrambled[..root].to_vec();
        encrypted.extend_from_slice(b"/Root 1 0 R /Encrypt 99 0 R >>");
        encrypted.extend_from_slice(&scrambled[root + b"/Root 1 0 R >>".len()..]);
        assert_eq!(check_pdf(&plain, 10), Ok(2));
        assert_eq!(check_pdf(&encrypted, 10), Ok(0));
        assert_eq!(check_pdf(&scrambled, 10), Err(PdfError::NoPages));

        // The usual shape: a cross-reference stream whose dictionary (with /Encrypt) comes
        // before 2 KiB of stream data, so it is not in the file's last KiB.
        let body_end = find_from(&scrambled, b"xref\n", end).unwrap();
        let mut xref_stream = scrambled[..body_end].to_vec();
        let at = xref_stream.len();
        xref_stream.extend_from_slice(
            b"9 0 obj\n<< /Type /XRef /Size 10 /Root 1 0 R /Encrypt 99 0 R /W [1 2 1] /Length 2048 >>\nstream\n",
        );
        xref_stream.extend_from_slice(&[0u8; 2048]);
        xref_stream
            .extend_from_slice(format!("\nendstream\nendobj\nstartxref\n{at}\n%%EOF\n").as_bytes());
        assert_eq!(check_pdf(&xref_stream, 10), Ok(0));
    }

    #[test]
    fn a_deflate_bomb_in_an_object_stream_is_refused() {
        let zeros = vec![0u8; MAX_INFLATED + 1024];
        let packed = miniz_oxide::deflate::compress_to_vec_zlib(&zeros, 9);
        let mut pdf =
            b"%PDF-1.5\n1 0 obj\n<< /Type /ObjStm /N 1 /First 4 /Filter /FlateDecode >>\nstream\n"
                .to_vec();
        pdf.extend_from_slice(&packed);
        pdf.extend_from_slice(b"\nendstream\nendobj\nstartxref\n9\n%%EOF\n");
        assert_eq!(
            check_pdf(&pdf, 100),
            Err(PdfError::TooComplex {
                limit: MAX_INFLATED
            })
        );
    }

    /// A classic PDF: catalog, page tree, `pages` pages, optionally a linearisation
    /// dictionary first; returns the bytes and the offset of its xref table.
    fn classic_pdf(pages: usize, linearised: bool) -> (Vec<u8>, usize) {
        let mut pdf = b"%PDF-1.4\n".to_vec();
        if linearised {
            // A linearised file opens with its linearisation dictionary and a first-page
            // cross-reference section with its own trailer and startxref.
            pdf.extend_from_slice(
                format!("{} 0 obj\n<< /Linearized 1 /L 9999 /N {pages} /O 3 /E 0 /T 0 >>\nendobj\nxref\n0 0\ntrailer\n<< /Size 1 >>\nstartxref\n0\n%%EOF\n", pages + 3)
                    .as_bytes(),
            );
        }
        let kids: Vec<String> = (0..pages).map(|i| format!("{} 0 R", i + 3)).collect();
        pdf.extend_from_slice(b"1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n");
        pdf.extend_from_slice(
            format!(
                "2 0 obj\n<< /Type /Pages /Kids [{}] /Count {pages} >>\nendobj\n",
                kids.join(" ")
            )
            .as_bytes(),
        );
        for i in 0..pages {
            pdf.extend_from_slice(
                format!(
                    "{} 0 obj\n<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>\nendobj\n",
                    i + 3
                )
                .as_bytes(),
            );
        }
        let xref = pdf.len();
        pdf.extend_from_slice(
            format!("xref\n0 1\n0000000000 65535 f \ntrailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n", pages + 3)
                .as_bytes(),
        );
        (pdf, xref)
    }

    /// What readers accept, ingest accepts, with the right page count: incremental updates
    /// (a page rewritten is still one page), linearised files (a first-page trailer near
    /// the top) and a broken xref offset that readers repair by scanning.
    #[test]
    fn updated_linearised_and_repairable_pdfs_count_right() {
        let (plain, xref) = classic_pdf(3, false);
        assert_eq!(check_pdf(&plain, 10), Ok(3));

        // Two incremental updates, each rewriting page 4 0 obj (and adding nothing).
        let mut updated = plain.clone();
        let mut prev = xref;
        for round in 0..2 {
            let at = updated.len();
            updated.extend_from_slice(
                format!("4 0 obj\n<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Rotate {} >>\nendobj\n", 90 * (round + 1))
                    .as_bytes(),
            );
            let x = updated.len();
            updated.extend_from_slice(
                format!("xref\n4 1\n{at:010} 00000 n \ntrailer\n<< /Size 6 /Root 1 0 R /Prev {prev} >>\nstartxref\n{x}\n%%EOF\n")
                    .as_bytes(),
            );
            prev = x;
        }
        assert_eq!(check_pdf(&updated, 10), Ok(3), "rewritten pages count once");
        assert_eq!(count_pages(&updated), 5, "what a raw count would say");

        let (linear, _) = classic_pdf(2, true);
        assert_eq!(check_pdf(&linear, 10), Ok(2));

        // startxref points into the middle of an object: readers rebuild the table.
        let broken = String::from_utf8(plain.clone())
            .unwrap()
            .replace(&format!("startxref\n{xref}\n"), "startxref\n20\n");
        assert_eq!(check_pdf(broken.as_bytes(), 10), Ok(3));

        // A damaged page object with no header still counts (never under-count).
        let headless = String::from_utf8(plain).unwrap().replace("5 0 obj\n", "");
        assert_eq!(check_pdf(headless.as_bytes(), 10), Ok(3));
    }

    /// Page markers by the thousand, far from any object header or all in one object: each
    /// object number counts once, each marker with no header on its own (read in one pass,
    /// see `NearestBefore`; 1 MiB of them took 0.28–0.47 s with a backward scan for each).
    #[test]
    fn crafted_page_markers_are_counted_in_one_pass() {
        let trailer = b"\nxref\nstartxref\n9\n%%EOF\n";
        let mut loose = b"%PDF-1.4\n".to_vec();
        for _ in 0..3000 {
            loose.extend_from_slice(b"/Type/Page ");
        }
        loose.extend_from_slice(trailer);
        assert_eq!(
            check_pdf(&loose, 2000),
            Err(PdfError::TooManyPages {
                found: 3000,
                limit: 2000
            })
        );
        let mut one = b"%PDF-1.4\n".to_vec();
        for _ in 0..100 {
            one.extend_from_slice(b"1 0 obj ");
            for _ in 0..370 {
                one.extend_from_slice(b"/Type/Page ");
            }
        }
        one.extend_from_slice(trailer);
        assert_eq!(check_pdf(&one, 2000), Ok(1));
        // Farther than 4 KiB from its header, a marker counts on its own.
        let mut far = b"%PDF-1.4\n7 0 obj ".to_vec();
        far.extend_from_slice(&[b' '; 5000]);
        far.extend_from_slice(b"/Type/Page /Type/Page");
        far.extend_from_slice(trailer);
        assert_eq!(check_pdf(&far, 2000), Ok(2));
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

    /// Inputs where `obj`, `endobj`, `<<` and digits are frequent, as a small alphabet makes them.
    fn keyword_soup() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![
                Just(&b"obj"[..]),
                Just(&b"endobj"[..]),
                Just(&b"<<"[..]),
                Just(&b"<"[..]),
                Just(&b"o"[..]),
                Just(&b" "[..]),
                Just(&b"7"[..]),
                Just(&b"x"[..]),
            ],
            0..400,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        /// The nearest keyword before each of a series of positions, each search stopping
        /// where the previous one began, is what a plain backward search of each position's
        /// window finds (overlapping `<<<` included).
        #[test]
        fn nearest_before_is_a_backward_search(bytes in keyword_soup(), steps in proptest::collection::vec(0usize..64, 1..40), window in 1usize..256) {
            for needle in [&b"obj"[..], &b"<<"[..]] {
                let mut nearest = NearestBefore::new(&bytes, needle);
                let mut pos = 0;
                for step in &steps {
                    pos = (pos + step).min(bytes.len());
                    let start = pos.saturating_sub(window);
                    let searched = bytes[start..pos]
                        .windows(needle.len())
                        .rposition(|w| w == needle)
                        .map(|i| start + i);
                    prop_assert_eq!(nearest.within(pos, window), searched, "{:?} before {}", needle, pos);
                }
            }
        }

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
