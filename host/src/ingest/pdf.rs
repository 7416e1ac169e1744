//! Reading PDFs with PDFium: page text with boxes and fonts, outline, page images.

use std::path::Path;

use pdfium_render::prelude::*;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::layout::{Glyph, layout_page};
use super::regions::{Drawn, MAX_DRAWN, find_regions};
use crate::store::{BoundingBox, OutlineEntry, PageRecord, RegionRecord};

/// What reading one page gives: its text and layout, its image when asked for, its regions.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PageRead {
    pub page: PageRecord,
    pub image: Option<Vec<u8>>,
    pub regions: Vec<RegionRecord>,
}

/// The most page objects looked at for regions: each one is a call into PDFium.
const MAX_OBJECTS_SCANNED: usize = 50_000;

/// Why a PDF could not be read.
#[derive(Debug, Error, Serialize, Deserialize)]
pub enum PdfError {
    #[error("cannot load the PDF library at {path}: {reason}; run the set-up (scripts/setup.sh) or set pdfium_library in appliance.toml")]
    Library { path: String, reason: String },
    #[error("is empty (0 bytes)")]
    Empty,
    #[error("is not a PDF file (it does not start with %PDF)")]
    NotPdf,
    #[error("is truncated: it has no end-of-file marker (%%EOF), and PDFium cannot rebuild it from what is there")]
    Truncated,
    #[error("is encrypted; give its password with --password")]
    NeedsPassword,
    #[error("is encrypted and the password given is wrong")]
    WrongPassword,
    #[error("is damaged and PDFium cannot read it ({0})")]
    Damaged(String),
    #[error("page {page} cannot be read ({reason})")]
    Page { page: u32, reason: String },
    #[error("page {page} cannot be rendered ({reason})")]
    Render { page: u32, reason: String },
    #[error(
        "took longer than {seconds} s {what}; it may be damaged or hostile (the limits are open_timeout_s, page_timeout_s and document_timeout_s in [ingest])"
    )]
    TimedOut { seconds: u64, what: String },
    #[error(
        "crashed PDFium ({signal}); it may be damaged or hostile, or need more than the {memory_mib} MiB a document may use (worker_memory_mib in [ingest])"
    )]
    Crashed { signal: String, memory_mib: u64 },
    #[error("has no page PDFium can find; it may be damaged")]
    NoPages,
    #[error("has {count} pages and PDFium can read none of them; it may be damaged")]
    NoReadablePage { count: u32 },
    #[error("has {count} pages, more than the {limit} a document may have (max_pages in [ingest])")]
    TooManyPages { count: u32, limit: u32 },
    #[error("could not be read because the PDF worker failed: {0}")]
    Worker(String),
}

impl crate::error::Classified for PdfError {
    fn kind(&self) -> crate::error::ErrorKind {
        use crate::error::ErrorKind;
        match self {
            PdfError::Library { .. } | PdfError::Worker(_) => ErrorKind::Internal,
            // Everything else is the file itself: damaged, encrypted, hostile or too big.
            _ => ErrorKind::Invalid,
        }
    }
}

/// The PDF parser: one per process, since PDFium binds once.
pub struct PdfReader {
    pdfium: Pdfium,
}

/// A document opened for reading.
pub struct OpenPdf<'a> {
    doc: PdfDocument<'a>,
    truncated: bool,
}

impl PdfReader {
    /// Binds the PDFium shared library at `library`.
    pub fn new(library: &Path) -> Result<PdfReader, PdfError> {
        let bindings = Pdfium::bind_to_library(library).map_err(|e| PdfError::Library { path: library.display().to_string(), reason: format!("{e:?}") })?;
        Ok(PdfReader { pdfium: Pdfium::new(bindings) })
    }

    /// Opens a PDF from its bytes. A file without its end-of-file marker is handed to
    /// PDFium's repair, which rebuilds what it can; [`OpenPdf::truncated`] then says so.
    pub fn open<'a>(&'a self, bytes: &'a [u8], password: Option<&str>) -> Result<OpenPdf<'a>, PdfError> {
        let truncated = check_envelope(bytes)?;
        let doc = self.pdfium.load_pdf_from_byte_slice(bytes, password).map_err(|e| match e {
            PdfiumError::PdfiumLibraryInternalError(PdfiumInternalError::PasswordError) => {
                if password.is_some() {
                    PdfError::WrongPassword
                } else {
                    PdfError::NeedsPassword
                }
            }
            _ if truncated => PdfError::Truncated,
            PdfiumError::PdfiumLibraryInternalError(PdfiumInternalError::FormatError) => PdfError::Damaged("its structure is invalid".into()),
            other => PdfError::Damaged(pdfium_reason(&other)),
        })?;
        Ok(OpenPdf { doc, truncated })
    }
}

