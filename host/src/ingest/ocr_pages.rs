//! Which parts of a page OCR reads, and reading them: a page without a text layer whole, and
//! on a page with one the pictures that cover much of it (a scanned insert, a chart).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use tracing::warn;

use super::layout::reading_order;
use super::ocr_text::ocr_text;
use super::pdf::{PageRead, PdfError};
use super::worker::WorkerDocument;
use crate::config::{ApplianceConfig, OcrMode};
use crate::ocr::{OcrEngine, OcrError};
use crate::store::{Block, BoundingBox, PageOcr, RegionKind};

/// The engine's name as page records give it.
pub const ENGINE: &str = "PP-OCRv5 mobile";
/// A picture on a page with a text layer is read when it covers at least this share of it.
const PICTURE_SHARE: f32 = 0.2;
/// OCR renders at most this many dots per inch, however small the area.
pub const MAX_DPI: u32 = 300;

/// How ingest reads pages with OCR.
#[derive(Clone)]
pub struct OcrSettings {
    pub engine: Arc<OcrEngine>,
    pub mode: OcrMode,
    /// Longer side of the image OCR reads, in pixels.
    pub max_px: u32,
}

impl OcrSettings {
    /// OCR as `mode` asks, its engine loaded on the configured backend (None for `never`).
    pub fn load(config: &ApplianceConfig, mode: OcrMode) -> Result<Option<OcrSettings>, OcrError> {
        if mode == OcrMode::Never {
            return Ok(None);
        }
        let device = crate::models::burn_device(config.compute.backend).device;
        let engine = OcrEngine::load(&config.models_dir.join(crate::ocr::MODEL_DIR), &device)?.with_detector_side(config.ingest.ocr_detect_px);
        Ok(Some(OcrSettings { engine: Arc::new(engine), mode, max_px: config.ingest.ocr_max_px }))
    }
}

impl std::fmt::Debug for OcrSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OcrSettings").field("mode", &self.mode).field("max_px", &self.max_px).finish_non_exhaustive()
    }
}

/// Why a page could not be read by OCR.
#[derive(Debug, thiserror::Error)]
pub enum PageOcrError {
    #[error(transparent)]
    Render(#[from] PdfError),
    #[error("the rendered page is not an image: {0}")]
    Image(String),
    #[error(transparent)]
    Ocr(#[from] OcrError),
}

/// The areas of a page (in points) that `mode` has OCR read.
pub fn areas_to_read(read: &PageRead, mode: OcrMode) -> Vec<BoundingBox> {
    let page = &read.page;
    let whole = BoundingBox { x0: 0.0, y0: 0.0, x1: page.width, y1: page.height };
    match mode {
        OcrMode::Never => Vec::new(),
        _ if page.width <= 0.0 || page.height <= 0.0 => Vec::new(),
        OcrMode::Always => vec![whole],
        OcrMode::Auto if !page.has_text_layer => vec![whole],
        OcrMode::Auto => read
            .regions
            .iter()
            .filter(|r| r.kind == RegionKind::Image && r.bbox.width() * r.bbox.height() >= PICTURE_SHARE * page.width * page.height)
            .map(|r| r.bbox)
            .collect(),
    }
}

/// Reads the areas `settings` asks for on one page and adds their words to its blocks, in
/// reading order with the text layer's. None when there was nothing to read.
pub fn read_page_text(pdf: &mut WorkerDocument, read: &mut PageRead, settings: &OcrSettings) -> Result<Option<PageOcr>, PageOcrError> {
    let areas = areas_to_read(read, settings.mode);
    if areas.is_empty() {
        return Ok(None);
    }
    let skip: Vec<BoundingBox> = read.page.blocks.iter().flat_map(|b| &b.lines).flat_map(|l| &l.words).map(|w| w.bbox).collect();
    // Each OCR'd block with its words' confidences, found again after reading order mixes
    // them with the text layer's blocks (by box and text, which OCR never repeats).
    let mut read_blocks: HashMap<(String, [u32; 4]), Vec<f32>> = HashMap::new();
    let mut blocks = std::mem::take(&mut read.page.blocks);
    for area in areas {
        let png = pdf.render_crop(read.page.number, area, MAX_DPI, settings.max_px)?;
        let image = image::load_from_memory(&png).map_err(|e| PageOcrError::Image(e.to_string()))?.to_rgb8();
        let scale = image.width() as f32 / area.width().max(1.0);
        let lines = settings.engine.read(&image)?;
        let text = ocr_text(&lines, &area, scale, &skip);
        let mut confidence = text.word_confidence.into_iter();
        for block in text.blocks {
            let words = block.lines.iter().map(|l| l.words.len()).sum();
            read_blocks.insert(block_key(&block), confidence.by_ref().take(words).collect());
            blocks.push(block);
        }
    }
    read.page.blocks = if read.page.has_text_layer { reading_order(blocks) } else { blocks };
    let mut ocr = PageOcr { engine: ENGINE.into(), blocks: Vec::new(), word_confidence: Vec::new() };
    for (i, block) in read.page.blocks.iter().enumerate() {
        if let Some(confidence) = read_blocks.remove(&block_key(block)) {
            ocr.blocks.push(i as u32);
            ocr.word_confidence.extend(confidence);
        }
    }
    Ok(Some(ocr))
}

/// [`read_page_text`] for a page being read from `path`: the time OCR takes is left out of
/// PDFium's deadline, and a page OCR cannot read keeps what its text layer has (and a warning).
pub fn read_page_text_or_keep(pdf: &mut WorkerDocument, read: &mut PageRead, settings: &OcrSettings, path: &Path) -> Option<PageOcr> {
    let started = Instant::now();
    let ocr = read_page_text(pdf, read, settings);
    pdf.exclude_from_deadline(started.elapsed());
    ocr.unwrap_or_else(|e| {
        warn!(path = %path.display(), "page {} was not read by OCR: {e}", read.page.number);
        None
    })
}

fn block_key(block: &Block) -> (String, [u32; 4]) {
    let b = &block.bbox;
    (block.text(), [b.x0.to_bits(), b.y0.to_bits(), b.x1.to_bits(), b.y1.to_bits()])
}
