//! `evident ingest`

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use evident::config::OcrMode;
use evident::ingest::{IngestOptions, IngestOutcome, IngestProgress, OcrSettings, collect_pdfs, ingest_file};

use super::Context;

/// Arguments of `evident ingest`.
#[derive(Args)]
pub struct IngestArgs {
    /// PDF files or folders (folders are searched recursively for *.pdf).
    #[arg(required = true, value_name = "PDF_OR_FOLDER")]
    paths: Vec<PathBuf>,
    /// Password for encrypted PDFs.
    #[arg(long)]
    password: Option<String>,
    /// Skip rendering page images (faster; citations then show no picture).
    #[arg(long)]
    no_images: bool,
    /// Skip building the retrieval indexes (token vectors, BM25) and enrich; `evident index`
    /// does both later.
    #[arg(long)]
    no_index: bool,
    /// Skip the profiles' enrich stages; `evident index` runs them later.
    #[arg(long)]
    no_enrich: bool,
    /// Which pages to read with OCR: pages without a text layer and large pictures (auto),
    /// every page (always) or none (never). Default: `ingest.ocr` in the configuration.
    #[arg(long, value_enum)]
    ocr: Option<OcrMode>,
}

/// Ingests every PDF named; one that fails is reported and the rest go on.
pub fn run(ctx: &Context, args: IngestArgs) -> Result<ExitCode> {
    let files = collect_pdfs(&args.paths)?;
    if files.is_empty() {
        anyhow::bail!("no PDF files found in the paths given");
    }
    let store = std::sync::Arc::new(ctx.store()?);
    let worker = ctx.pdf_worker()?;
    let options = IngestOptions {
        password: args.password,
        image_max_px: (ctx.config.ingest.render_images && !args.no_images).then_some(ctx.config.ingest.page_image_max_px),
        ocr: OcrSettings::load(&ctx.config, args.ocr.unwrap_or(ctx.config.ingest.ocr))?,
    };
    let progress = IngestProgress::new(files.len());
    let (mut added, mut present, mut failed, mut pages) = (0, 0, 0, 0u64);
    let mut to_index = Vec::new();
    for path in &files {
        match ingest_file(&store, &worker, path, &options, &progress) {
            Ok(IngestOutcome::Added { doc, damage, seconds, ocr_pages }) => {
                added += 1;
                pages += u64::from(doc.page_count);
                to_index.push(doc.clone());
                let mut scanned = if doc.pages_without_text > 0 { format!(", {} without a text layer", doc.pages_without_text) } else { String::new() };
                if ocr_pages > 0 {
                    scanned.push_str(&format!(", {ocr_pages} read by OCR"));
                }
                progress.println(&format!(
                    "added    {}  {} ({} pages{scanned}{}, {seconds:.1} s)",
                    doc.id,
                    path.display(),
                    doc.page_count,
                    damage_note(&damage)
                ));
            }
            Ok(IngestOutcome::AlreadyPresent { doc }) => {
                present += 1;
                progress.println(&format!("present  {}  {} (already in the store)", doc.id, path.display()));
                // An earlier run may have been stopped while indexing it.
                if evident::retrieval::needs_index(&store, &doc)? {
                    to_index.push(doc);
                }
            }
            Err(e) => {
                failed += 1;
                progress.println(&format!("failed   {e}"));
            }
        }
        progress.file_done();
    }
    progress.finish();
    println!("{added} added ({pages} pages), {present} already present, {failed} failed");
    let mut enriched = true;
    if !args.no_index && !to_index.is_empty() {
        super::search::run_index(&store, &ctx.lexical()?, &ctx.encoder()?, &to_index, ctx.config.ingest.token_pool_factor)?;
        if !args.no_enrich {
            enriched = super::enrich::run(ctx, &store, &to_index, evident::enrich::EnrichWhen::Ingest)?;
        }
    }
    Ok(if failed > 0 || !enriched { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// What a damaged file lost, for the line that reports it (empty for a whole file).
pub fn damage_note(damage: &evident::store::DamageRecord) -> String {
    let mut note = String::new();
    if damage.truncated {
        note.push_str("; it was truncated and PDFium rebuilt what was there");
    }
    if !damage.lost_pages.is_empty() {
        let pages: Vec<String> = damage.lost_pages.iter().take(20).map(u32::to_string).collect();
        let more = if damage.lost_pages.len() > 20 { " ..." } else { "" };
        note.push_str(&format!("; {} unreadable and kept empty: page {}{more}", damage.lost_pages.len(), pages.join(", ")));
    }
    note
}
