//! What the OCR tests and benchmarks measure text with.

/// Levenshtein distance of two sequences.
pub fn levenshtein<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut diag = row[0];
        row[0] = i;
        for j in 1..=b.len() {
            let up = row[j];
            row[j] = (row[j] + 1)
                .min(row[j - 1] + 1)
                .min(diag + usize::from(a[i - 1] != b[j - 1]));
            diag = up;
        }
    }
    row[b.len()]
}

/// Character error rate of `got` against `want`: character Levenshtein distance over the
/// characters of `want`, white space normalised to single spaces on both sides.
pub fn cer(got: &str, want: &str) -> f64 {
    let norm = |s: &str| {
        s.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .collect::<Vec<char>>()
    };
    let (g, w) = (norm(got), norm(want));
    levenshtein(&g, &w) as f64 / w.len().max(1) as f64
}

/// Lower-case words of `text`, punctuation stripped (what word accuracy compares).
pub fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| {
            w.chars()
                .filter(|c| c.is_alphanumeric())
                .flat_map(char::to_lowercase)
                .collect::<String>()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_and_rates() {
        assert_eq!(levenshtein(b"kitten", b"sitting"), 3);
        assert_eq!(levenshtein::<u8>(b"", b"abc"), 3);
        assert!((cer("helo  world", "hello world") - 1.0 / 11.0).abs() < 1e-9);
        assert_eq!(cer("", ""), 0.0);
        assert_eq!(words("Total: 42 EUR, due."), ["total", "42", "eur", "due"]);
    }
}
