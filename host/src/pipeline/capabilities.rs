//! The host capabilities a question's stages and an ingest's enrich stage both serve: the
//! generator (with page images and crops), page content, outlines and text similarity. Each
//! host brings its own scope (which documents a stage may name) and counters.

use std::io::Cursor;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::generate::{GenerateRequest, ImagePart, Message, PromptCache, SamplingParams};
use crate::plugins::types::{self, PageRef};
use crate::plugins::{HostFailure, HostResult};
use crate::store::{DocumentRecord, PageRecord};

use super::Services;

/// Model calls and tokens a host has spent.
#[derive(Debug, Default)]
pub struct Usage {
    pub llm_calls: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub completion_tokens: AtomicU64,
}

impl Usage {
    /// Prompt and completion tokens together.
    pub fn tokens(&self) -> u64 {
        self.prompt_tokens.load(Ordering::Relaxed) + self.completion_tokens.load(Ordering::Relaxed)
    }
}

/// The most pixels a crop's longer side may have, whatever resolution it asks for.
const CROP_MAX_PX: u32 = 2048;

/// A host failure of one of the appliance's parts: the stage is stopped.
fn failed(e: impl std::fmt::Display) -> HostFailure {
    HostFailure::Failed(e.to_string())
}

/// Runs a generate request, attaching page images and crops when the generator takes images.
/// `find` resolves a document id within the caller's scope.
pub fn generate(
    services: &Services,
    usage: &Usage,
    prompts: Option<&PromptCache>,
    request: types::GenerateRequest,
    seed: u64,
    find: &dyn Fn(&str) -> HostResult<DocumentRecord>,
) -> HostResult<types::Generation> {
    // The thinking model when asked for and configured (without the request's prompt caches,
    // which hold the answering model's keys and values); the answering model otherwise.
    let (generator, prompts) = match (&services.thinking, request.thinking) {
        (Some(thinking), true) => (thinking, None),
        _ => (&services.generator, prompts),
    };
    let mut messages = Vec::new();
    if !request.system.is_empty() {
        messages.push(Message::text("system", request.system));
    }
    let mut user = Message::text("user", request.prompt);
    if services.generator_images {
        for page in &request.images {
            let doc = find(&page.document)?;
            if let Some(png) = services.store.page_image(&doc, page.page).map_err(failed)? {
                user.images.push(ImagePart { png });
            }
        }
        for crop in &request.crops {
            user.images.push(ImagePart { png: crop_png(services, &find(&crop.page.document)?, crop)? });
        }
    }
    messages.push(user);
    let req = GenerateRequest {
        messages,
        max_tokens: request.max_tokens.clamp(1, services.limits.max_tokens_per_call) as usize,
        sampling: SamplingParams { temperature: request.temperature.max(0.0), top_p: 0.95, seed },
        stop: request.stop,
    };
    let out = generator.generate(&req, prompts, &mut |_| {}).map_err(failed)?;
    usage.llm_calls.fetch_add(1, Ordering::Relaxed);
    usage.prompt_tokens.fetch_add(out.prompt_tokens as u64, Ordering::Relaxed);
    usage.completion_tokens.fetch_add(out.completion_tokens as u64, Ordering::Relaxed);
    Ok(types::Generation {
        text: out.text,
        prompt_tokens: out.prompt_tokens as u32,
        completion_tokens: out.completion_tokens as u32,
        finished: out.finish == crate::generate::FinishReason::Stop,
    })
}

/// Log-probabilities of each choice after the prompt.
pub fn score_choices(
    services: &Services,
    usage: &Usage,
    prompts: Option<&PromptCache>,
    system: String,
    prompt: String,
    choices: Vec<String>,
) -> HostResult<Vec<f32>> {
    let generator = &services.generator;
    let prompt_tokens = generator.count_tokens(&system) + generator.count_tokens(&prompt);
    let mut messages = Vec::new();
    if !system.is_empty() {
        messages.push(Message::text("system", system));
    }
    messages.push(Message::text("user", prompt));
    let scores = generator.score_choices(&messages, &choices, prompts).map_err(failed)?;
    usage.llm_calls.fetch_add(1, Ordering::Relaxed);
    // Each choice is read once after the prompt: count the prompt and every choice.
    let choice_tokens: usize = choices.iter().map(|c| generator.count_tokens(c)).sum();
    usage.prompt_tokens.fetch_add((prompt_tokens + choice_tokens) as u64, Ordering::Relaxed);
    Ok(scores.into_iter().map(|s| s.logprob).collect())
}

