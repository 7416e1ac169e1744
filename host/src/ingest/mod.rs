//! Ingest: PDFs from disk into the store, one transaction per document.

mod headings;
mod layout;
mod ocr_pages;
mod ocr_text;
mod pdf;
mod progress;
mod regions;
mod wire;
mod worker;

pub use headings::{document_outline, heading_outline};
pub use layout::{Glyph, layout_page, reading_order};
pub use ocr_pages::{ENGINE as OCR_ENGINE, MAX_DPI as OCR_MAX_DPI, OcrQueue, OcrSettings, PageOcrError, areas_to_read};
pub use ocr_text::{OcrText, ocr_text};
pub use pdf::{OpenPdf, PageRead, PdfError, PdfReader};
pub use progress::IngestProgress;
pub use regions::{Drawn, find_regions};
pub use worker::{PdfWorker, ReadLimits, WORKER_SUBCOMMAND, WorkerDocument, serve_worker};

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};
use thiserror::Error;
use tracing::debug;

use crate::store::{DamageRecord, DocumentRecord, PageOcr, PageRecord, Store, StoreError};

/// Why one file was not ingested.
#[derive(Debug, Error)]
pub enum IngestError {
    #[error("{path}: cannot be read ({source})")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} {source}")]
    Pdf { path: PathBuf, source: PdfError },
    #[error("{path}: {source}")]
    Store { path: PathBuf, source: StoreError },
}

impl crate::error::Classified for IngestError {
    fn kind(&self) -> crate::error::ErrorKind {
        match self {
            IngestError::Read { .. } => crate::error::ErrorKind::NotFound,
            IngestError::Pdf { source, .. } => source.kind(),
            IngestError::Store { source, .. } => source.kind(),
        }
    }
}

/// Options for one ingest run.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    /// Password for encrypted PDFs.
    pub password: Option<String>,
    /// Longer side of rendered page images in pixels; None renders no images.
    pub image_max_px: Option<u32>,
    /// How pages are read with OCR; None reads none.
    pub ocr: Option<OcrSettings>,
}

/// What happened to one file.
#[derive(Debug)]
pub enum IngestOutcome {
    /// Stored as a new document; `damage` says what could not be recovered.
    Added { doc: DocumentRecord, damage: DamageRecord, seconds: f64, ocr_pages: u32 },
    /// The same bytes were already in the store.
    AlreadyPresent { doc: DocumentRecord },
}

/// Expands files and folders (recursively) into the PDF files they name, sorted, without
/// duplicates. A named file is taken whatever its extension; folders contribute `*.pdf`.
pub fn collect_pdfs(paths: &[PathBuf]) -> Result<Vec<PathBuf>, IngestError> {
    let mut out = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|source| IngestError::Read { path: path.clone(), source })?;
        if meta.is_dir() {
            let mut found: Vec<PathBuf> = walkdir::WalkDir::new(path)
                .follow_links(true)
                .into_iter()
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_file())
                .map(|e| e.into_path())
                .filter(|p| p.extension().is_some_and(|x| x.eq_ignore_ascii_case("pdf")))
                .collect();
            found.sort();
            out.extend(found);
        } else {
            out.push(path.clone());
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(p.canonicalize().unwrap_or_else(|_| p.clone())));
    Ok(out)
}

