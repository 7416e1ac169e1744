//! A page's chunks (the paper's §3.1 and §4.3): text chunks of at most `chunk_tokens` that
//! overlap by `overlap`, and one chunk per figure or table region with its caption, the text
//! inside it and the nearest text beside it.

use stage_kit::v2::types::{PageContent, Region};

/// What a chunk holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Modality {
    Text,
    Table,
    Figure,
}

impl Modality {
    /// The name kept in the chunk's `modality` field.
    pub fn name(self) -> &'static str {
        match self {
            Modality::Text => "text",
            Modality::Table => "table",
            Modality::Figure => "figure",
        }
    }
}

/// One chunk of a page, before it becomes an artifact.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    pub modality: Modality,
    /// Blocks of the page it covers, ascending.
    pub blocks: Vec<u32>,
    /// The region's box, for a figure or table.
    pub bbox: Option<(f32, f32, f32, f32)>,
    pub caption: String,
    /// What the generator reads.
    pub content: String,
    /// Its tokens, by the generator's count (estimated per word for a piece of a block).
    pub tokens: u32,
}

/// A word of the page's text, with the block it comes from and its share of that block's tokens.
struct Word<'a> {
    text: &'a str,
    block: u32,
    tokens: f32,
}

/// Text chunks over the page's blocks outside `skip`, in reading order: greedy windows of at
/// most `chunk_tokens`, each starting `overlap` tokens before the previous one ended. A block
/// longer than the limit is cut between words; a word's tokens are its block's count shared
/// evenly by its words (one count per block).
pub fn text_chunks(page: &PageContent, skip: &[u32], count: impl Fn(&str) -> u32, chunk_tokens: u32, overlap: u32) -> Vec<Chunk> {
    let mut words: Vec<Word> = Vec::new();
    for (i, block) in page.blocks.iter().enumerate() {
        let i = i as u32;
        if skip.contains(&i) {
            continue;
        }
        let ws: Vec<&str> = block.text.split_whitespace().collect();
        if ws.is_empty() {
            continue;
        }
        let each = count(&block.text).max(1) as f32 / ws.len() as f32;
        words.extend(ws.into_iter().map(|text| Word { text, block: i, tokens: each }));
    }
    let (limit, overlap) = (chunk_tokens.max(1) as f32, overlap.min(chunk_tokens / 2) as f32);
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < words.len() {
        let mut end = start;
        let mut sum = 0.0;
        while end < words.len() && (end == start || sum + words[end].tokens <= limit) {
            sum += words[end].tokens;
            end += 1;
        }
        chunks.push(text_chunk(&words[start..end], sum));
        if end == words.len() {
            break;
        }
        // The next chunk opens with the last `overlap` tokens of this one, and always moves on.
        let mut next = end;
        let mut tail = 0.0;
        while next > start + 1 && tail + words[next - 1].tokens <= overlap {
            tail += words[next - 1].tokens;
            next -= 1;
        }
        start = next;
    }
    chunks
}

fn text_chunk(words: &[Word], tokens: f32) -> Chunk {
    let mut content = String::new();
    let mut blocks: Vec<u32> = Vec::new();
    for w in words {
        if blocks.last() != Some(&w.block) {
            if !blocks.is_empty() {
                content.push('\n');
            }
            blocks.push(w.block);
        } else {
            content.push(' ');
        }
        content.push_str(w.text);
    }
    Chunk { modality: Modality::Text, blocks, bbox: None, caption: String::new(), content, tokens: tokens.round() as u32 }
}

/// Region settings: how much nearby text a region keeps, when a region is noise, how many
/// regions a page may make chunks of.
#[derive(Debug, Clone, Copy)]
pub struct RegionRules {
    pub nearby_words: u32,
    /// Share of the page's area under which a region with neither caption nor text is dropped.
    pub min_region_area: f32,
    pub max_regions: usize,
}