/// A region of a page as a PNG at the crop's resolution: rendered from the document's own
/// file by a PDF worker when the file is still where it was ingested from (and unchanged),
/// else cut from the page image rendered at ingest (never above that image's resolution).
fn crop_png(services: &Services, doc: &DocumentRecord, crop: &types::Crop) -> HostResult<Vec<u8>> {
    let page = page_in(services, doc, crop.page.page)?;
    let (x0, y0, x1, y1) = crop.bbox;
    if !(x0 < x1 && y0 < y1 && x0 >= 0.0 && y0 >= 0.0 && x1 <= page.width + 0.5 && y1 <= page.height + 0.5) {
        return Err(HostFailure::Refused(format!(
            "the crop ({x0}, {y0}, {x1}, {y1}) is not a region of page {} of {}, which is {} x {} points",
            crop.page.page, doc.id, page.width, page.height
        )));
    }
    let bbox = crate::store::BoundingBox { x0, y0, x1, y1 };
    if let Some(worker) = &services.pdf {
        match rendered_crop(worker, doc, crop.page.page, bbox, crop.dpi) {
            Ok(png) => return Ok(png),
            Err(reason) => tracing::info!(doc = %doc.id, "a crop is cut from the stored page image: {reason}"),
        }
    }
    stored_crop(services, doc, &page, bbox, crop.dpi)
}

/// The crop rendered from the document's file.
fn rendered_crop(worker: &crate::ingest::PdfWorker, doc: &DocumentRecord, page: u32, bbox: crate::store::BoundingBox, dpi: u32) -> Result<Vec<u8>, String> {
    use sha2::Digest;
    let bytes = std::fs::read(&doc.source_path).map_err(|e| format!("{} cannot be read ({e})", doc.source_path))?;
    let hash: String = sha2::Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    if hash != doc.content_hash {
        return Err(format!("{} has changed since it was ingested", doc.source_path));
    }
    let mut pdf = worker.open(&bytes, None).map_err(|e| e.to_string())?;
    pdf.render_crop(page, bbox, dpi, CROP_MAX_PX).map_err(|e| e.to_string())
}

/// The crop cut from the page image rendered at ingest.
fn stored_crop(services: &Services, doc: &DocumentRecord, page: &PageRecord, bbox: crate::store::BoundingBox, dpi: u32) -> HostResult<Vec<u8>> {
    let Some(png) = services.store.page_image(doc, page.number).map_err(failed)? else {
        return Err(HostFailure::Refused(format!(
            "document {} was ingested without page images and its file is not where it was, so no crop of it can be made",
            doc.id
        )));
    };
    let image = image::load_from_memory_with_format(&png, image::ImageFormat::Png).map_err(failed)?;
    let scale = image.width() as f32 / page.width.max(1.0);
    let (left, top, w, h) = bbox.pixel_rect(scale, image.width(), image.height());
    let mut cut = image.crop_imm(left, top, w, h);
    let wanted = (dpi.max(1) as f32 / 72.0).min(scale);
    let target = ((bbox.width().max(bbox.height()) * wanted).round() as u32).clamp(1, CROP_MAX_PX);
    if wanted < scale || target < cut.width().max(cut.height()) {
        cut = cut.resize(target, target, image::imageops::FilterType::Triangle);
    }
    let mut out = Vec::new();
    cut.write_to(&mut Cursor::new(&mut out), image::ImageFormat::Png).map_err(failed)?;
    Ok(out)
}

/// A stored page of `doc`, refusing numbers the document does not have.
pub fn page_in(services: &Services, doc: &DocumentRecord, number: u32) -> HostResult<PageRecord> {
    if number == 0 || number > doc.page_count {
        return Err(HostFailure::Refused(format!("document {} has no page {number} (it has {})", doc.id, doc.page_count)));
    }
    services.store.page(doc, number).map_err(failed)
}

