//! The snippet shown with a hit, and the block a citation is drawn on: the page block that
//! shares the most words with the question (or the cited quote or answer).

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
/// equals); none when no block shares a word with it, so that a citation is never drawn on a
/// block that says nothing of what it supports.
pub fn best_block(page: &PageRecord, text: &str) -> Option<usize> {
    let terms: HashSet<String> = words(text).filter(|w| !STOP_WORDS.contains(&w.as_str())).collect();
    let mut best: Option<(usize, usize)> = None;
    for (i, b) in page.blocks.iter().enumerate() {
        let score = words(&b.text()).filter(|w| terms.contains(w)).collect::<HashSet<_>>().len();
        if score > 0 && best.is_none_or(|(_, s)| score > s) {
            best = Some((i, score));
        }
    }
    best.map(|(i, _)| i)
}

/// The block of `page` that best matches `question`, trimmed to a few lines; the page's first
/// words when no block shares a word with the question (a search hit still shows what it is).
pub fn best_snippet(page: &PageRecord, question: &str) -> String {
    let block = best_block(page, question).or_else(|| page.blocks.iter().position(|b| !b.text().trim().is_empty()));
    block.map(|i| trim_snippet(&page.blocks[i].text())).unwrap_or_default()
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
