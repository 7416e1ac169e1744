//! Figure, picture and table regions of a page, from what PDFium says is drawn on it (image,
//! path and form objects) and from the page's text blocks (a grid of them reads as a table),
//! each with the caption beside it ("Figure 3: ...", "Table 2 ...").

use crate::store::{Block, BoundingBox, RegionKind, RegionRecord};

/// What kind of object PDFium drew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drawn {
    Image,
    /// Vector graphics: lines, curves, fills.
    Path,
    /// A form XObject (charts are often drawn in one).
    Form,
}

/// The most drawn objects looked at per page (the largest first): a page of a million paths
/// must not stall the reader.
pub const MAX_DRAWN: usize = 2000;
/// The most regions kept per page.
const MAX_REGIONS: usize = 64;
/// Objects closer than this (points) belong to one figure.
const JOIN_GAP: f32 = 4.0;
/// How far a caption may sit from its region (points).
const CAPTION_GAP: f32 = 48.0;

fn area(b: &BoundingBox) -> f32 {
    b.width().max(0.0) * b.height().max(0.0)
}

fn near(a: &BoundingBox, b: &BoundingBox, gap: f32) -> bool {
    a.x0 - gap <= b.x1 && b.x0 - gap <= a.x1 && a.y0 - gap <= b.y1 && b.y0 - gap <= a.y1
}

fn overlap(a: &BoundingBox, b: &BoundingBox) -> f32 {
    a.horizontal_overlap(b) * a.vertical_overlap(b)
}

/// Unions of boxes that touch within `gap`, with how many boxes each holds.
fn clusters(boxes: &[BoundingBox], gap: f32) -> Vec<(BoundingBox, usize)> {
    let mut parent: Vec<usize> = (0..boxes.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for i in 0..boxes.len() {
        for j in i + 1..boxes.len() {
            if near(&boxes[i], &boxes[j], gap) {
                let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                parent[a] = b;
            }
        }
    }
    let mut out: Vec<(usize, BoundingBox, usize)> = Vec::new();
    for (i, bbox) in boxes.iter().enumerate() {
        let r = root(&mut parent, i);
        match out.iter_mut().find(|(id, _, _)| *id == r) {
            Some((_, b, n)) => {
                *b = b.union(bbox);
                *n += 1;
            }
            None => out.push((r, *bbox, 1)),
        }
    }
    out.into_iter().map(|(_, b, n)| (b, n)).collect()
}

/// Rows of blocks (indices), top to bottom: blocks that share most of their height.
fn rows(blocks: &[Block]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..blocks.len()).filter(|&i| blocks[i].bbox.height() > 0.0).collect();
    order.sort_by(|&a, &b| blocks[a].bbox.y0.total_cmp(&blocks[b].bbox.y0));
    let mut rows: Vec<(BoundingBox, Vec<usize>)> = Vec::new();
    for i in order {
        let b = &blocks[i].bbox;
        let joins = rows.last().is_some_and(|(r, _)| r.vertical_overlap(b) >= 0.5 * r.height().min(b.height()));
        match rows.last_mut() {
            Some((r, members)) if joins => {
                *r = r.union(b);
                members.push(i);
            }
            _ => rows.push((*b, vec![i])),
        }
    }
    rows.into_iter()
        .map(|(_, mut m)| {
            m.sort_by(|&a, &b| blocks[a].bbox.x0.total_cmp(&blocks[b].bbox.x0));
            m
        })
        .collect()
}

/// Whether two rows share at least two column edges (a block's left or right side).
fn aligned(blocks: &[Block], a: &[usize], b: &[usize]) -> bool {
    let edges = |row: &[usize]| row.iter().flat_map(|&i| [blocks[i].bbox.x0, blocks[i].bbox.x1]).collect::<Vec<f32>>();
    let (ea, eb) = (edges(a), edges(b));
    ea.iter().filter(|x| eb.iter().any(|y| (*x - y).abs() <= 6.0)).count() >= 2
}

/// Whether a block reads as a table cell rather than a paragraph: a few short lines. Side by
/// side paragraphs (two columns of body text) line up too, and are not a table.
fn cell_like(block: &Block) -> bool {
    let words: usize = block.lines.iter().map(|l| l.words.len()).sum();
    block.lines.len() <= 3 && words <= 16
}

