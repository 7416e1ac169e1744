//! Page layout: characters into words, words into lines, lines into blocks, blocks into
//! reading order. Pure geometry, independent of PDFium, so it is unit-tested on its own.

use crate::store::{Block, BoundingBox, Line, Word};

/// One character as the PDF parser reports it, box already in top-left page coordinates.
#[derive(Debug, Clone)]
pub struct Glyph {
    pub ch: char,
    pub bbox: BoundingBox,
    pub font_size: f32,
    pub bold: bool,
    /// Inserted by the parser (guessed spaces, line breaks), not drawn on the page.
    pub generated: bool,
    /// Rotation of the glyph in degrees as PDFium reports it (270 for text read upwards).
    pub angle: f32,
}

/// The way a run of text reads on the displayed page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Right,
    Up,
    Down,
    Left,
}

impl Direction {
    fn of(angle: f32) -> Direction {
        match angle.rem_euclid(360.0) {
            a if !(45.0..315.0).contains(&a) => Direction::Right,
            a if a < 135.0 => Direction::Down,
            a if a < 225.0 => Direction::Left,
            _ => Direction::Up,
        }
    }

    /// The box in a frame where this text reads left to right and lines go downwards, so one
    /// set of rules groups text of every direction.
    fn frame(self, b: &BoundingBox) -> BoundingBox {
        match self {
            Direction::Right => *b,
            Direction::Up => BoundingBox { x0: -b.y1, x1: -b.y0, y0: b.x0, y1: b.x1 },
            Direction::Down => BoundingBox { x0: b.y0, x1: b.y1, y0: -b.x1, y1: -b.x0 },
            Direction::Left => BoundingBox { x0: -b.x1, x1: -b.x0, y0: -b.y1, y1: -b.y0 },
        }
    }
}

/// A word with the style of its characters, before lines are formed.
#[derive(Debug, Clone)]
struct StyledWord {
    word: Word,
    direction: Direction,
    /// The word's box in its reading frame.
    frame: BoundingBox,
    font_size: f32,
    bold: bool,
    /// The parser said a line break came right before this word.
    breaks_line: bool,
}

/// A line with the dominant style of its words.
#[derive(Debug, Clone)]
struct StyledLine {
    line: Line,
    direction: Direction,
    frame: BoundingBox,
    font_size: f32,
    bold: bool,
}

/// Lays out a page's glyphs (in content-stream order) as blocks in reading order.
pub fn layout_page(glyphs: &[Glyph]) -> Vec<Block> {
    let words = group_words(glyphs);
    let lines = group_lines(words);
    let blocks = group_blocks(lines);
    reading_order(blocks)
}

fn group_words(glyphs: &[Glyph]) -> Vec<StyledWord> {
    let mut words = Vec::new();
    let mut current: Option<StyledWord> = None;
    let mut pending_break = false;
    let mut last: Option<&Glyph> = None;
    for g in glyphs {
        if g.ch.is_whitespace() || g.ch.is_control() {
            if g.ch == '\n' || g.ch == '\r' {
                pending_break = true;
            }
            words.extend(current.take());
            continue;
        }
        if g.generated && g.bbox.width() <= 0.0 {
            continue;
        }
        if let (Some(_), Some(prev)) = (current.as_ref(), last)
            && starts_new_word(prev, g)
        {
            words.extend(current.take());
        }
        let direction = Direction::of(g.angle);
        match current.as_mut() {
            Some(word) => {
                word.word.text.push(g.ch);
                word.word.bbox = word.word.bbox.union(&g.bbox);
                word.frame = word.frame.union(&direction.frame(&g.bbox));
                word.font_size = word.font_size.max(g.font_size);
                word.bold &= g.bold;
            }
            None => {
                current = Some(StyledWord {
                    word: Word { text: g.ch.to_string(), bbox: g.bbox },
                    direction,
                    frame: direction.frame(&g.bbox),
                    font_size: g.font_size,
                    bold: g.bold,
                    breaks_line: std::mem::take(&mut pending_break),
                });
            }
        }
        last = Some(g);
    }
    words.extend(current);
    words
}

/// Two adjacent glyphs belong to different words when the parser put no space between them
/// but the page does: a gap, a step back, another baseline or another direction. Ligatures
/// ("fl") come as several glyphs sharing one box, which is no step back.
fn starts_new_word(prev: &Glyph, next: &Glyph) -> bool {
    let direction = Direction::of(prev.angle);
    if Direction::of(next.angle) != direction {
        return true;
    }
    let (p, n) = (direction.frame(&prev.bbox), direction.frame(&next.bbox));
    let size = prev.font_size.max(next.font_size).max(p.height()).max(1.0);
    let gap = n.x0 - p.x1;
    let same_line = p.vertical_overlap(&n) > 0.5 * p.height().min(n.height());
    !same_line || gap > 0.25 * size || n.x0 < p.x0 - 0.5 * size
}