/// PDFium's error in words; its own names are for programmers.
fn pdfium_reason(e: &PdfiumError) -> String {
    match e {
        PdfiumError::PdfiumLibraryInternalError(PdfiumInternalError::Unknown) => "PDFium reports an unknown error; the file may be damaged".into(),
        PdfiumError::PdfiumLibraryInternalError(PdfiumInternalError::FormatError) => "its structure is invalid".into(),
        PdfiumError::PdfiumLibraryInternalError(PdfiumInternalError::PageError) => "the page is missing or invalid".into(),
        PdfiumError::PdfiumLibraryInternalError(PdfiumInternalError::FileError) => "PDFium cannot read the file".into(),
        other => format!("{other:?}"),
    }
}

/// A PDF starts with `%PDF` (within its first KiB) and ends with `%%EOF` (within its last KiB);
/// returns whether the end is missing (a truncated copy).
fn check_envelope(bytes: &[u8]) -> Result<bool, PdfError> {
    if bytes.is_empty() {
        return Err(PdfError::Empty);
    }
    let head = &bytes[..bytes.len().min(1024)];
    if !contains(head, b"%PDF-") {
        return Err(PdfError::NotPdf);
    }
    let tail = &bytes[bytes.len().saturating_sub(1024)..];
    Ok(!contains(tail, b"%%EOF"))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Deepest outline level read; deeper or cyclic outlines in hostile files stop here.
const MAX_OUTLINE_DEPTH: u32 = 16;
/// Most outline entries read.
const MAX_OUTLINE_ENTRIES: usize = 20_000;

impl OpenPdf<'_> {
    /// Whether the file lacked its end and PDFium rebuilt it.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Number of pages.
    pub fn page_count(&self) -> u32 {
        u32::try_from(self.doc.pages().len()).unwrap_or(0)
    }

    /// The title from the PDF's metadata, when it has one with a letter in it: a filing's
    /// metadata often holds its SEC accession number ("0000064803-19-000013"), which names
    /// nothing a reader or a question would (the caller falls back to the file's name).
    pub fn title(&self) -> Option<String> {
        self.doc.metadata().get(PdfDocumentMetadataTagType::Title).map(|t| t.value().trim().to_string()).filter(|t| t.chars().any(char::is_alphabetic))
    }

    /// The bookmarks, flattened depth-first with their levels.
    pub fn outline(&self) -> Vec<OutlineEntry> {
        let mut out = Vec::new();
        if let Some(root) = self.doc.bookmarks().root() {
            walk_outline(Some(root), 0, &mut out);
        }
        out
    }

    /// Reads one page (1-based): its blocks in reading order, its regions, and its image if
    /// `image_max_px` is given (the longer side, in pixels), as PNG.
    pub fn read_page(&self, number: u32, image_max_px: Option<u32>) -> Result<PageRead, PdfError> {
        let page_err = |e: PdfiumError| PdfError::Page { page: number, reason: pdfium_reason(&e) };
        let index = i32::try_from(number.saturating_sub(1)).map_err(|_| PdfError::Page { page: number, reason: "page index out of range".into() })?;
        let page = self.doc.pages().get(index).map_err(page_err)?;
        let rotation = page.rotation().unwrap_or(PdfPageRenderRotation::None);
        let (width, height) = (page.width().value, page.height().value);
        let frame = PageFrame::new(rotation, width, height);
        let glyphs = read_glyphs(&page, &frame).map_err(page_err)?;
        let has_text_layer = glyphs.iter().any(|g| !g.generated && !g.ch.is_whitespace());
        let blocks = layout_page(&glyphs);
        let regions = find_regions(&read_drawn(&page, &frame), &blocks, width, height);
        let record = PageRecord { number, width, height, has_text_layer, blocks };
        let image = match image_max_px {
            Some(max_px) => Some(render_png(&page, width, height, max_px).map_err(|reason| PdfError::Render { page: number, reason })?),
            None => None,
        };
        Ok(PageRead { page: record, image, regions })
    }
}