/// One chunk per figure, table or image region (at most `max_regions`, the largest first, kept
/// in reading order): its caption, the text inside it and the nearest text block before it (or
/// after, when none comes before), cut to `nearby_words` words. A region with no caption and no
/// text inside that covers less than `min_region_area` of the page is noise (the paper filters
/// with CLIP instead). Also the blocks the kept regions cover, which stay out of the text chunks.
pub fn region_chunks(page: &PageContent, regions: &[Region], count: impl Fn(&str) -> u32, rules: RegionRules) -> (Vec<Chunk>, Vec<u32>) {
    let area = (page.width * page.height).max(1.0);
    let in_any: Vec<u32> = regions.iter().flat_map(|r| r.blocks.iter().copied()).collect();
    let inside = |r: &Region| -> String {
        r.blocks.iter().filter_map(|&b| page.blocks.get(b as usize)).map(|b| b.text.trim()).filter(|t| !t.is_empty()).collect::<Vec<_>>().join("\n")
    };
    let mut kept: Vec<(f32, &Region)> = regions
        .iter()
        .filter(|r| {
            let (x0, y0, x1, y1) = r.bbox;
            let share = ((x1 - x0).max(0.0) * (y1 - y0).max(0.0)) / area;
            !(r.caption.trim().is_empty() && inside(r).is_empty() && share < rules.min_region_area)
        })
        .map(|r| ((r.bbox.2 - r.bbox.0) * (r.bbox.3 - r.bbox.1), r))
        .collect();
    kept.sort_by(|a, b| b.0.total_cmp(&a.0));
    kept.truncate(rules.max_regions);
    kept.sort_by(|a, b| a.1.bbox.1.total_cmp(&b.1.bbox.1));
    let mut covered = Vec::new();
    let chunks = kept
        .into_iter()
        .map(|(_, r)| {
            let mut blocks: Vec<u32> = r.blocks.iter().copied().filter(|&b| (b as usize) < page.blocks.len()).collect();
            blocks.sort_unstable();
            blocks.dedup();
            covered.extend(blocks.iter().copied());
            let nearby = nearby_text(page, r, &in_any, rules.nearby_words);
            let caption = r.caption.trim().to_string();
            let content = [caption.as_str(), inside(r).as_str(), nearby.as_str()].into_iter().filter(|t| !t.is_empty()).collect::<Vec<_>>().join("\n");
            let modality = if r.kind == "table" { Modality::Table } else { Modality::Figure };
            // The host refuses a box off the page; detected regions may overhang it a little.
            let (x0, y0, x1, y1) = r.bbox;
            let (cx, cy) = (|v: f32| v.clamp(0.0, page.width), |v: f32| v.clamp(0.0, page.height));
            let bbox = (cx(x0), cy(y0), cx(x1), cy(y1));
            let bbox = (bbox.0 <= bbox.2 && bbox.1 <= bbox.3).then_some(bbox);
            Chunk { modality, tokens: count(&content), blocks, bbox, caption, content }
        })
        .collect();
    (chunks, covered)
}

/// The text of the closest block outside every region that ends above the region's top (or,
/// when none does, starts below its bottom), cut to `words` words.
fn nearby_text(page: &PageContent, r: &Region, in_any: &[u32], words: u32) -> String {
    let outside = || page.blocks.iter().enumerate().filter(|(i, b)| !in_any.contains(&(*i as u32)) && !b.text.trim().is_empty());
    let before = outside().filter(|(_, b)| b.bbox.3 <= r.bbox.1).max_by(|a, b| a.1.bbox.3.total_cmp(&b.1.bbox.3));
    let after = || outside().filter(|(_, b)| b.bbox.1 >= r.bbox.3).min_by(|a, b| a.1.bbox.1.total_cmp(&b.1.bbox.1));
    match before.or_else(after) {
        Some((_, b)) => b.text.split_whitespace().take(words as usize).collect::<Vec<_>>().join(" "),
        None => String::new(),
    }
}
