//! Records kept in the store. Boxes are in PDF points with the origin at the page's top-left
//! corner and y growing downwards, the way images and HTML lay pages out.

use serde::{Deserialize, Serialize};

/// An axis-aligned rectangle in page points, origin top-left.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BoundingBox {
    pub x0: f32,
    pub y0: f32,
    pub x1: f32,
    pub y1: f32,
}

impl BoundingBox {
    /// The smallest box holding both boxes.
    pub fn union(&self, other: &BoundingBox) -> BoundingBox {
        BoundingBox { x0: self.x0.min(other.x0), y0: self.y0.min(other.y0), x1: self.x1.max(other.x1), y1: self.y1.max(other.y1) }
    }

    /// Width in points.
    pub fn width(&self) -> f32 {
        self.x1 - self.x0
    }

    /// Height in points.
    pub fn height(&self) -> f32 {
        self.y1 - self.y0
    }

    /// Length of the vertical overlap of two boxes (0 when apart).
    pub fn vertical_overlap(&self, other: &BoundingBox) -> f32 {
        (self.y1.min(other.y1) - self.y0.max(other.y0)).max(0.0)
    }

    /// Length of the horizontal overlap of two boxes (0 when apart).
    pub fn horizontal_overlap(&self, other: &BoundingBox) -> f32 {
        (self.x1.min(other.x1) - self.x0.max(other.x0)).max(0.0)
    }

    /// The pixels this box covers in an image of `width` x `height` drawn at `scale` pixels a
    /// point: left, top, width, height, at least one pixel and never past the image's edge.
    pub fn pixel_rect(&self, scale: f32, width: u32, height: u32) -> (u32, u32, u32, u32) {
        let px = |v: f32, limit: u32| ((v * scale).round().max(0.0) as u32).min(limit);
        let (left, top) = (px(self.x0, width.saturating_sub(1)), px(self.y0, height.saturating_sub(1)));
        let (right, bottom) = (px(self.x1, width).max(left + 1), px(self.y1, height).max(top + 1));
        (left, top, right - left, bottom - top)
    }

    /// Whether this box lies within a page of the given size.
    pub fn is_inside(&self, width: f32, height: f32) -> bool {
        self.x0 >= 0.0 && self.y0 >= 0.0 && self.x1 <= width && self.y1 <= height && self.x0 <= self.x1 && self.y0 <= self.y1
    }
}

/// A word: characters between spaces, with one box.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Word {
    pub text: String,
    pub bbox: BoundingBox,
}

/// A line of words sharing a baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub bbox: BoundingBox,
    pub words: Vec<Word>,
}

impl Line {
    /// The line's words joined by single spaces.
    pub fn text(&self) -> String {
        let mut text = String::new();
        for (i, word) in self.words.iter().enumerate() {
            if i > 0 {
                text.push(' ');
            }
            text.push_str(&word.text);
        }
        text
    }
}

/// A block of lines set in one style: a paragraph, a heading, a table cell, a caption.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Block {
    pub bbox: BoundingBox,
    /// Dominant font size in points.
    pub font_size: f32,
    /// Whether the dominant font is bold (weight 600 or more, or a bold face name).
    pub bold: bool,
    pub lines: Vec<Line>,
}

impl Block {
    /// The block's lines joined by newlines.
    pub fn text(&self) -> String {
        self.lines.iter().map(Line::text).collect::<Vec<_>>().join("\n")
    }
}

/// One page: its size, its blocks in reading order, and whether it has a text layer at all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageRecord {
    /// 1-based page number.
    pub number: u32,
    pub width: f32,
    pub height: f32,
    /// False for scanned pages with no text layer; OCR fills those in later.
    pub has_text_layer: bool,
    pub blocks: Vec<Block>,
}

impl PageRecord {
    /// The page's text, blocks in reading order separated by blank lines.
    pub fn text(&self) -> String {
        self.blocks.iter().map(Block::text).collect::<Vec<_>>().join("\n\n")
    }
}

/// What a region of a page shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RegionKind {
    /// Vector graphics: a chart, a diagram.
    Figure,
    /// A picture.
    Image,
    /// A grid of text blocks.
    Table,
}

impl RegionKind {
    /// As stages and `show` name it.
    pub fn as_str(self) -> &'static str {
        match self {
            RegionKind::Figure => "figure",
            RegionKind::Image => "image",
            RegionKind::Table => "table",
        }
    }
}

/// A figure, picture or table on a page, with its caption and the blocks inside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegionRecord {
    pub kind: RegionKind,
    pub bbox: BoundingBox,
    /// The caption beside it, or empty.
    pub caption: String,
    /// Indices of the page's blocks inside it.
    pub blocks: Vec<u32>,
}

/// One entry of a document's outline (bookmarks), flattened depth-first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutlineEntry {
    pub title: String,
    /// 0 for top-level entries.
    pub level: u32,
    /// 1-based target page, when the bookmark points at one.
    pub page: Option<u32>,
}

/// A document as the store knows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DocumentRecord {
    /// Short id: the first 16 hex digits of the content hash.
    pub id: String,
    /// sha256 of the file's bytes, hex.
    pub content_hash: String,
    pub title: String,
    pub page_count: u32,
    pub source_path: String,
    /// Seconds since the Unix epoch.
    pub ingested_at: u64,
    /// Pages with no text layer (candidates for OCR).
    pub pages_without_text: u32,
    pub has_page_images: bool,
}

/// What OCR added to a page: which of its blocks it read and how sure it is of each word.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PageOcr {
    /// The engine that read the page.
    pub engine: String,
    /// Indices of the page's blocks that OCR read, in reading order.
    pub blocks: Vec<u32>,
    /// Each OCR'd word's confidence (0 to 1), those blocks in order, line by line.
    pub word_confidence: Vec<f32>,
}

/// What reading a damaged document could not recover: kept beside its record, empty for a
/// whole file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DamageRecord {
    /// The file had no end-of-file marker and PDFium rebuilt what was there.
    pub truncated: bool,
    /// Pages PDFium could not read; each is stored empty (no text, no image).
    pub lost_pages: Vec<u32>,
}

impl DamageRecord {
    /// Whether anything was lost or rebuilt.
    pub fn is_empty(&self) -> bool {
        !self.truncated && self.lost_pages.is_empty()
    }
}

/// What retrieval has indexed of a document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IndexState {
    /// The encoder whose token vectors are stored (None: no vectors yet).
    pub vectors_by: Option<String>,
    /// The document's pages are in the lexical index.
    pub lexical: bool,
}