/// Whether a block reads as a heading: bold, or set larger than the page's usual text.
fn block_kind(block: &crate::store::Block, body_size: f32) -> &'static str {
    if block.bold || block.font_size > body_size * 1.15 { "heading" } else { "text" }
}

/// A stored page as a stage sees it.
pub fn page_content(record: &PageRecord, page: PageRef) -> types::PageContent {
    let mut sizes: Vec<f32> = record.blocks.iter().map(|b| b.font_size).collect();
    sizes.sort_by(f32::total_cmp);
    let body = sizes.get(sizes.len() / 2).copied().unwrap_or(10.0);
    types::PageContent {
        width: record.width,
        height: record.height,
        text: record.text(),
        blocks: record
            .blocks
            .iter()
            .map(|b| types::Block {
                kind: block_kind(b, body).into(),
                text: b.text(),
                bbox: (b.bbox.x0, b.bbox.y0, b.bbox.x1, b.bbox.y1),
                font_size: b.font_size,
                bold: b.bold,
            })
            .collect(),
        page,
    }
}

/// A document's outline (bookmarks, or headings), with each entry's parent.
pub fn outline(services: &Services, doc: &DocumentRecord) -> HostResult<Vec<types::OutlineEntry>> {
    let entries = crate::ingest::document_outline(&services.store, doc).map_err(failed)?;
    let mut out: Vec<types::OutlineEntry> = Vec::with_capacity(entries.len());
    let mut open: Vec<(u32, u32)> = Vec::new(); // (level, index) of enclosing entries
    for (i, e) in entries.iter().enumerate() {
        while open.last().is_some_and(|(level, _)| *level >= e.level) {
            open.pop();
        }
        out.push(types::OutlineEntry { title: e.title.clone(), level: e.level + 1, page: e.page.unwrap_or(0), parent: open.last().map(|(_, idx)| *idx) });
        open.push((e.level, i as u32));
    }
    Ok(out)
}

/// A page's regions as a stage sees them.
pub fn regions(services: &Services, doc: &DocumentRecord, number: u32) -> HostResult<Vec<types::Region>> {
    page_in(services, doc, number)?;
    let regions = services.store.regions(doc, number).map_err(failed)?;
    Ok(regions
        .into_iter()
        .map(|r| types::Region { kind: r.kind.as_str().into(), bbox: (r.bbox.x0, r.bbox.y0, r.bbox.x1, r.bbox.y1), caption: r.caption, blocks: r.blocks })
        .collect())
}

/// What a stage may know of a document without its pages.
pub fn document_info(doc: &DocumentRecord) -> types::DocumentInfo {
    types::DocumentInfo { id: doc.id.clone(), title: doc.title.clone(), page_count: doc.page_count }
}

/// The most texts one similarity call may compare.
const MAX_SIMILARITY_TEXTS: usize = 4096;

/// Cosine similarity of `query` to each text, by sentence embeddings (unit length).
pub fn similarities(services: &Services, query: &str, texts: &[String]) -> HostResult<Vec<f32>> {
    if texts.len() > MAX_SIMILARITY_TEXTS {
        return Err(HostFailure::Refused(format!("one call compares at most {MAX_SIMILARITY_TEXTS} texts, not {}", texts.len())));
    }
    let all: Vec<&str> = std::iter::once(query).chain(texts.iter().map(String::as_str)).collect();
    let v = services.encoder.embed(&all).map_err(failed)?;
    Ok(v[1..].iter().map(|t| t.iter().zip(&v[0]).map(|(x, y)| x * y).sum()).collect())
}

/// Writes a stage's log line to the appliance's log, and keeps it when `kept` has room.
pub fn log(level: types::LogLevel, message: String, kept: &std::sync::Mutex<Vec<String>>, room: usize) {
    let message: String = message.chars().take(2000).collect();
    match level {
        types::LogLevel::Debug => tracing::debug!(target: "evident::stage", "{message}"),
        types::LogLevel::Info => tracing::info!(target: "evident::stage", "{message}"),
        types::LogLevel::Warn => tracing::warn!(target: "evident::stage", "{message}"),
    }
    // A stage that logs without end must not grow the host's memory without end.
    let mut log = crate::error::lock(kept);
    if log.len() < room {
        log.push(message);
    }
}
