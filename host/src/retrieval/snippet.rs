//! The snippet shown with a hit: the page block that shares the most words with the question.

use std::collections::HashSet;

use crate::store::PageRecord;

/// Longest snippet, in characters.
const SNIPPET_CHARS: usize = 240;

const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "did", "do", "does", "for", "from", "has", "have", "how", "in", "is", "it", "its", "of", "on", "or",
    "that", "the", "their", "this", "to", "was", "were", "what", "when", "which", "who", "why", "with",
];

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase)
}

/// The index of the block of `page` that shares the most words with `text` (the first of
/// equals), if the page has a non-empty block.
pub fn best_block(page: &PageRecord, text: &str) -> Option<usize> {
    let terms: HashSet<String> = words(text).filter(|w| !STOP_WORDS.contains(&w.as_str())).collect();
    let mut best: Option<(usize, usize)> = None;
    for (i, b) in page.blocks.iter().enumerate() {
        let block_text = b.text();
        if block_text.trim().is_empty() {
            continue;
        }
        let score = words(&block_text).filter(|w| terms.contains(w)).collect::<HashSet<_>>().len();
        if best.is_none_or(|(_, s)| score > s) {
            best = Some((i, score));
        }
    }
    best.map(|(i, _)| i)
}

/// The block of `page` that best matches `question`, trimmed to a few lines.
pub fn best_snippet(page: &PageRecord, question: &str) -> String {
    best_block(page, question).map(|i| trim_snippet(&page.blocks[i].text())).unwrap_or_default()
}

/// A block's text on one line, cut to a snippet's length.
pub fn trim_snippet(best: &str) -> String {
    let flat = best.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= SNIPPET_CHARS {
        flat
    } else {
        let mut s: String = flat.chars().take(SNIPPET_CHARS - 1).collect();
        s.push('…');
        s
    }
}
