//! Extractive summaries: the sentences of a document closest to its mean vector, in
//! document order.
//!
//! The mean of a document's sentence vectors points at what most of it is about; the
//! sentences nearest to it are the most representative ones. Nothing is generated, so a
//! summary never says what the document does not.

/// Byte ranges of the sentences of `text`: cut after `.`, `!` or `?` followed by white space,
/// and at blank lines and line ends that close a line without a sentence mark when the next
/// line starts a new block (a heading, a list item). Pieces of fewer than three words are
/// dropped (page numbers, stray labels).
pub fn sentences(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    let mut i = 0;
    let push = |from: usize, to: usize, out: &mut Vec<(usize, usize)>| {
        let piece = text.get(from..to).unwrap_or("");
        let trimmed = piece.trim();
        if trimmed.split_whitespace().count() >= 3 {
            let lead = piece.len() - piece.trim_start().len();
            out.push((from + lead, from + lead + trimmed.len()));
        }
    };
    while i < bytes.len() {
        let b = bytes[i];
        let next = bytes.get(i + 1).copied();
        let end_mark =
            matches!(b, b'.' | b'!' | b'?') && next.is_none_or(|c| c.is_ascii_whitespace());
        let blank = b == b'\n' && (next == Some(b'\n') || next == Some(b'\r'));
        if end_mark || blank {
            push(start, i + 1, &mut out);
            start = i + 1;
        }
        i += 1;
    }
    push(start, text.len(), &mut out);
    out
}

/// Indices of the `k` vectors closest (cosine) to the mean of all, in ascending order.
pub fn extractive(vectors: &[Vec<f32>], k: usize) -> Vec<usize> {
    let Some(first) = vectors.first() else {
        return Vec::new();
    };
    let dims = first.len();
    let mut mean = vec![0f32; dims];
    for v in vectors {
        for (m, x) in mean.iter_mut().zip(v) {
            *m += x;
        }
    }
    let mut scored: Vec<(usize, f32)> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| (i, crate::cosine(v, &mean)))
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut picked: Vec<usize> = scored.into_iter().take(k).map(|(i, _)| i).collect();
    picked.sort_unstable();
    picked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_are_cut_at_marks_and_blank_lines() {
        let text = "Invoice 42 is due. Pay it by March! Is that clear?\n\nTerms of payment apply here\n\n3\n";
        let got: Vec<&str> = sentences(text).iter().map(|&(a, b)| &text[a..b]).collect();
        assert_eq!(
            got,
            [
                "Invoice 42 is due.",
                "Pay it by March!",
                "Is that clear?",
                "Terms of payment apply here"
            ]
        );
        // Decimal points and abbreviations without a following space do not cut.
        let text = "The total is 1.234,56 EUR for all items.";
        assert_eq!(sentences(text).len(), 1);
        assert!(sentences("").is_empty());
        assert_eq!(sentences("no mark at the end").len(), 1);
    }

    #[test]
    fn extractive_picks_the_central_ones_in_order() {
        let v = |x: f32, y: f32| {
            let n = (x * x + y * y).sqrt();
            vec![x / n, y / n]
        };
        // Mostly along x; one outlier along y.
        let vectors = vec![v(1.0, 0.1), v(0.0, 1.0), v(1.0, 0.0), v(1.0, 0.2)];
        // The mean points about 23° off x: the nearest are the 11° and 6° ones.
        assert_eq!(extractive(&vectors, 2), vec![0, 3]);
        assert_eq!(extractive(&vectors, 10), vec![0, 1, 2, 3]);
        assert!(extractive(&[], 3).is_empty());
    }
}
