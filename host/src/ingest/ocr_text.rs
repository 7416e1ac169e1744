//! OCR'd text into the page model: recognised characters become glyphs in PDF points, laid out
//! by the same code as a text layer's, and each word keeps the recogniser's confidence.

use std::collections::HashMap;

use super::layout::{Glyph, layout_page};
use crate::ocr::OcrLine;
use crate::store::{Block, BoundingBox};

/// OCR'd blocks in reading order, and each of their words' confidence in the same order
/// (blocks, then lines, then words).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OcrText {
    pub blocks: Vec<Block>,
    pub word_confidence: Vec<f32>,
}

/// A line box's height in points over the text's size: DB grows each text kernel by about one
/// and a half times its height, so the box is roughly 1.4 times the letters' size.
const LINE_BOX_OVER_TEXT: f32 = 1.4;

/// Lays out lines recognised in an image of `area` (page points) drawn at `scale` pixels a
/// point. Characters whose centre lies inside one of `skip` (words the text layer already has)
/// are dropped, so a page's own text is never repeated.
pub fn ocr_text(lines: &[OcrLine], area: &BoundingBox, scale: f32, skip: &[BoundingBox]) -> OcrText {
    let mut glyphs = Vec::new();
    // Each OCR word's confidence, by its box as layout will compute it (the union of its glyphs).
    let mut confidence: HashMap<[u32; 4], f32> = HashMap::new();
    let point = |px: f32| px / scale;
    for line in lines {
        let (y0, y1) = (area.y0 + point(line.bbox.y0), area.y0 + point(line.bbox.y1));
        let font_size = (y1 - y0) / LINE_BOX_OVER_TEXT;
        let mut word: Option<(BoundingBox, f32, usize)> = None;
        for (i, c) in line.chars.iter().enumerate() {
            if c.ch.is_whitespace() {
                finish_word(&mut word, &mut confidence);
                glyphs.push(Glyph { ch: ' ', bbox: BoundingBox { x0: 0.0, y0: 0.0, x1: 0.0, y1: 0.0 }, font_size, bold: false, generated: true, angle: 0.0 });
                continue;
            }
            // A character reaches to the next one of its word: CTC leaves blank steps between
            // letters, and a gap there would split the word.
            let next = line.chars.get(i + 1).filter(|n| !n.ch.is_whitespace());
            let x1 = next.map_or(c.x1, |n| n.x0.max(c.x1));
            let bbox = BoundingBox { x0: area.x0 + point(c.x0), y0, x1: area.x0 + point(x1), y1 };
            let centre = ((bbox.x0 + bbox.x1) / 2.0, (y0 + y1) / 2.0);
            if skip.iter().any(|s| s.x0 <= centre.0 && centre.0 <= s.x1 && s.y0 <= centre.1 && centre.1 <= s.y1) {
                finish_word(&mut word, &mut confidence);
                glyphs.push(Glyph { ch: ' ', bbox, font_size, bold: false, generated: true, angle: 0.0 });
                continue;
            }
            glyphs.push(Glyph { ch: c.ch, bbox, font_size, bold: false, generated: false, angle: 0.0 });
            word = Some(match word {
                Some((b, sum, n)) => (b.union(&bbox), sum + c.confidence, n + 1),
                None => (bbox, c.confidence, 1),
            });
        }
        finish_word(&mut word, &mut confidence);
        glyphs.push(Glyph { ch: '\n', bbox: BoundingBox { x0: 0.0, y0: 0.0, x1: 0.0, y1: 0.0 }, font_size, bold: false, generated: true, angle: 0.0 });
    }
    let blocks = layout_page(&glyphs);
    let word_confidence = blocks.iter().flat_map(|b| &b.lines).flat_map(|l| &l.words).map(|w| confidence.get(&key(&w.bbox)).copied().unwrap_or(0.0)).collect();
    OcrText { blocks, word_confidence }
}

fn finish_word(word: &mut Option<(BoundingBox, f32, usize)>, confidence: &mut HashMap<[u32; 4], f32>) {
    if let Some((bbox, sum, n)) = word.take() {
        confidence.insert(key(&bbox), sum / n as f32);
    }
}

fn key(b: &BoundingBox) -> [u32; 4] {
    [b.x0.to_bits(), b.y0.to_bits(), b.x1.to_bits(), b.y1.to_bits()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ocr::{OcrChar, PixelBox};

    fn line(text: &str, x0: f32, y0: f32, step: f32, confidence: f32) -> OcrLine {
        // Each character takes `step` pixels with a blank step's gap after it.
        let chars =
            text.chars().enumerate().map(|(i, ch)| OcrChar { ch, x0: x0 + i as f32 * step, x1: x0 + i as f32 * step + step / 2.0, confidence }).collect();
        OcrLine { bbox: PixelBox { x0, y0, x1: x0 + text.len() as f32 * step, y1: y0 + 28.0 }, confidence, chars }
    }

    #[test]
    fn recognised_lines_become_words_lines_and_blocks_in_points() {
        let lines = [line("Net income rose", 100.0, 100.0, 14.0, 0.9), line("by 12%", 100.0, 134.0, 14.0, 0.6)];
        let area = BoundingBox { x0: 10.0, y0: 20.0, x1: 400.0, y1: 300.0 };
        let text = ocr_text(&lines, &area, 2.0, &[]);
        assert_eq!(text.blocks.len(), 1, "{:?}", text.blocks);
        let block = &text.blocks[0];
        assert_eq!(block.text(), "Net income rose\nby 12%");
        let net = &block.lines[0].words[0];
        // Pixels halve into points, offset by the area's corner.
        assert_eq!((net.bbox.x0, net.bbox.y0, net.bbox.y1), (60.0, 70.0, 84.0));
        let want = [0.9, 0.9, 0.9, 0.6, 0.6];
        assert_eq!(text.word_confidence.len(), want.len());
        assert!(text.word_confidence.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-5), "{:?}", text.word_confidence);
        assert!((block.font_size - 14.0 / LINE_BOX_OVER_TEXT).abs() < 1e-4);
    }

    #[test]
    fn characters_the_text_layer_has_are_dropped() {
        let lines = [line("Total 42", 0.0, 0.0, 10.0, 0.8)];
        let area = BoundingBox { x0: 0.0, y0: 0.0, x1: 200.0, y1: 100.0 };
        let text = ocr_text(&lines, &area, 1.0, &[BoundingBox { x0: 0.0, y0: 0.0, x1: 50.0, y1: 28.0 }]);
        assert_eq!(text.blocks.iter().map(Block::text).collect::<Vec<_>>(), ["42"]);
        assert_eq!(text.word_confidence, vec![0.8]);
    }
}
