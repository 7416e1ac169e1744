//! `evident index` and `evident search`

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use evident::retrieval::{Ranker, SearchMode, best_snippet, index_document};
use indicatif::{ProgressBar, ProgressStyle};

use super::Context;

/// Arguments of `evident index`.
#[derive(Args)]
pub struct IndexArgs {
    /// Only these documents (id, file name or title); default: all.
    docs: Vec<String>,
    /// Also run this profile's enrich stage where it is marked `at_ingest = false` (repeatable);
    /// without it, `index` runs the stages that ingest runs.
    #[arg(long = "profile")]
    profiles: Vec<String>,
}

/// Arguments of `evident search`.
#[derive(Args)]
pub struct SearchArgs {
    /// The question.
    question: String,
    /// How many pages to return.
    #[arg(long, default_value_t = 20)]
    k: usize,
    /// Search only this document (repeatable; id, file name or title). Default: all.
    #[arg(long = "doc")]
    docs: Vec<String>,
    /// Ranking: late-interaction MaxSim, BM25, or both fused.
    #[arg(long, value_enum, default_value_t = SearchMode::Hybrid)]
    mode: SearchMode,
    /// Weight of BM25 in hybrid mode.
    #[arg(long, default_value_t = 0.5)]
    alpha: f32,
    /// Over several documents, weight of a page's document in its score (default:
    /// retrieval.document_weight; 0 ranks pages alone).
    #[arg(long, value_name = "W", value_parser = unit_weight)]
    document_weight: Option<f32>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Parses a weight that must lie in [0, 1].
pub(super) fn unit_weight(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(w) if (0.0..=1.0).contains(&w) => Ok(w),
        _ => Err(format!("{s} is not a weight between 0 and 1")),
    }
}

