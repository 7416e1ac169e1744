//! Which parts of a page OCR reads, and reading them: a page without a text layer whole, and
//! on a page with one the pictures that cover much of it (a scanned insert, a chart).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use image::RgbImage;
use rayon::prelude::*;
use tracing::warn;

use super::layout::reading_order;
use super::ocr_text::ocr_text;
use super::pdf::{PageRead, PdfError};
use super::progress::IngestProgress;
use super::worker::WorkerDocument;
use crate::config::{ApplianceConfig, OcrMode};
use crate::ocr::{OcrEngine, OcrError, OcrLine};
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
        let device = crate::models::burn_device(config.compute.ocr_backend);
        let engine = OcrEngine::load_on(&config.models_dir.join(crate::ocr::MODEL_DIR), &device, config.compute.ocr_precision)?
            .with_detector_side(config.ingest.ocr_detect_px);
        Ok(Some(OcrSettings { engine: Arc::new(engine), mode, max_px: config.ingest.ocr_max_px }))
    }
}

impl std::fmt::Debug for OcrSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OcrSettings").field("mode", &self.mode).field("max_px", &self.max_px).finish_non_exhaustive()
    }
}

/// Why a page's areas could not be rendered for OCR.
#[derive(Debug, thiserror::Error)]
pub enum PageOcrError {
    #[error(transparent)]
    Render(#[from] PdfError),
    #[error("the rendered page is not an image: {0}")]
    Image(String),
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

/// One area of a page rendered for OCR, and the image's pixels per point.
pub struct RenderedArea {
    pub area: BoundingBox,
    pub image: RgbImage,
    pub scale: f32,
}

/// Renders the areas `settings` asks for on one page (none when there is nothing to read).
pub fn render_areas(pdf: &mut WorkerDocument, read: &PageRead, settings: &OcrSettings) -> Result<Vec<RenderedArea>, PageOcrError> {
    areas_to_read(read, settings.mode)
        .into_iter()
        .map(|area| {
            let png = pdf.render_crop(read.page.number, area, MAX_DPI, settings.max_px)?;
            let image = image::load_from_memory(&png).map_err(|e| PageOcrError::Image(e.to_string()))?.to_rgb8();
            let scale = image.width() as f32 / area.width().max(1.0);
            Ok(RenderedArea { area, image, scale })
        })
        .collect()
}

/// Adds the lines OCR read in each rendered area to the page's blocks, in reading order with
/// the text layer's, and says which blocks are OCR's.
pub fn add_ocr_lines(read: &mut PageRead, areas: &[RenderedArea], lines: &[Vec<OcrLine>]) -> PageOcr {
    let skip: Vec<BoundingBox> = read.page.blocks.iter().flat_map(|b| &b.lines).flat_map(|l| &l.words).map(|w| w.bbox).collect();
    // Each OCR'd block with its words' confidences, found again after reading order mixes
    // them with the text layer's blocks (by box and text, which OCR never repeats).
    let mut read_blocks: HashMap<(String, [u32; 4]), Vec<f32>> = HashMap::new();
    let mut blocks = std::mem::take(&mut read.page.blocks);
    for (rendered, lines) in areas.iter().zip(lines) {
        let text = ocr_text(lines, &rendered.area, rendered.scale, &skip);
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
    ocr
}

/// How many pages OCR reads side by side. Burn's CPU passes keep about 1.3 of two cores busy
/// on one page (its element-wise passes run on one thread), so a second page fills the gaps.
pub const PAGES_AT_ONCE: usize = 2;

/// Pages of one document rendered for OCR and waiting to be read, [`PAGES_AT_ONCE`] at a time.
/// Pages are named by their index in the caller's lists; the time spent here is left out of
/// PDFium's deadline, and a page OCR cannot read keeps what its text layer has (and a warning).
pub struct OcrQueue<'a> {
    settings: &'a OcrSettings,
    path: &'a Path,
    progress: &'a IngestProgress,
    pending: Vec<(usize, Vec<RenderedArea>)>,
}

impl<'a> OcrQueue<'a> {
    /// An empty queue for the document at `path`, counting the pages it reads on `progress`.
    pub fn new(settings: &'a OcrSettings, path: &'a Path, progress: &'a IngestProgress) -> OcrQueue<'a> {
        OcrQueue { settings, path, progress, pending: Vec::new() }
    }

    /// Renders what OCR is to read of page `index` (nothing when it needs no OCR) and queues it.
    pub fn render(&mut self, pdf: &mut WorkerDocument, index: usize, read: &PageRead) {
        let started = Instant::now();
        match render_areas(pdf, read, self.settings) {
            Ok(areas) if areas.is_empty() => {}
            Ok(areas) => self.pending.push((index, areas)),
            Err(e) => warn!(path = %self.path.display(), "page {} was not read by OCR: {e}", read.page.number),
        }
        pdf.exclude_from_deadline(started.elapsed());
    }

    /// Whether enough pages wait to read them side by side.
    pub fn is_full(&self) -> bool {
        self.pending.len() >= PAGES_AT_ONCE
    }

    /// Reads every queued page side by side, adds the words to `pages[index]` and sets
    /// `ocr[index]`.
    pub fn read(&mut self, pdf: &mut WorkerDocument, pages: &mut [PageRead], ocr: &mut [Option<PageOcr>]) {
        let started = Instant::now();
        let engine = &self.settings.engine;
        let pending = std::mem::take(&mut self.pending);
        let lines: Vec<Result<Vec<Vec<OcrLine>>, OcrError>> =
            pending.par_iter().map(|(_, areas)| areas.iter().map(|a| engine.read(&a.image)).collect()).collect();
        for ((index, areas), lines) in pending.iter().zip(lines) {
            let (Some(read), Some(slot)) = (pages.get_mut(*index), ocr.get_mut(*index)) else { continue };
            match lines {
                Ok(lines) => {
                    *slot = Some(add_ocr_lines(read, areas, &lines));
                    self.progress.page_ocr_done();
                }
                Err(e) => warn!(path = %self.path.display(), "page {} was not read by OCR: {e}", read.page.number),
            }
        }
        pdf.exclude_from_deadline(started.elapsed());
    }
}

fn block_key(block: &Block) -> (String, [u32; 4]) {
    let b = &block.bbox;
    (block.text(), [b.x0.to_bits(), b.y0.to_bits(), b.x1.to_bits(), b.y1.to_bits()])
}
