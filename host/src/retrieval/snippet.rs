//! The snippet shown with a hit, and the block a citation is drawn on: the page block that
//! shares the most words with the question (or the cited quote or answer).

use std::collections::HashSet;

use crate::store::{Block, BoundingBox, PageRecord};

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

/// Most word boxes one citation highlights.
const MAX_WORD_BOXES: usize = 48;

/// The boxes of the words of `blocks` that `text` also has (stop words aside), one box per run
/// of such words side by side on a line: where on the page the cited words are.
pub fn matching_word_boxes(blocks: &[&Block], text: &str) -> Vec<BoundingBox> {
    let terms: HashSet<String> = words(text).filter(|w| !STOP_WORDS.contains(&w.as_str())).collect();
    let mut out = Vec::new();
    for line in blocks.iter().flat_map(|b| &b.lines) {
        let mut run: Option<BoundingBox> = None;
        for word in &line.words {
            if words(&word.text).any(|w| terms.contains(&w)) {
                run = Some(run.map_or(word.bbox, |r| r.union(&word.bbox)));
            } else if let Some(r) = run.take() {
                out.push(r);
            }
        }
        out.extend(run);
        if out.len() >= MAX_WORD_BOXES {
            out.truncate(MAX_WORD_BOXES);
            break;
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Line, Word};

    fn line(y: f32, words: &[&str]) -> Line {
        let words: Vec<Word> = words
            .iter()
            .enumerate()
            .map(|(i, w)| Word { text: w.to_string(), bbox: BoundingBox { x0: 10.0 * i as f32, y0: y, x1: 10.0 * i as f32 + 8.0, y1: y + 5.0 } })
            .collect();
        let bbox = words.iter().skip(1).fold(words[0].bbox, |b, w| b.union(&w.bbox));
        Line { bbox, words }
    }

    #[test]
    fn the_cited_words_are_boxed_run_by_run_and_nothing_else() {
        let lines = vec![line(0.0, &["Fully", "59%", "of", "seniors", "go", "online"]), line(10.0, &["and", "47%", "have", "broadband"])];
        let bbox = lines[0].bbox.union(&lines[1].bbox);
        let block = Block { bbox, font_size: 10.0, bold: false, lines };
        let boxes = matching_word_boxes(&[&block], "59% of seniors go online [3]");
        // "59%" and "of" (a stop word) break the run: 59% alone, then seniors go online.
        assert_eq!(boxes.len(), 2, "{boxes:?}");
        assert_eq!((boxes[0].x0, boxes[0].x1), (10.0, 18.0));
        assert_eq!((boxes[1].x0, boxes[1].x1, boxes[1].y0), (30.0, 58.0, 0.0));
        assert!(matching_word_boxes(&[&block], "nothing like it").is_empty());
        assert_eq!(best_block(&PageRecord { number: 1, width: 100.0, height: 100.0, has_text_layer: true, blocks: vec![block] }, "zebra"), None);
    }
}
