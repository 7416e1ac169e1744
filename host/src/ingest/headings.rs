//! An outline made of a document's headings, for PDFs without bookmarks: short blocks set larger
//! than the body text (or bold at body size), each level a heading size, largest first.

use std::collections::{HashMap, HashSet};

use crate::store::{Block, DocumentRecord, OutlineEntry, PageRecord, Store, StoreError};

/// Heading sizes kept as levels (larger sizes first); smaller ones are body text.
const MAX_LEVELS: usize = 3;
/// Most entries an outline made of headings holds.
const MAX_ENTRIES: usize = 2000;
/// How much larger than the body a block's font must be to count as a heading.
const LARGER: f32 = 1.15;

/// Font sizes compared in half points, so that 11.98 and 12.02 are one size.
fn size_key(size: f32) -> u32 {
    (size * 2.0).round().max(0.0) as u32
}

/// Whether `text` reads like a heading: short, one or two lines, with letters, not a sentence
/// that ends in a full stop, not a page number.
fn reads_like_heading(block: &Block, text: &str) -> bool {
    let chars = text.chars().count();
    block.lines.len() <= 2
        && (2..=120).contains(&chars)
        && text.chars().filter(|c| c.is_alphabetic()).count() >= 2
        && !text.trim_end().ends_with('.')
        && text.split_whitespace().count() <= 16
}

/// The headings of `pages` as outline entries, in reading order; empty when the pages have no
/// text or no heading stands out from the body.
pub fn heading_outline(pages: &[&PageRecord]) -> Vec<OutlineEntry> {
    // The body size: the one most characters are set in.
    let mut chars_by_size: HashMap<u32, usize> = HashMap::new();
    for block in pages.iter().flat_map(|p| &p.blocks) {
        *chars_by_size.entry(size_key(block.font_size)).or_default() += block.text().chars().count();
    }
    let Some((&body, _)) = chars_by_size.iter().max_by_key(|(size, n)| (**n, std::cmp::Reverse(**size))) else { return Vec::new() };
    let body_size = body as f32 / 2.0;

    // Candidates, and how many pages each text appears on (running heads repeat on most pages).
    let mut candidates: Vec<(u32, String, u32, bool)> = Vec::new(); // (page, text, size key, larger)
    let mut pages_with: HashMap<String, usize> = HashMap::new();
    for page in pages.iter().copied() {
        let mut on_this_page: HashSet<String> = HashSet::new();
        for block in &page.blocks {
            let text = block.text().split_whitespace().collect::<Vec<_>>().join(" ");
            let larger = block.font_size >= body_size * LARGER;
            let bold_at_body = block.bold && size_key(block.font_size) >= body;
            if (larger || bold_at_body) && reads_like_heading(block, &text) {
                if on_this_page.insert(text.clone()) {
                    *pages_with.entry(text.clone()).or_default() += 1;
                }
                candidates.push((page.number, text, size_key(block.font_size), larger));
            }
        }
    }
    let repeated = |text: &str| pages.len() >= 4 && pages_with.get(text).copied().unwrap_or(0) * 3 > pages.len();
    candidates.retain(|(_, text, _, _)| !repeated(text));

    // Levels: the larger sizes in order, then bold text at body size below them.
    let mut sizes: Vec<u32> = candidates.iter().filter(|c| c.3).map(|c| c.2).collect();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    sizes.dedup();
    sizes.truncate(MAX_LEVELS);
    let level_of =
        |size: u32, larger: bool| -> Option<u32> { if larger { sizes.iter().position(|s| *s == size).map(|i| i as u32) } else { Some(sizes.len() as u32) } };
    let mut out: Vec<OutlineEntry> = Vec::new();
    for (page, text, size, larger) in candidates {
        let Some(level) = level_of(size, larger) else { continue };
        out.push(OutlineEntry { title: text, level, page: Some(page) });
        if out.len() == MAX_ENTRIES {
            break;
        }
    }
    out
}

/// A stored document's outline: its bookmarks, or the outline of its headings. Documents
/// stored before outlines fell back to headings have neither stored; theirs is made from their
/// pages here.
pub fn document_outline(store: &Store, doc: &DocumentRecord) -> Result<Vec<OutlineEntry>, StoreError> {
    let stored = store.outline(doc)?;
    if !stored.is_empty() {
        return Ok(stored);
    }
    let pages = (1..=doc.page_count).map(|n| store.page(doc, n)).collect::<Result<Vec<_>, _>>()?;
    Ok(heading_outline(&pages.iter().collect::<Vec<_>>()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{BoundingBox, Line, Word};

    fn block(text: &str, size: f32, bold: bool) -> Block {
        let bbox = BoundingBox { x0: 0.0, y0: 0.0, x1: 100.0, y1: size };
        let words = text.split_whitespace().map(|w| Word { text: w.to_string(), bbox }).collect();
        Block { bbox, font_size: size, bold, lines: vec![Line { bbox, words }] }
    }

    fn page(number: u32, blocks: Vec<Block>) -> PageRecord {
        PageRecord { number, width: 600.0, height: 800.0, has_text_layer: true, blocks }
    }

    #[test]
    fn larger_and_bold_short_blocks_become_levels_and_running_heads_do_not() {
        let body = "The committee met twice and reviewed the accounts of the year in detail with the auditors present";
        let pages: Vec<PageRecord> = (1..=6)
            .map(|n| {
                let mut blocks = vec![block("Annual Report 2023", 9.0, false), block(body, 10.0, false), block(body, 10.0, false)];
                match n {
                    1 => blocks.insert(0, block("Part One: Results", 20.0, true)),
                    2 => blocks.insert(0, block("Revenue by segment", 14.0, false)),
                    3 => blocks.insert(0, block("Notes on costs", 10.0, true)),
                    5 => blocks.insert(0, block("Part Two: Outlook", 20.0, true)),
                    _ => {}
                }
                // A running head set large on every page is not a heading.
                blocks.insert(0, block("ACME CORPORATION", 16.0, true));
                page(n, blocks)
            })
            .collect();
        let outline = heading_outline(&pages.iter().collect::<Vec<_>>());
        let got: Vec<(&str, u32, Option<u32>)> = outline.iter().map(|e| (e.title.as_str(), e.level, e.page)).collect();
        assert_eq!(
            got,
            [("Part One: Results", 0, Some(1)), ("Revenue by segment", 1, Some(2)), ("Notes on costs", 2, Some(3)), ("Part Two: Outlook", 0, Some(5))]
        );
    }

    #[test]
    fn plain_text_has_no_outline() {
        let pages = [page(1, vec![block("Just a sentence of body text here.", 10.0, false)])];
        assert!(heading_outline(&pages.iter().collect::<Vec<_>>()).is_empty());
        assert!(heading_outline(&[]).is_empty());
    }
}