impl OpenPdf<'_> {
    /// Renders the region `bbox` (points, origin top-left) of page `number` at `dpi`, scaled
    /// down so that its longer side has at most `max_px` pixels, as PNG.
    pub fn render_crop(&self, number: u32, bbox: BoundingBox, dpi: u32, max_px: u32) -> Result<Vec<u8>, PdfError> {
        let page_err = |e: PdfiumError| PdfError::Page { page: number, reason: pdfium_reason(&e) };
        let index = i32::try_from(number.saturating_sub(1)).map_err(|_| PdfError::Page { page: number, reason: "page index out of range".into() })?;
        let page = self.doc.pages().get(index).map_err(page_err)?;
        let (width, height) = (page.width().value, page.height().value);
        let longest = bbox.width().max(bbox.height()).max(1.0);
        // Pixels per point, bounded by the crop's size and by the whole page's render.
        let scale = (dpi.max(1) as f32 / 72.0).min(max_px as f32 / longest).min(MAX_RENDER_PX as f32 / width.max(height).max(1.0));
        let (w, h) = (((width * scale).round() as i32).max(1), ((height * scale).round() as i32).max(1));
        let config = PdfRenderConfig::new().set_target_size(w, h).render_form_data(true);
        let bitmap = page.render_with_config(&config).map_err(|e| PdfError::Render { page: number, reason: format!("{e:?}") })?;
        let image = bitmap.as_image().map_err(|e| PdfError::Render { page: number, reason: format!("{e:?}") })?.to_rgb8();
        let (left, top, w, h) = bbox.pixel_rect(scale, image.width(), image.height());
        let cut = image::imageops::crop_imm(&image, left, top, w, h).to_image();
        let mut png = Vec::new();
        cut.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png).map_err(|e| PdfError::Render { page: number, reason: e.to_string() })?;
        Ok(png)
    }
}

/// The most pixels a page rendered for a crop may have on its longer side.
const MAX_RENDER_PX: u32 = 8000;

fn walk_outline(mut node: Option<PdfBookmark<'_>>, level: u32, out: &mut Vec<OutlineEntry>) {
    while let Some(bookmark) = node {
        if out.len() >= MAX_OUTLINE_ENTRIES || level > MAX_OUTLINE_DEPTH {
            return;
        }
        let page = bookmark.destination().and_then(|d| d.page_index().ok()).and_then(|i| u32::try_from(i).ok()).map(|i| i + 1);
        let title = bookmark.title().unwrap_or_default().trim().to_string();
        out.push(OutlineEntry { title, level, page });
        walk_outline(bookmark.first_child(), level + 1, out);
        node = bookmark.next_sibling();
    }
}

/// Maps PDF user space (origin bottom-left, unrotated) to the displayed page (origin top-left).
struct PageFrame {
    rotation: PdfPageRenderRotation,
    /// Displayed size.
    width: f32,
    height: f32,
}

impl PageFrame {
    fn new(rotation: PdfPageRenderRotation, width: f32, height: f32) -> PageFrame {
        PageFrame { rotation, width, height }
    }

    fn point(&self, x: f32, y: f32) -> (f32, f32) {
        // For 90/270 the displayed width is the unrotated height and vice versa.
        match self.rotation {
            PdfPageRenderRotation::None => (x, self.height - y),
            PdfPageRenderRotation::Degrees90 => (y, x),
            PdfPageRenderRotation::Degrees180 => (self.width - x, y),
            PdfPageRenderRotation::Degrees270 => (self.width - y, self.height - x),
        }
    }

    /// The displayed box of a user-space rectangle, clipped to the page; None when it lies
    /// wholly outside the page (clipped or hidden text).
    fn rect(&self, r: &PdfRect) -> Option<BoundingBox> {
        let (ax, ay) = self.point(r.left().value, r.bottom().value);
        let (bx, by) = self.point(r.right().value, r.top().value);
        let b = BoundingBox { x0: ax.min(bx), y0: ay.min(by), x1: ax.max(bx), y1: ay.max(by) };
        if b.x1 < 0.0 || b.y1 < 0.0 || b.x0 > self.width || b.y0 > self.height {
            return None;
        }
        Some(BoundingBox {
            x0: b.x0.clamp(0.0, self.width),
            y0: b.y0.clamp(0.0, self.height),
            x1: b.x1.clamp(0.0, self.width),
            y1: b.y1.clamp(0.0, self.height),
        })
    }
}

