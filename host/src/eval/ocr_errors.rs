//! OCR's character and word error rates against a page's own text layer, matched by position so
//! that a different reading order (two columns read across, a table read by rows) costs nothing
//! while a missed, wrong or invented word does.

use crate::store::{BoundingBox, Line, Word};

/// Errors and totals over one or more pages; error rates can exceed 1 when OCR invents text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OcrErrorCounts {
    /// Characters in the reference lines (spaces between words included).
    pub reference_chars: usize,
    /// Edits (insertions, deletions, substitutions) that turn the reference into OCR's text.
    pub char_errors: usize,
    pub reference_words: usize,
    pub word_errors: usize,
}

impl OcrErrorCounts {
    /// Character error rate.
    pub fn cer(&self) -> f64 {
        self.char_errors as f64 / self.reference_chars.max(1) as f64
    }

    /// Word error rate.
    pub fn wer(&self) -> f64 {
        self.word_errors as f64 / self.reference_words.max(1) as f64
    }

    /// Adds another page's counts.
    pub fn add(&mut self, other: &OcrErrorCounts) {
        self.reference_chars += other.reference_chars;
        self.char_errors += other.char_errors;
        self.reference_words += other.reference_words;
        self.word_errors += other.word_errors;
    }
}

/// Folds the typographic variants a text layer has and a recogniser's alphabet spells plainly
/// (ligatures, curly quotes, dashes, no-break spaces) and collapses runs of spaces, so that only
/// what a reader would call a misreading counts. Case is kept.
pub fn normalise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            'ﬀ' => out.push_str("ff"),
            'ﬁ' => out.push_str("fi"),
            'ﬂ' => out.push_str("fl"),
            'ﬃ' => out.push_str("ffi"),
            'ﬄ' => out.push_str("ffl"),
            'ﬅ' | 'ﬆ' => out.push_str("st"),
            '‘' | '’' | '‚' | '′' | '`' => out.push('\''),
            '“' | '”' | '„' | '″' => out.push('"'),
            '‐' | '‑' | '‒' | '–' | '—' | '−' => out.push('-'),
            '…' => out.push_str("..."),
            c if c.is_whitespace() => out.push(' '),
            c => out.push(c),
        }
    }
    out.split(' ').filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" ")
}

/// Counts OCR's errors on a page: each recognised word goes to the reference line it lies on
/// (its centre within the line's height, the largest overlap winning), each line's words are
/// read left to right and compared with the line; words that lie on no line are all errors.
pub fn page_errors(reference: &[Line], recognised: &[Word]) -> OcrErrorCounts {
    let mut per_line: Vec<Vec<&Word>> = vec![Vec::new(); reference.len()];
    let mut stray = Vec::new();
    for word in recognised {
        match line_of(reference, &word.bbox) {
            Some(i) => per_line[i].push(word),
            None => stray.push(word),
        }
    }
    let mut counts = OcrErrorCounts::default();
    for (line, words) in reference.iter().zip(&mut per_line) {
        words.sort_by(|a, b| a.bbox.x0.total_cmp(&b.bbox.x0));
        let want = normalise(&line.text());
        let got = normalise(&words.iter().map(|w| w.text.as_str()).collect::<Vec<_>>().join(" "));
        let (want_words, got_words): (Vec<&str>, Vec<&str>) =
            (want.split(' ').filter(|w| !w.is_empty()).collect(), got.split(' ').filter(|w| !w.is_empty()).collect());
        counts.reference_chars += want.chars().count();
        counts.char_errors += strsim::levenshtein(&want, &got);
        counts.reference_words += want_words.len();
        counts.word_errors += strsim::generic_levenshtein::<Vec<&str>, Vec<&str>, &&str, &&str>(&want_words, &got_words);
    }
    for word in stray {
        let text = normalise(&word.text);
        counts.char_errors += text.chars().count();
        counts.word_errors += text.split(' ').filter(|w| !w.is_empty()).count();
    }
    counts
}