/// Ingests one PDF, read by a worker of its own. Either the whole document lands in the store
/// or nothing does. Pages are read before the store's write transaction begins, so a slow or
/// hostile document never holds the store's single writer.
pub fn ingest_file(store: &Store, worker: &PdfWorker, path: &Path, options: &IngestOptions, progress: &IngestProgress) -> Result<IngestOutcome, IngestError> {
    let started = Instant::now();
    let bytes = std::fs::read(path).map_err(|source| IngestError::Read { path: path.to_path_buf(), source })?;
    let content_hash = hex(&Sha256::digest(&bytes));
    let store_err = |source| IngestError::Store { path: path.to_path_buf(), source };
    if let Some(doc) = store.find_by_hash(&content_hash).map_err(store_err)? {
        return Ok(IngestOutcome::AlreadyPresent { doc });
    }
    let pdf_err = |source| IngestError::Pdf { path: path.to_path_buf(), source };
    let mut pdf = worker.open(&bytes, options.password.as_deref()).map_err(pdf_err)?;
    let page_count = pdf.page_count();
    progress.start_document(path, page_count);

    let mut pages = Vec::with_capacity(page_count as usize);
    let mut ocr: Vec<Option<PageOcr>> = Vec::with_capacity(page_count as usize);
    let mut damage = DamageRecord { truncated: pdf.truncated(), lost_pages: Vec::new() };
    let mut first_loss = None;
    let mut queue = options.ocr.as_ref().map(|settings| OcrQueue::new(settings, path, progress));
    for number in 1..=page_count {
        // Best effort, as PDF readers do: a page PDFium cannot read, or one that passes its
        // deadline or crashes PDFium, is kept empty and named as lost; after a deadline or a
        // crash a fresh worker goes on with the next page, within the document's deadline.
        let lost = match pdf.read_page(number, options.image_max_px) {
            Ok(page) => {
                if let Some(queue) = queue.as_mut() {
                    queue.render(&mut pdf, pages.len(), &page);
                }
                ocr.push(None);
                pages.push(page);
                if let Some(queue) = queue.as_mut().filter(|q| q.is_full()) {
                    queue.read(&mut pdf, &mut pages, &mut ocr);
                }
                None
            }
            Err(e @ (PdfError::Page { .. } | PdfError::Render { .. })) => Some(e),
            Err(e @ (PdfError::TimedOut { .. } | PdfError::Crashed { .. })) if !pdf.out_of_time() => {
                if number < page_count {
                    pdf = worker.reopen(&bytes, options.password.as_deref(), &pdf).map_err(pdf_err)?;
                }
                Some(e)
            }
            Err(e) => return Err(pdf_err(e)),
        };
        if let Some(e) = lost {
            debug!(path = %path.display(), "page {number} lost: {e}");
            damage.lost_pages.push(number);
            ocr.push(None);
            pages.push(PageRead {
                page: PageRecord { number, width: 0.0, height: 0.0, has_text_layer: false, blocks: Vec::new() },
                image: None,
                regions: Vec::new(),
            });
            first_loss.get_or_insert(e);
        }
        debug!(path = %path.display(), "page {number}/{page_count} read");
        progress.page_done();
    }
    if let Some(queue) = queue.as_mut() {
        queue.read(&mut pdf, &mut pages, &mut ocr);
    }
    if damage.lost_pages.len() == page_count as usize {
        // Nothing to keep: say why, in the words of the first loss when there was one page.
        return Err(pdf_err(match first_loss {
            Some(e) if page_count == 1 => e,
            _ => PdfError::NoReadablePage { count: page_count },
        }));
    }
    let title = pdf.title().unwrap_or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default());
    // Bookmarks where the PDF has them, else the headings its pages set apart.
    let mut outline = pdf.outline();
    drop(pdf);
    if outline.is_empty() {
        outline = heading_outline(&pages.iter().map(|p| &p.page).collect::<Vec<_>>());
    }

    let mut writer = store.begin_document(&content_hash).map_err(store_err)?;
    for (read, ocr) in pages.iter().zip(&ocr) {
        writer.put_page(&read.page, read.image.as_deref(), &read.regions, ocr.as_ref()).map_err(store_err)?;
    }
    let ocr_pages = ocr.iter().filter(|o| o.is_some()).count() as u32;
    let pages_without_text = pages.iter().filter(|p| !p.page.has_text_layer).count() as u32 - damage.lost_pages.len() as u32;
    let doc = DocumentRecord {
        id: writer.id().to_string(),
        content_hash,
        title,
        page_count,
        source_path: path.canonicalize().unwrap_or_else(|_| path.to_path_buf()).display().to_string(),
        ingested_at: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        pages_without_text,
        has_page_images: options.image_max_px.is_some(),
    };
    writer.commit(&doc, &outline, &damage).map_err(store_err)?;
    Ok(IngestOutcome::Added { doc, damage, seconds: started.elapsed().as_secs_f64(), ocr_pages })
}

/// Reads with OCR the pages of a stored document that have neither a text layer nor OCR'd
/// text (a document ingested before OCR, or with `--ocr never`), from its source file, and
/// stores them, leaving its indexes to be rebuilt. Returns how many pages OCR read.
pub fn ocr_stored_document(
    store: &Store,
    worker: &PdfWorker,
    doc: &DocumentRecord,
    settings: &OcrSettings,
    progress: &IngestProgress,
) -> Result<u32, IngestError> {
    let path = PathBuf::from(&doc.source_path);
    let store_err = |source| IngestError::Store { path: path.clone(), source };
    let mut wanted = Vec::new();
    for number in 1..=doc.page_count {
        let page = store.page(doc, number).map_err(store_err)?;
        let unread = !page.has_text_layer && page.width > 0.0 && store.page_ocr(doc, number).map_err(store_err)?.is_none();
        if unread {
            wanted.push(number);
        }
    }
    if wanted.is_empty() {
        return Ok(0);
    }
    let bytes = std::fs::read(&path).map_err(|source| IngestError::Read { path: path.clone(), source })?;
    let pdf_err = |source| IngestError::Pdf { path: path.clone(), source };
    let mut pdf = worker.open(&bytes, None).map_err(pdf_err)?;
    progress.start_document(&path, wanted.len() as u32);
    let (mut reads, mut ocr) = (Vec::new(), Vec::new());
    let mut queue = OcrQueue::new(settings, &path, progress);
    for number in wanted {
        let read = pdf.read_page(number, None).map_err(pdf_err)?;
        queue.render(&mut pdf, reads.len(), &read);
        reads.push(read);
        ocr.push(None);
        if queue.is_full() {
            queue.read(&mut pdf, &mut reads, &mut ocr);
        }
        progress.page_done();
    }
    queue.read(&mut pdf, &mut reads, &mut ocr);
    let read_pages: Vec<(PageRecord, PageOcr)> = reads.into_iter().zip(ocr).filter_map(|(read, ocr)| Some((read.page, ocr?))).collect();
    // Nothing read leaves the document (and its indexes) as they were.
    if !read_pages.is_empty() {
        store.put_ocr_pages(doc, &read_pages).map_err(store_err)?;
    }
    Ok(read_pages.len() as u32)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