/// The font size, boldness and character count of each run of a line or block.
type Styles = Vec<(f32, bool, usize)>;

/// A line being built: the line, its direction, its frame box, the frame box of its last word,
/// and its styles.
type OpenLine = (Line, Direction, BoundingBox, BoundingBox, Styles);

fn group_lines(words: Vec<StyledWord>) -> Vec<StyledLine> {
    let mut lines: Vec<OpenLine> = Vec::new();
    for w in words {
        let len = w.word.text.chars().count();
        let joins = match lines.last() {
            Some((_, direction, _, last, _)) => {
                let size = w.font_size.max(w.frame.height()).max(1.0);
                let overlap = last.vertical_overlap(&w.frame) > 0.5 * last.height().min(w.frame.height());
                let gap = w.frame.x0 - last.x1;
                // A wide gap on one baseline separates table cells and columns.
                !w.breaks_line && *direction == w.direction && overlap && w.frame.x0 > last.x0 && gap < 2.5 * size
            }
            None => false,
        };
        if joins {
            if let Some((line, _, frame, last, styles)) = lines.last_mut() {
                line.bbox = line.bbox.union(&w.word.bbox);
                *frame = frame.union(&w.frame);
                *last = w.frame;
                line.words.push(w.word);
                styles.push((w.font_size, w.bold, len));
            }
        } else {
            lines.push((Line { bbox: w.word.bbox, words: vec![w.word] }, w.direction, w.frame, w.frame, vec![(w.font_size, w.bold, len)]));
        }
    }
    lines
        .into_iter()
        .map(|(line, direction, frame, _, styles)| {
            let (font_size, bold) = dominant_style(&styles);
            StyledLine { line, direction, frame, font_size, bold }
        })
        .collect()
}

/// The style that covers the most characters.
fn dominant_style(styles: &[(f32, bool, usize)]) -> (f32, bool) {
    let mut best = (0.0f32, false);
    let mut best_count = 0usize;
    for &(size, bold, _) in styles {
        let count: usize = styles.iter().filter(|(s, b, _)| (s - size).abs() < 0.5 && *b == bold).map(|(_, _, n)| n).sum();
        if count > best_count {
            best = (size, bold);
            best_count = count;
        }
    }
    best
}

fn group_blocks(lines: Vec<StyledLine>) -> Vec<Block> {
    // (block, the last line with its direction and frame, styles)
    let mut blocks: Vec<(Block, StyledLine, Styles)> = Vec::new();
    for l in lines {
        let len = l.line.words.iter().map(|w| w.text.chars().count()).sum();
        let joins = match blocks.last() {
            Some((block, prev, _)) => continues_block(block, prev, &l),
            None => false,
        };
        if joins {
            if let Some((block, prev, styles)) = blocks.last_mut() {
                block.bbox = block.bbox.union(&l.line.bbox);
                block.lines.push(l.line.clone());
                styles.push((l.font_size, l.bold, len));
                *prev = l;
            }
        } else {
            blocks.push((
                Block { bbox: l.line.bbox, font_size: l.font_size, bold: l.bold, lines: vec![l.line.clone()] },
                l.clone(),
                vec![(l.font_size, l.bold, len)],
            ));
        }
    }
    blocks
        .into_iter()
        .map(|(mut block, _, styles)| {
            let (size, bold) = dominant_style(&styles);
            block.font_size = size;
            block.bold = bold;
            block
        })
        .collect()
}

/// A line continues a block when it sits just below the block's last line, overlaps it
/// horizontally and has the same style; a heading and the paragraph under it stay apart.
fn continues_block(block: &Block, prev: &StyledLine, line: &StyledLine) -> bool {
    let size = line.font_size.max(line.frame.height()).max(1.0);
    let same_style = (line.font_size - block.font_size).abs() <= 0.15 * block.font_size.max(1.0) && line.bold == block.bold;
    let gap = line.frame.y0 - prev.frame.y1;
    let below = gap > -0.3 * size && gap < 0.8 * size;
    let overlaps = prev.frame.horizontal_overlap(&line.frame) > 0.0;
    prev.direction == line.direction && same_style && below && overlaps
}

/// Orders blocks by recursive XY-cut: split at a clear vertical gutter (columns) first, then
/// at a horizontal gap (rows), and read each part in turn.
/// Blocks in reading order: a recursive XY-cut (columns first, tables by rows).
pub fn reading_order(blocks: Vec<Block>) -> Vec<Block> {
    let mut out = Vec::with_capacity(blocks.len());
    xy_cut(blocks, &mut out);
    out
}