/// The boxes of the images, paths and forms drawn on a page, the largest first.
fn read_drawn(page: &PdfPage<'_>, frame: &PageFrame) -> Vec<(Drawn, BoundingBox)> {
    let mut out = Vec::new();
    for object in page.objects().iter().take(MAX_OBJECTS_SCANNED) {
        let kind = match object.object_type() {
            PdfPageObjectType::Image => Drawn::Image,
            PdfPageObjectType::Path => Drawn::Path,
            PdfPageObjectType::XObjectForm => Drawn::Form,
            _ => continue,
        };
        if let Some(b) = object.bounds().ok().and_then(|q| frame.rect(&q.to_rect())) {
            out.push((kind, b));
        }
    }
    out.sort_by(|a, b| (b.1.width() * b.1.height()).total_cmp(&(a.1.width() * a.1.height())));
    out.truncate(MAX_DRAWN);
    out
}

fn read_glyphs(page: &PdfPage<'_>, frame: &PageFrame) -> Result<Vec<Glyph>, PdfiumError> {
    let text = page.text()?;
    let chars = text.chars();
    let mut glyphs = Vec::with_capacity(chars.len());
    let mut last_font: Option<(f32, Option<PdfFontWeight>, bool)> = None;
    for i in 0..chars.len() {
        let c = chars.get(i)?;
        let Some(mut ch) = c.unicode_char() else { continue };
        // PDFium marks a hyphen that breaks a word at the end of a line with U+0002.
        if ch == '\u{2}' {
            ch = '-';
        }
        let generated = c.is_generated().unwrap_or(false);
        if ch.is_whitespace() || ch.is_control() {
            glyphs.push(Glyph { ch, bbox: BoundingBox { x0: 0.0, y0: 0.0, x1: 0.0, y1: 0.0 }, font_size: 0.0, bold: false, generated, angle: 0.0 });
            continue;
        }
        let Some(bbox) = c.loose_bounds().ok().and_then(|r| frame.rect(&r)) else { continue };
        let font_size = c.unscaled_font_size().value;
        let angle = c.angle_degrees().unwrap_or(0.0);
        let weight = c.font_weight();
        // The font name costs an allocation per call; ask only when the style changes.
        let bold = match last_font {
            Some((size, w, bold)) if size == font_size && w == weight => bold,
            _ => {
                let bold = is_bold(weight, &c.font_name());
                last_font = Some((font_size, weight, bold));
                bold
            }
        };
        glyphs.push(Glyph { ch, bbox, font_size, bold, generated, angle });
    }
    Ok(glyphs)
}

fn is_bold(weight: Option<PdfFontWeight>, name: &str) -> bool {
    let heavy = match weight {
        Some(PdfFontWeight::Custom(w)) => w >= 600,
        Some(PdfFontWeight::Weight600) | Some(PdfFontWeight::Weight700Bold) | Some(PdfFontWeight::Weight800) | Some(PdfFontWeight::Weight900) => true,
        _ => false,
    };
    let name = name.to_ascii_lowercase();
    heavy || ["bold", "black", "heavy", "semibold", "demi"].iter().any(|k| name.contains(k))
}

fn render_png(page: &PdfPage<'_>, width: f32, height: f32, max_px: u32) -> Result<Vec<u8>, String> {
    let scale = max_px as f32 / width.max(height).max(1.0);
    let (w, h) = (((width * scale).round() as i32).max(1), ((height * scale).round() as i32).max(1));
    let config = PdfRenderConfig::new().set_target_size(w, h).render_form_data(true);
    let bitmap = page.render_with_config(&config).map_err(|e| format!("{e:?}"))?;
    let (bw, bh) = (bitmap.width() as u32, bitmap.height() as u32);
    let rgba = bitmap.as_rgba_bytes();
    let rgb: Vec<u8> = rgba.chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect();
    let mut png = Vec::new();
    let encoder =
        image::codecs::png::PngEncoder::new_with_quality(&mut png, image::codecs::png::CompressionType::Fast, image::codecs::png::FilterType::Adaptive);
    image::ImageEncoder::write_image(encoder, &rgb, bw, bh, image::ExtendedColorType::Rgb8).map_err(|e| e.to_string())?;
    Ok(png)
}