/// The reference line a recognised word's box lies on, if any.
fn line_of(reference: &[Line], word: &BoundingBox) -> Option<usize> {
    let centre_y = (word.y0 + word.y1) / 2.0;
    let overlap = |b: &BoundingBox| {
        let w = (word.x1.min(b.x1) - word.x0.max(b.x0)).max(0.0);
        let h = (word.y1.min(b.y1) - word.y0.max(b.y0)).max(0.0);
        w * h
    };
    let best = |on_line: &dyn Fn(&BoundingBox) -> bool| {
        reference
            .iter()
            .enumerate()
            .filter(|(_, l)| on_line(&l.bbox))
            .map(|(i, l)| (i, overlap(&l.bbox)))
            .filter(|(_, o)| *o > 0.0)
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(i, _)| i)
    };
    best(&|b: &BoundingBox| b.y0 <= centre_y && centre_y <= b.y1).or_else(|| best(&|_: &BoundingBox| true))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bbox(x0: f32, y0: f32, x1: f32, y1: f32) -> BoundingBox {
        BoundingBox { x0, y0, x1, y1 }
    }

    fn word(text: &str, x0: f32, y0: f32, x1: f32, y1: f32) -> Word {
        Word { text: text.into(), bbox: bbox(x0, y0, x1, y1) }
    }

    /// Two columns of two lines each, as a text layer has them.
    fn two_columns() -> Vec<Line> {
        let line = |words: Vec<Word>| Line { bbox: words.iter().skip(1).fold(words[0].bbox, |b, w| b.union(&w.bbox)), words };
        vec![
            line(vec![word("Net", 10.0, 10.0, 30.0, 20.0), word("income", 32.0, 10.0, 70.0, 20.0)]),
            line(vec![word("rose", 10.0, 24.0, 35.0, 34.0)]),
            line(vec![word("Total", 110.0, 10.0, 140.0, 20.0), word("ﬁve", 142.0, 10.0, 170.0, 20.0)]),
            line(vec![word("assets", 110.0, 24.0, 150.0, 34.0)]),
        ]
    }

    #[test]
    fn a_perfect_reading_in_another_order_has_no_errors() {
        // OCR reads across the columns, each line a little taller than the text layer's.
        let ocr = [
            word("Total", 109.0, 8.0, 141.0, 22.0),
            word("five", 141.0, 8.0, 171.0, 22.0),
            word("Net", 9.0, 8.0, 31.0, 22.0),
            word("income", 31.0, 8.0, 71.0, 22.0),
            word("assets", 109.0, 22.0, 151.0, 36.0),
            word("rose", 9.0, 22.0, 36.0, 36.0),
        ];
        let counts = page_errors(&two_columns(), &ocr);
        assert_eq!(counts, OcrErrorCounts { reference_chars: 10 + 4 + 10 + 6, char_errors: 0, reference_words: 6, word_errors: 0 });
    }

    #[test]
    fn misread_missed_and_invented_words_all_count() {
        let ocr = [
            word("Net", 9.0, 8.0, 31.0, 22.0),
            word("incorne", 31.0, 8.0, 71.0, 22.0), // two edits: m -> rn
            word("Total", 109.0, 8.0, 141.0, 22.0),
            word("five", 141.0, 8.0, 171.0, 22.0),
            word("assets", 109.0, 22.0, 151.0, 36.0),
            word("logo", 300.0, 300.0, 330.0, 310.0), // on no line
        ];
        // "rose" is missed: 4 characters, one word.
        let counts = page_errors(&two_columns(), &ocr);
        assert_eq!(counts.char_errors, 2 + 4 + 4);
        assert_eq!(counts.word_errors, 1 + 1 + 1);
        assert!((counts.cer() - 10.0 / 30.0).abs() < 1e-9 && (counts.wer() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn text_invented_everywhere_scores_worse_than_nothing() {
        let lines = two_columns();
        let nothing = page_errors(&lines, &[]);
        assert_eq!((nothing.cer(), nothing.wer()), (1.0, 1.0));
        let noise: Vec<Word> = (0..20).map(|i| word("xx", i as f32 * 10.0, 50.0 + i as f32, i as f32 * 10.0 + 8.0, 58.0 + i as f32)).collect();
        assert!(page_errors(&lines, &noise).cer() > nothing.cer());
    }

    #[test]
    fn typographic_variants_fold() {
        assert_eq!(normalise("  “Net”\u{a0}income — ﬁnal’s  "), "\"Net\" income - final's");
    }
}
