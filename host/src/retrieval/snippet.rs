//! The snippet shown with a hit: the page block that shares the most words with the question.

use std::collections::HashSet;

use crate::store::PageRecord;

/// Longest snippet, in characters.
const SNIPPET_CHARS: usize = 240;

const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "did", "do", "does", "for", "from", "has", "have", "how", "in", "is",
    "it", "its", "of", "on", "or", "that", "the", "their", "this", "to", "was", "were", "what", "when", "which", "who",
    "why", "with",
];

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase)
}

/// The block of `page` that best matches `question`, trimmed to a few lines.
pub fn best_snippet(page: &PageRecord, question: &str) -> String {
    let terms: HashSet<String> = words(question).filter(|w| !STOP_WORDS.contains(&w.as_str())).collect();
    let best = page
        .blocks
        .iter()
        .map(|b| {
            let text = b.text();
            let score = words(&text).filter(|w| terms.contains(w)).collect::<HashSet<_>>().len();
            (score, text)
        })
        .filter(|(_, text)| !text.trim().is_empty())
        .max_by_key(|(score, _)| *score)
        .map(|(_, text)| text)
        .unwrap_or_default();
    let flat = best.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= SNIPPET_CHARS {
        flat
    } else {
        let mut s: String = flat.chars().take(SNIPPET_CHARS - 1).collect();
        s.push('…');
        s
    }
}