/// Narrowest gutter between columns, in points.
const MIN_GUTTER: f32 = 4.0;

fn xy_cut(mut blocks: Vec<Block>, out: &mut Vec<Block>) {
    if blocks.len() <= 1 {
        out.extend(blocks);
        return;
    }
    let column_cut = find_cut(&blocks, |b| (b.bbox.x0, b.bbox.x1), MIN_GUTTER);
    let row_cut = find_cut(&blocks, |b| (b.bbox.y0, b.bbox.y1), 0.0);
    // A gutter whose two sides line up row by row is a table: read it by rows.
    let table = column_cut.is_some_and(|x| rows_line_up(&blocks, x));
    // Each cut must leave blocks on both sides, so every call works on fewer blocks; a box with
    // its edges the wrong way round could otherwise put them all on one side, for ever.
    let splits = |at: f32, end: fn(&Block) -> f32| blocks.iter().any(|b| end(b) <= at) && blocks.iter().any(|b| end(b) > at);
    let column_cut = column_cut.filter(|&x| splits(x, |b| b.bbox.x1));
    let row_cut = row_cut.filter(|&y| splits(y, |b| b.bbox.y1));
    match (column_cut, row_cut) {
        (Some(x), row) if !(table && row.is_some()) => {
            let (left, right): (Vec<_>, Vec<_>) = blocks.into_iter().partition(|b| b.bbox.x1 <= x);
            xy_cut(left, out);
            xy_cut(right, out);
            return;
        }
        (_, Some(y)) => {
            let (top, bottom): (Vec<_>, Vec<_>) = blocks.into_iter().partition(|b| b.bbox.y1 <= y);
            xy_cut(top, out);
            xy_cut(bottom, out);
            return;
        }
        _ => {}
    }
    // Overlapping blocks with no clean cut: top to bottom, then left to right.
    blocks.sort_by(|a, b| a.bbox.y0.total_cmp(&b.bbox.y0).then(a.bbox.x0.total_cmp(&b.bbox.x0)));
    out.extend(blocks);
}

/// Whether most single-line blocks left of `x` have a block on the right starting on the same
/// baseline, as table rows do and the paragraphs of two text columns rarely do.
fn rows_line_up(blocks: &[Block], x: f32) -> bool {
    let (left, right): (Vec<&Block>, Vec<&Block>) = blocks.iter().partition(|b| b.bbox.x1 <= x);
    let singles: Vec<&&Block> = left.iter().filter(|b| b.lines.len() == 1).collect();
    if singles.len() < 2 || singles.len() * 2 < left.len() {
        return false;
    }
    let aligned = singles
        .iter()
        .filter(|l| {
            let tol = 0.3 * l.bbox.height().max(1.0);
            right.iter().any(|r| (r.bbox.y0 - l.bbox.y0).abs() < tol || (r.bbox.y1 - l.bbox.y1).abs() < tol)
        })
        .count();
    aligned * 2 > singles.len()
}