/// Runs of three or more rows of two or more cell-like blocks whose columns line up: tables.
fn block_grids(blocks: &[Block]) -> Vec<(BoundingBox, Vec<u32>)> {
    let rows = rows(blocks);
    let is_row = |r: &[usize]| r.len() >= 2 && r.iter().all(|&i| cell_like(&blocks[i]));
    let mut out = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        let mut j = i;
        while j < rows.len() && is_row(&rows[j]) && (j == i || aligned(blocks, &rows[j - 1], &rows[j])) {
            j += 1;
        }
        if j - i >= 3 {
            let members: Vec<usize> = rows[i..j].iter().flatten().copied().collect();
            let bbox = members.iter().skip(1).fold(blocks[members[0]].bbox, |acc, &m| acc.union(&blocks[m].bbox));
            out.push((bbox, members.iter().map(|&m| m as u32).collect()));
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// Whether a block reads as a caption: "Figure 2", "Fig. 3", "Table 1", "Chart 4", "Exhibit 5".
fn is_caption(text: &str) -> bool {
    let lower = text.trim_start().to_lowercase();
    ["figure", "fig.", "fig ", "table", "chart", "exhibit", "graph", "diagram", "plate"].iter().any(|w| {
        lower.strip_prefix(w).is_some_and(|rest| {
            let number: String = rest.trim_start().chars().take_while(|c| c.is_alphanumeric()).collect();
            number.starts_with(|c: char| c.is_ascii_digit()) || (!number.is_empty() && number.chars().all(|c| "ivxlc".contains(c)))
        })
    })
}

/// The caption beside `region`: the nearest caption-like block above or below it that it
/// overlaps horizontally.
fn caption(region: &BoundingBox, blocks: &[Block]) -> String {
    let mut best: Option<(f32, String)> = None;
    for b in blocks {
        if b.bbox.horizontal_overlap(region) <= 0.0 || overlap(&b.bbox, region) > 0.5 * area(&b.bbox) {
            continue;
        }
        let text = b.text();
        if !is_caption(&text) {
            continue;
        }
        let gap = if b.bbox.y0 >= region.y1 - 4.0 { b.bbox.y0 - region.y1 } else { region.y0 - b.bbox.y1 };
        if (-4.0..=CAPTION_GAP).contains(&gap) && best.as_ref().is_none_or(|(g, _)| gap.abs() < *g) {
            best = Some((gap.abs(), text.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(300).collect()));
        }
    }
    best.map(|(_, t)| t).unwrap_or_default()
}

/// The regions of a page of `width` x `height` points.
pub fn find_regions(drawn: &[(Drawn, BoundingBox)], blocks: &[Block], width: f32, height: f32) -> Vec<RegionRecord> {
    let page = (width * height).max(1.0);
    // A box over (nearly) the whole page is its background or its scan, not a region of it.
    let usable = |b: &BoundingBox| area(b) < 0.9 * page && b.is_inside(width + 1.0, height + 1.0);
    let mut found: Vec<(RegionKind, BoundingBox)> = Vec::new();

    let images: Vec<BoundingBox> = drawn.iter().filter(|(k, b)| *k == Drawn::Image && usable(b)).map(|(_, b)| *b).collect();
    for (b, _) in clusters(&images, 1.0) {
        if b.width() >= 36.0 && b.height() >= 36.0 && area(&b) >= 0.01 * page && area(&b) < 0.9 * page {
            found.push((RegionKind::Image, b));
        }
    }

    let tables = block_grids(blocks);
    let vector: Vec<BoundingBox> = drawn.iter().filter(|(k, b)| *k != Drawn::Image && usable(b)).map(|(_, b)| *b).collect();
    for (b, n) in clusters(&vector, JOIN_GAP) {
        let big = b.width() >= 48.0 && b.height() >= 36.0 && area(&b) >= 0.02 * page && area(&b) < 0.9 * page;
        // The rules of a table are paths too: they belong to the table found from its text.
        let ruled_table = tables.iter().any(|(t, _)| overlap(t, &b) >= 0.5 * area(&b).min(area(t)));
        if big && n >= 2 && !ruled_table {
            found.push((RegionKind::Figure, b));
        }
    }
    found.extend(tables.iter().map(|(b, _)| (RegionKind::Table, *b)));

    found.sort_by(|a, b| a.1.y0.total_cmp(&b.1.y0).then(a.1.x0.total_cmp(&b.1.x0)));
    found.truncate(MAX_REGIONS);
    found
        .into_iter()
        .map(|(kind, bbox)| {
            let inside: Vec<u32> =
                blocks.iter().enumerate().filter(|(_, b)| overlap(&b.bbox, &bbox) >= 0.5 * area(&b.bbox).max(0.01)).map(|(i, _)| i as u32).collect();
            let caption = caption(&bbox, blocks);
            // A ruled table whose cells did not come out as a grid of blocks is drawn paths
            // like a chart; its caption says which it is.
            let kind = if kind == RegionKind::Figure && caption.to_lowercase().starts_with("table") { RegionKind::Table } else { kind };
            RegionRecord { kind, caption, bbox, blocks: inside }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Line, Word};

    fn bx(x0: f32, y0: f32, x1: f32, y1: f32) -> BoundingBox {
        BoundingBox { x0, y0, x1, y1 }
    }

    fn block(text: &str, b: BoundingBox) -> Block {
        Block {
            bbox: b,
            font_size: 10.0,
            bold: false,
            lines: vec![Line { bbox: b, words: text.split(' ').map(|w| Word { text: w.into(), bbox: b }).collect() }],
        }
    }

    #[test]
    fn a_chart_of_paths_is_a_figure_with_the_caption_below_it() {
        let mut drawn = vec![(Drawn::Path, bx(100.0, 300.0, 400.0, 302.0)), (Drawn::Path, bx(100.0, 100.0, 102.0, 302.0))];
        drawn.extend((0..5).map(|i| (Drawn::Path, bx(120.0 + 50.0 * i as f32, 200.0, 150.0 + 50.0 * i as f32, 300.0))));
        // A page background and a stray rule far away are not regions.
        drawn.push((Drawn::Path, bx(0.0, 0.0, 612.0, 792.0)));
        drawn.push((Drawn::Path, bx(50.0, 700.0, 560.0, 701.0)));
        let blocks = vec![block("Figure 2: Revenue by year", bx(110.0, 310.0, 380.0, 322.0)), block("Body text here", bx(50.0, 400.0, 560.0, 500.0))];
        let regions = find_regions(&drawn, &blocks, 612.0, 792.0);
        assert_eq!(regions.len(), 1, "{regions:?}");
        assert_eq!(regions[0].kind, RegionKind::Figure);
        assert_eq!(regions[0].bbox, bx(100.0, 100.0, 400.0, 302.0));
        assert_eq!(regions[0].caption, "Figure 2: Revenue by year");
    }

    #[test]
    fn drawn_rules_captioned_as_a_table_are_a_table() {
        let drawn: Vec<(Drawn, BoundingBox)> =
            vec![(Drawn::Path, bx(60.0, 100.0, 400.0, 101.0)), (Drawn::Path, bx(60.0, 100.0, 61.0, 200.0)), (Drawn::Path, bx(60.0, 199.0, 400.0, 200.0))];
        let blocks = vec![block("Table 3: Statistics of the datasets", bx(60.0, 80.0, 300.0, 92.0))];
        let regions = find_regions(&drawn, &blocks, 612.0, 792.0);
        assert_eq!(regions.iter().map(|r| r.kind).collect::<Vec<_>>(), [RegionKind::Table]);
    }

    #[test]
    fn two_columns_of_paragraphs_are_not_a_table() {
        let para = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen";
        let blocks: Vec<Block> = (0..4)
            .flat_map(|r| {
                let y = 100.0 + 120.0 * r as f32;
                [block(para, bx(54.0, y, 290.0, y + 100.0)), block(para, bx(318.0, y, 558.0, y + 100.0))]
            })
            .collect();
        assert!(find_regions(&[], &blocks, 612.0, 792.0).is_empty());
    }

    #[test]
    fn aligned_rows_of_blocks_are_a_table_and_its_rules_do_not_make_a_figure() {
        let mut blocks = vec![block("Table 1 Results", bx(60.0, 80.0, 200.0, 92.0))];
        for r in 0..4 {
            let y = 100.0 + 20.0 * r as f32;
            blocks.push(block("name", bx(60.0, y, 120.0, y + 12.0)));
            blocks.push(block("12.5", bx(200.0, y, 240.0, y + 12.0)));
            blocks.push(block("7 %", bx(300.0, y, 330.0, y + 12.0)));
        }
        let mut rules: Vec<(Drawn, BoundingBox)> = (0..5).map(|r| (Drawn::Path, bx(55.0, 98.0 + 20.0 * r as f32, 340.0, 99.0 + 20.0 * r as f32))).collect();
        rules.extend([(Drawn::Path, bx(55.0, 98.0, 56.0, 180.0)), (Drawn::Path, bx(340.0, 98.0, 341.0, 180.0))]);
        let regions = find_regions(&rules, &blocks, 612.0, 792.0);
        assert_eq!(regions.iter().map(|r| r.kind).collect::<Vec<_>>(), [RegionKind::Table], "{regions:?}");
        assert_eq!(regions[0].blocks, (1..13).collect::<Vec<u32>>());
        assert_eq!(regions[0].caption, "Table 1 Results");
    }

    #[test]
    fn pictures_big_enough_are_images_and_tiny_ones_or_full_page_scans_are_not() {
        let drawn =
            vec![(Drawn::Image, bx(300.0, 400.0, 500.0, 550.0)), (Drawn::Image, bx(10.0, 10.0, 30.0, 30.0)), (Drawn::Image, bx(0.0, 0.0, 612.0, 792.0))];
        let regions = find_regions(&drawn, &[], 612.0, 792.0);
        assert_eq!(regions.len(), 1, "{regions:?}");
        assert_eq!((regions[0].kind, regions[0].bbox), (RegionKind::Image, bx(300.0, 400.0, 500.0, 550.0)));
        assert!(regions[0].caption.is_empty());
    }

    #[test]
    fn captions_are_numbered_labels_not_prose_that_starts_alike() {
        assert!(is_caption("Figure 3: a chart") && is_caption("Fig. 2") && is_caption("TABLE IV. Costs") && is_caption("Exhibit 10"));
        assert!(!is_caption("Figures show growth") && !is_caption("Table of contents") && !is_caption("Charting the course"));
        assert!(!is_caption("Table illustrates the costs"));
    }
}
