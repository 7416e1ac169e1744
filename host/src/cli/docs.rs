//! `evident docs`, `evident show`, `evident rm`

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Args;
use serde_json::json;

use super::Context;

/// Arguments of `evident docs`.
#[derive(Args)]
pub struct DocsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Arguments of `evident show`.
#[derive(Args)]
pub struct ShowArgs {
    /// Document: id (or its first 4+ characters), file name or title.
    doc: String,
    /// Page to show (1-based); without it, the document's details and outline.
    #[arg(long, short)]
    page: Option<u32>,
    /// Write the page's rendered image (PNG) to this file.
    #[arg(long, requires = "page", value_name = "FILE")]
    image: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `evident rm`.
#[derive(Args)]
pub struct RmArgs {
    /// Document: id (or its first 4+ characters), file name or title.
    doc: String,
}

/// Lists the documents.
pub fn list(ctx: &Context, args: DocsArgs) -> Result<ExitCode> {
    let docs = ctx.store()?.documents()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&docs)?);
        return Ok(ExitCode::SUCCESS);
    }
    if docs.is_empty() {
        println!("The store is empty; add PDFs with `evident ingest <PDF or folder>`.");
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:<16}  {:>5}  {:<40}  file", "id", "pages", "title");
    for d in &docs {
        let file = std::path::Path::new(&d.source_path).file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
        println!("{:<16}  {:>5}  {:<40}  {}", d.id, d.page_count, truncate(&d.title, 40), file);
    }
    let pages: u64 = docs.iter().map(|d| u64::from(d.page_count)).sum();
    println!("{} documents, {pages} pages", docs.len());
    Ok(ExitCode::SUCCESS)
}

/// Shows a document or one of its pages.
pub fn show(ctx: &Context, args: ShowArgs) -> Result<ExitCode> {
    let store = ctx.store()?;
    let doc = store.resolve(&args.doc)?;
    let Some(number) = args.page else {
        let outline = evident::ingest::document_outline(&store, &doc)?;
        let damage = store.damage(&doc)?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&json!({ "document": doc, "outline": outline, "damage": damage }))?);
        } else {
            println!("{} ({})\n  {} pages, from {}", doc.title, doc.id, doc.page_count, doc.source_path);
            println!("  sha256 {}", doc.content_hash);
            if !damage.is_empty() {
                println!("  damaged{}", super::ingest::damage_note(&damage).replacen(';', ":", 1));
            }
            if doc.pages_without_text > 0 {
                println!("  {} pages have no text layer", doc.pages_without_text);
            }
            if outline.is_empty() {
                println!("  no outline");
            }
            for entry in &outline {
                let page = entry.page.map(|p| format!("p. {p}")).unwrap_or_default();
                println!("  {}{}  {page}", "  ".repeat(entry.level as usize), entry.title);
            }
        }
        return Ok(ExitCode::SUCCESS);
    };
    let page = store.page(&doc, number)?;
    if let Some(out) = &args.image {
        let png = store.page_image(&doc, number)?.with_context(|| format!("page images of {} were not rendered at ingest", doc.id))?;
        std::fs::write(out, png).with_context(|| format!("cannot write {}", out.display()))?;
    }
    let regions = store.regions(&doc, number)?;
    let ocr = store.page_ocr(&doc, number)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&json!({ "document": doc.id, "page": page, "regions": regions, "ocr": ocr }))?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{} ({}), page {} of {}: {:.0} x {:.0} pt", doc.title, doc.id, number, doc.page_count, page.width, page.height);
    if !page.has_text_layer {
        println!("(no text layer: a scanned page)");
    }
    if let Some(ocr) = &ocr {
        let words = ocr.word_confidence.len();
        let mean = if words == 0 { 0.0 } else { ocr.word_confidence.iter().sum::<f32>() / words as f32 };
        println!("(blocks {:?} were read by OCR ({}): {words} words, mean confidence {mean:.2})", ocr.blocks, ocr.engine);
    }
    for (i, b) in page.blocks.iter().enumerate() {
        let style = format!("{:.1}pt{}", b.font_size, if b.bold { " bold" } else { "" });
        println!("\n[{i}] ({:.1}, {:.1}, {:.1}, {:.1}) {style}", b.bbox.x0, b.bbox.y0, b.bbox.x1, b.bbox.y1);
        for line in &b.lines {
            println!("    {}", line.text());
        }
    }
    for r in &regions {
        let caption = if r.caption.is_empty() { String::new() } else { format!(" \"{}\"", r.caption) };
        println!("\n{} ({:.1}, {:.1}, {:.1}, {:.1}), blocks {:?}{caption}", r.kind.as_str(), r.bbox.x0, r.bbox.y0, r.bbox.x1, r.bbox.y1, r.blocks);
    }
    Ok(ExitCode::SUCCESS)
}

/// Removes a document.
pub fn remove(ctx: &Context, args: RmArgs) -> Result<ExitCode> {
    let store = ctx.store()?;
    let doc = store.resolve(&args.doc)?;
    evident::server::remove_document(&store, &ctx.lexical()?, &ctx.config.data_dir, &doc).map_err(anyhow::Error::msg)?;
    println!("removed  {}  {} ({} pages)", doc.id, doc.title, doc.page_count);
    Ok(ExitCode::SUCCESS)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}