/// The first gap of at least `min_gap` along one axis that no block spans; returns a coordinate
/// inside the gap. The widest gap wins so that gutters beat word spacing.
fn find_cut(blocks: &[Block], span: impl Fn(&Block) -> (f32, f32), min_gap: f32) -> Option<f32> {
    let mut spans: Vec<(f32, f32)> = blocks.iter().map(span).collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut reach = spans[0].1;
    let mut best: Option<(f32, f32)> = None;
    for &(start, end) in &spans[1..] {
        let gap = start - reach;
        if gap > min_gap && best.is_none_or(|(g, _)| gap > g) {
            best = Some((gap, reach + gap / 2.0));
        }
        reach = reach.max(end);
    }
    best.map(|(_, at)| at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_glyphs(text: &str, x: f32, y: f32, size: f32, bold: bool) -> Vec<Glyph> {
        let mut out = Vec::new();
        let w = size * 0.5;
        for (i, ch) in text.chars().enumerate() {
            let x0 = x + i as f32 * w;
            out.push(Glyph { ch, bbox: BoundingBox { x0, y0: y, x1: x0 + w, y1: y + size }, font_size: size, bold, generated: false, angle: 0.0 });
        }
        out
    }

    fn newline() -> Glyph {
        Glyph { ch: '\n', bbox: BoundingBox { x0: 0.0, y0: 0.0, x1: 0.0, y1: 0.0 }, font_size: 0.0, bold: false, generated: true, angle: 0.0 }
    }

    #[test]
    fn words_lines_and_blocks_follow_geometry() {
        let mut g = text_glyphs("Heading", 50.0, 50.0, 18.0, true);
        g.push(newline());
        g.extend(text_glyphs("first line of body", 50.0, 80.0, 10.0, false));
        g.push(newline());
        g.extend(text_glyphs("second line", 50.0, 92.0, 10.0, false));
        let blocks = layout_page(&g);
        assert_eq!(blocks.len(), 2, "{blocks:#?}");
        assert!(blocks[0].bold && blocks[0].font_size == 18.0);
        assert_eq!(blocks[0].text(), "Heading");
        assert_eq!(blocks[1].text(), "first line of body\nsecond line");
        assert_eq!(blocks[1].lines[0].words.len(), 4);
    }

    #[test]
    fn two_columns_read_left_column_first() {
        // The right column comes first in the content stream and the title last.
        let mut g = Vec::new();
        for side in ["right", "left"] {
            let x = if side == "left" { 50.0 } else { 320.0 };
            for row in 0..3 {
                g.extend(text_glyphs(&format!("{side}{row}"), x, 100.0 + row as f32 * 12.0, 10.0, false));
                g.push(newline());
            }
        }
        g.extend(text_glyphs("Title across both", 50.0, 40.0, 10.0, false));
        let text: Vec<String> = layout_page(&g).iter().map(Block::text).collect();
        let joined = text.join("|");
        let pos = |s: &str| joined.find(s).unwrap();
        assert!(pos("Title") < pos("left0"), "{joined}");
        assert!(pos("left2") < pos("right0"), "{joined}");
    }

    #[test]
    fn upward_text_forms_one_line_and_ligatures_one_word() {
        // "arXiv" read bottom to top, as in a paper's margin; then "fle" with "fl" sharing a box.
        let mut g: Vec<Glyph> = "arXiv"
            .chars()
            .enumerate()
            .map(|(i, ch)| {
                let y1 = 400.0 - i as f32 * 10.0;
                Glyph { ch, bbox: BoundingBox { x0: 14.0, y0: y1 - 10.0, x1: 37.0, y1 }, font_size: 20.0, bold: false, generated: false, angle: 270.0 }
            })
            .collect();
        g.push(newline());
        let lig = BoundingBox { x0: 100.0, y0: 100.0, x1: 105.0, y1: 109.0 };
        for (ch, bbox) in [('f', lig), ('l', lig), ('e', BoundingBox { x0: 105.0, y0: 100.0, x1: 109.0, y1: 109.0 })] {
            g.push(Glyph { ch, bbox, font_size: 9.0, bold: false, generated: false, angle: 0.0 });
        }
        let texts: Vec<String> = layout_page(&g).iter().map(Block::text).collect();
        assert!(texts.contains(&"arXiv".to_string()), "{texts:?}");
        assert!(texts.contains(&"fle".to_string()), "{texts:?}");
    }

    #[test]
    fn a_table_reads_row_by_row() {
        let mut g = Vec::new();
        for (row, (label, value)) in [("Cost of sales", "54.7"), ("Research", "5.4"), ("Income", "19.1")].iter().enumerate() {
            let y = 100.0 + row as f32 * 12.0;
            g.extend(text_glyphs(label, 50.0, y, 10.0, false));
            g.push(newline());
            g.extend(text_glyphs(value, 400.0, y, 10.0, false));
            g.push(newline());
        }
        let text: Vec<String> = layout_page(&g).iter().map(Block::text).collect();
        assert_eq!(text, ["Cost of sales", "54.7", "Research", "5.4", "Income", "19.1"]);
    }

    #[test]
    fn a_wide_gap_splits_a_line_into_cells() {
        let mut g = text_glyphs("Revenue", 50.0, 100.0, 10.0, false);
        g.extend(text_glyphs("1,234", 300.0, 100.0, 10.0, false));
        let blocks = layout_page(&g);
        assert_eq!(blocks.len(), 2);
    }

    #[test]
    fn a_box_drawn_the_wrong_way_round_ends_the_cutting() {
        let block = |x0: f32, x1: f32, text: &str| {
            let bbox = BoundingBox { x0, y0: 100.0, x1, y1: 110.0 };
            Block { bbox, font_size: 10.0, bold: false, lines: vec![Line { bbox, words: vec![Word { text: text.into(), bbox }] }] }
        };
        // The second box starts right of a gutter but ends left of it: a cut there would put
        // both blocks on one side and cut again for ever.
        let order: Vec<String> = reading_order(vec![block(0.0, 10.0, "a"), block(20.0, 5.0, "b")]).iter().map(Block::text).collect();
        assert_eq!(order, ["a", "b"]);
    }
}
