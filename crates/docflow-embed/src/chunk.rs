//! Page text cut into pieces the model sees whole.
//!
//! A chunk is a window of at most `window` word pieces (the model's 256 minus `[CLS]` and
//! `[SEP]`); consecutive windows share `overlap` pieces so a sentence cut in two is still
//! whole in one of them. A window never ends inside a word when it can help it (it backs off
//! to the start of the word whose `##` continuation would be cut), and its text is the exact
//! slice of the page between its first and last piece, so search results quote the page.

/// A piece of a page's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The text (a slice of the page).
    pub text: String,
    /// Byte offset of its start in the page text.
    pub start: usize,
    /// Byte offset just past its end.
    pub end: usize,
}

/// Windows over the pieces of `text` (`offsets` and `tokens` from the tokenizer, without
/// special tokens): each at most `window` pieces, consecutive ones sharing `overlap` (capped
/// at half a window so every step moves forward).
pub fn windows(
    text: &str,
    offsets: &[(usize, usize)],
    tokens: &[String],
    window: usize,
    overlap: usize,
) -> Vec<Chunk> {
    let n = offsets.len().min(tokens.len());
    let window = window.max(1);
    let overlap = overlap.min(window / 2);
    let mut out = Vec::new();
    let mut start = 0;
    while start < n {
        let mut end = (start + window).min(n);
        // Do not cut a word: back off while the next piece continues the word.
        if end < n {
            let mut e = end;
            while e > start + 1 && tokens.get(e).is_some_and(|t| t.starts_with("##")) {
                e -= 1;
            }
            if e > start + window / 2 {
                end = e;
            }
        }
        let (from, to) = match (offsets.get(start), offsets.get(end - 1)) {
            (Some(a), Some(b)) => (a.0, b.1),
            _ => break,
        };
        if let Some(slice) = text.get(from..to) {
            out.push(Chunk {
                text: slice.to_owned(),
                start: from,
                end: to,
            });
        }
        if end >= n {
            break;
        }
        start = (end - overlap).max(start + 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whitespace "tokenizer" for the tests: one piece per word, `##` for the second half of
    /// words longer than six letters.
    fn pieces(text: &str) -> (Vec<(usize, usize)>, Vec<String>) {
        let mut offsets = Vec::new();
        let mut tokens = Vec::new();
        let mut at = 0;
        for word in text.split(' ') {
            if word.len() > 6 {
                offsets.push((at, at + 3));
                tokens.push(word[..3].to_owned());
                offsets.push((at + 3, at + word.len()));
                tokens.push(format!("##{}", &word[3..]));
            } else if !word.is_empty() {
                offsets.push((at, at + word.len()));
                tokens.push(word.to_owned());
            }
            at += word.len() + 1;
        }
        (offsets, tokens)
    }

    #[test]
    fn short_text_is_one_chunk() {
        let text = "a short page";
        let (o, t) = pieces(text);
        let chunks = windows(text, &o, &t, 254, 32);
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].text, text);
        assert!(windows("", &[], &[], 254, 32).is_empty());
    }

    #[test]
    fn windows_overlap_and_cover_everything() {
        let words: Vec<String> = (0..100).map(|i| format!("w{i}")).collect();
        let text = words.join(" ");
        let (o, t) = pieces(&text);
        let chunks = windows(&text, &o, &t, 30, 5);
        // Every word is in some chunk; consecutive chunks share 5 words.
        for w in &words {
            assert!(
                chunks.iter().any(|c| c.text.split(' ').any(|x| x == w)),
                "{w}"
            );
        }
        for pair in chunks.windows(2) {
            let a: Vec<&str> = pair[0].text.split(' ').collect();
            let b: Vec<&str> = pair[1].text.split(' ').collect();
            assert_eq!(&a[a.len() - 5..], &b[..5]);
        }
        assert!(chunks.iter().all(|c| c.text.split(' ').count() <= 30));
        assert_eq!(&text[chunks[1].start..chunks[1].end], chunks[1].text);
    }

    #[test]
    fn words_are_not_cut_and_overlap_cannot_stall() {
        let text = "aa bb cc dd eeeeeeeeee ff gg hh ii jj";
        let (o, t) = pieces(text);
        // A window of 5 pieces would end between "eee" and "##eeeeeee": it backs off.
        let chunks = windows(text, &o, &t, 5, 100);
        assert_eq!(chunks[0].text, "aa bb cc dd");
        assert!(chunks.iter().any(|c| c.text.contains("eeeeeeeeee")));
        assert!(chunks.len() < 10, "{chunks:?}");
        assert!(chunks.last().unwrap().text.ends_with("jj"));
    }
}