/// Brings the retrieval indexes of the store up to date, then the profiles' enrich stages
/// (resuming interrupted ones, redoing stale ones).
pub fn index(ctx: &Context, args: IndexArgs) -> Result<ExitCode> {
    let store = std::sync::Arc::new(ctx.store()?);
    let docs = resolve_docs(&store, &args.docs)?;
    ocr_unread_pages(ctx, &store, &docs)?;
    run_index(&store, &ctx.lexical()?, &ctx.encoder()?, &docs, ctx.config.ingest.token_pool_factor)?;
    let ready: Vec<_> = docs.into_iter().filter(|d| matches!(evident::retrieval::needs_index(&store, d), Ok(false))).collect();
    Ok(if super::enrich::run(ctx, &store, &ready, evident::enrich::EnrichWhen::Index { profiles: &args.profiles })? {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Reads with OCR the scanned pages of documents ingested without it (before OCR existed, or
/// with `--ocr never`), when `ingest.ocr` is not `never`.
fn ocr_unread_pages(ctx: &Context, store: &evident::store::Store, docs: &[evident::store::DocumentRecord]) -> Result<()> {
    let candidates: Vec<_> = docs.iter().filter(|d| d.pages_without_text > 0).collect();
    if candidates.is_empty() {
        return Ok(());
    }
    let Some(settings) = evident::ingest::OcrSettings::load(&ctx.config, ctx.config.ingest.ocr)? else {
        return Ok(());
    };
    let worker = ctx.pdf_worker()?;
    let progress = evident::ingest::IngestProgress::new(candidates.len());
    for doc in candidates {
        match evident::ingest::ocr_stored_document(store, &worker, doc, &settings, &progress) {
            Ok(0) => {}
            Ok(n) => progress.println(&format!("ocr      {}  {} ({n} pages read by OCR)", doc.id, doc.title)),
            Err(e) => progress.println(&format!("failed   OCR of {}: {e}", doc.id)),
        }
        progress.file_done();
    }
    progress.finish();
    Ok(())
}

/// The documents named (id, file name or title), or all when none are.
fn resolve_docs(store: &evident::store::Store, names: &[String]) -> Result<Vec<evident::store::DocumentRecord>> {
    if names.is_empty() {
        return Ok(store.documents()?);
    }
    Ok(names.iter().map(|d| store.resolve(d)).collect::<Result<_, _>>()?)
}

/// Indexes `docs`, with a progress bar over pages.
pub fn run_index(
    store: &evident::store::Store,
    lexical: &evident::retrieval::LexicalIndex,
    encoder: &evident::models::TextEncoder,
    docs: &[evident::store::DocumentRecord],
    pool_factor: u32,
) -> Result<ExitCode> {
    let total: u64 = docs.iter().map(|d| u64::from(d.page_count)).sum();
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("index [{bar:30.cyan/blue}] {pos}/{len} pages  {per_sec}  eta {eta}  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let (mut done, mut current) = (0, 0);
    for doc in docs {
        bar.set_message(doc.title.chars().take(40).collect::<String>());
        let started = Instant::now();
        if index_document(store, lexical, encoder, doc, pool_factor)? {
            done += 1;
            bar.suspend(|| println!("indexed  {}  {} ({} pages, {:.1} s)", doc.id, doc.title, doc.page_count, started.elapsed().as_secs_f64()));
        } else {
            current += 1;
        }
        bar.inc(u64::from(doc.page_count));
    }
    bar.finish_and_clear();
    println!("{done} indexed, {current} already up to date");
    Ok(ExitCode::SUCCESS)
}

/// Ranks pages for a question.
pub fn search(ctx: &Context, args: SearchArgs) -> Result<ExitCode> {
    let store = ctx.store()?;
    let scope = resolve_docs(&store, &args.docs)?;
    let mut docs = Vec::with_capacity(scope.len());
    let mut unindexed = Vec::new();
    for doc in scope {
        if evident::retrieval::needs_index(&store, &doc)? { unindexed.push(doc) } else { docs.push(doc) }
    }
    if docs.is_empty() && !unindexed.is_empty() {
        anyhow::bail!("none of the {} documents in scope is indexed yet; run `evident index`", unindexed.len());
    }
    if let Some(notice) = evident::pipeline::unindexed_notice(&unindexed) {
        eprintln!("note: {notice}");
    }
    let lexical = ctx.lexical()?;
    let encoder = if args.mode == SearchMode::Bm25 { None } else { Some(ctx.encoder()?) };
    let maxsim = ctx.maxsim()?;
    // One search: training a codebook and coding every page would cost more than it saves.
    let ranker = Ranker {
        store: &store,
        lexical: &lexical,
        encoder: encoder.as_ref(),
        maxsim: &maxsim,
        vectors: None,
        candidates: None,
        alpha: args.alpha,
        document_weight: args.document_weight.unwrap_or(ctx.config.retrieval.document_weight),
    };
    let started = Instant::now();
    let hits = ranker.rank(&[args.question.as_str()], &docs, args.mode, args.k)?.remove(0);
    let elapsed = started.elapsed();
    let titles: std::collections::HashMap<&str, &str> = docs.iter().map(|d| (d.id.as_str(), d.title.as_str())).collect();
    let mut rows = Vec::new();
    for hit in &hits {
        let doc = docs.iter().find(|d| d.id == hit.doc).expect("hit from a searched document");
        let snippet = best_snippet(&store.page(doc, hit.page)?, &args.question);
        rows.push((hit, snippet));
    }
    if args.json {
        let out: Vec<_> = rows
            .iter()
            .map(|(h, s)| serde_json::json!({ "doc": h.doc, "title": titles[h.doc.as_str()], "page": h.page, "score": h.score, "snippet": s }))
            .collect();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    for (rank, (h, snippet)) in rows.iter().enumerate() {
        let title: String = titles[h.doc.as_str()].chars().take(40).collect();
        println!("{:>3}. {:>8.4}  {}  p.{:<4} {title}\n      {snippet}", rank + 1, h.score, h.doc, h.page);
    }
    eprintln!("{} pages ranked by {:?} in {:.0} ms", docs.iter().map(|d| d.page_count).sum::<u32>(), args.mode, elapsed.as_secs_f64() * 1000.0);
    Ok(ExitCode::SUCCESS)
}
