//! Enrich after ingest and index (the profiles' enrich stages), and `evident artifacts`.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use clap::Args;
use evident::enrich::{EnrichWhen, enrich_all, enrich_stages, needs_enrich, stale_sets};
use evident::retrieval::{ArtifactQuery, SearchMode};
use evident::store::{DocumentRecord, Store};
use indicatif::{ProgressBar, ProgressStyle};

use super::Context;

/// Runs the profiles' enrich stages that run `when` over `docs` (those with work left); false
/// when a stage failed on some document (each failure is printed; the documents stay stored
/// and indexed).
pub fn run(ctx: &Context, store: &Arc<Store>, docs: &[DocumentRecord], when: EnrichWhen) -> Result<bool> {
    let registry = ctx.registry(store.clone())?;
    let (stages, problems) = enrich_stages(&registry);
    for problem in problems {
        eprintln!("note: {problem}");
    }
    if let EnrichWhen::Index { profiles } = when {
        let known = registry.profile_names();
        if let Some(unknown) = profiles.iter().find(|p| !known.contains(p)) {
            anyhow::bail!("there is no profile named {unknown} (there are: {})", known.join(", "));
        }
    }
    let mut todo = Vec::new();
    for doc in docs {
        if needs_enrich(store, doc, &stages, when)? {
            todo.push(doc.clone());
        }
    }
    if todo.is_empty() {
        return Ok(true);
    }
    let services = ctx.services(store.clone())?;
    let running = stages.iter().filter(|s| s.runs(when)).count() as u64;
    if running < stages.len() as u64 {
        let later: Vec<&str> = stages.iter().filter(|s| !s.runs(when)).flat_map(|s| s.profiles.iter().map(String::as_str)).collect();
        eprintln!("note: the enrich stage of {} runs only when asked: `evident index --profile {}`", later.join(", "), later[0]);
    }
    let total: u64 = todo.iter().map(|d| u64::from(d.page_count)).sum::<u64>() * running;
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("enrich [{bar:30.cyan/blue}] {pos}/{len} pages  eta {eta}  {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let mut all_ok = true;
    for doc in &todo {
        for stage in stages.iter().filter(|s| s.runs(when)) {
            bar.suspend(|| eprintln!("enriching {} with {} (set {}, {} pages)", doc.id, stage.plugin, stage.set, doc.page_count));
        }
        // Without a terminal there is no bar: a line per page is the progress a log shows.
        let lines = !std::io::stderr().is_terminal();
        let on_page = |stage: &evident::enrich::EnrichStage, done: u32, total: u32| {
            bar.set_message(format!("{} {}", doc.id, stage.plugin));
            bar.inc(1);
            if lines {
                eprintln!("enrich {} {}: page {done} of {total}", doc.id, stage.plugin);
            }
        };
        for report in enrich_all(&services, registry.runtime(), &stages, when, doc, &on_page)? {
            let cost = format!("{} model calls, {} tokens, {:.1} s", report.llm_calls, report.tokens, report.seconds);
            let resumed = report.resumed_at.map(|p| format!(", resumed at page {p}")).unwrap_or_default();
            bar.suspend(|| match (&report.failure, report.already_done) {
                (Some(failure), _) => {
                    all_ok = false;
                    println!("failed   {failure} (the document is stored and searchable; `evident index` tries the stage again)");
                }
                (None, true) => println!("enriched {}  {} already complete ({} artifacts)", doc.id, report.plugin, report.artifacts),
                (None, false) => {
                    println!("enriched {}  {}: {} artifacts from {} pages{resumed} ({cost})", doc.id, report.plugin, report.artifacts, report.pages_run)
                }
            });
        }
    }
    bar.finish_and_clear();
    Ok(all_ok)
}

/// Arguments of `evident artifacts`.
#[derive(Args)]
pub struct ArtifactsArgs {
    /// The document (id, file name or title).
    doc: String,
    /// Rank the artifacts of the current enrich stages for this text instead of listing them.
    #[arg(long)]
    search: Option<String>,
    /// Only artifacts of this kind.
    #[arg(long, default_value = "")]
    kind: String,
    /// Ranking for --search.
    #[arg(long, value_enum, default_value_t = SearchMode::Hybrid)]
    mode: SearchMode,
    /// Weight of BM25 in hybrid mode.
    #[arg(long, default_value_t = 0.5)]
    alpha: f32,
    /// How many artifacts to show (per set).
    #[arg(long, default_value_t = 20)]
    k: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Shows a document's enrich sets (complete, unfinished, failed or stale) and their artifacts.
pub fn artifacts(ctx: &Context, args: ArtifactsArgs) -> Result<ExitCode> {
    let store = Arc::new(ctx.store()?);
    let doc = store.resolve(&args.doc)?;
    let registry = ctx.registry(store.clone())?;
    let (stages, _) = enrich_stages(&registry);
    let stale: Vec<String> = stale_sets(&store, &doc, &stages)?.into_iter().map(|s| s.set).collect();
    let encoder = match args.search {
        Some(_) => Some(ctx.encoder()?),
        None => None,
    };
    let maxsim = ctx.maxsim()?;
    let mut sets = Vec::new();
    for set in store.enrich_sets(&doc.id)? {
        let state = if stale.contains(&set.set) {
            "stale"
        } else if set.complete {
            "complete"
        } else if set.failure.is_some() {
            "failed"
        } else {
            "unfinished"
        };
        let shown: Vec<serde_json::Value> = match (&args.search, &encoder) {
            (Some(query), Some(encoder)) if set.complete => {
                // One search: nothing to keep between calls.
                let cache = evident::retrieval::ArtifactCache::new(0);
                let q = ArtifactQuery { store: &store, encoder, maxsim: &maxsim, set: &set.set, cache: &cache };
                let (hits, _) = q.search(query, &args.kind, args.mode, args.alpha, args.k, std::slice::from_ref(&doc))?;
                hits.iter().map(|h| artifact_json(&h.found.artifact, Some(h.score))).collect()
            }
            (Some(_), _) => Vec::new(),
            (None, _) => store
                .artifacts(&doc.id, &set.set)?
                .iter()
                .filter(|a| args.kind.is_empty() || a.kind == args.kind)
                .take(args.k)
                .map(|a| artifact_json(&evident::retrieval::stored_artifact(&doc.id, a).artifact, None))
                .collect(),
        };
        sets.push(serde_json::json!({
            "set": set.set, "plugin": set.plugin, "plugin_sha256": set.plugin_sha256, "params": set.params,
            "state": state, "pages_done": set.pages_done, "pages": doc.page_count, "artifacts": set.artifacts,
            "failure": set.failure, "llm_calls": set.llm_calls, "tokens": set.tokens, "seconds": set.seconds,
            "shown": shown,
        }));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "document": doc.id, "sets": sets }))?);
        return Ok(ExitCode::SUCCESS);
    }
    if sets.is_empty() {
        println!("{} has no artifacts: no profile names an enrich stage, or `evident index` has not run one yet", doc.id);
    }
    for set in &sets {
        let seconds = set["seconds"].as_f64().unwrap_or(0.0);
        let pages_done = set["pages_done"].as_u64().unwrap_or(0);
        let per_page = if pages_done > 0 { format!(" ({:.2} s a page)", seconds / pages_done as f64) } else { String::new() };
        println!(
            "set {}  {}  {}  {}/{} pages, {} artifacts; {} model calls, {} tokens, {seconds:.1} s{per_page}{}",
            set["set"].as_str().unwrap_or_default(),
            set["plugin"].as_str().unwrap_or_default(),
            set["state"].as_str().unwrap_or_default(),
            set["pages_done"],
            set["pages"],
            set["artifacts"],
            set["llm_calls"],
            set["tokens"],
            set["failure"].as_str().map(|f| format!("\n    {f}")).unwrap_or_default()
        );
        for a in set["shown"].as_array().into_iter().flatten() {
            let score = a["score"].as_f64().map(|s| format!("{s:>8.4}  ")).unwrap_or_default();
            let page = a["page"].as_u64().map(|p| format!("p.{p}")).unwrap_or_else(|| "doc".into());
            let text: String = a["text"].as_str().unwrap_or_default().chars().take(100).collect();
            println!("  {score}{:<12} {:<10} {page:<6} {text}", a["key"].as_str().unwrap_or_default(), a["kind"].as_str().unwrap_or_default());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn artifact_json(a: &evident::plugins::types::Artifact, score: Option<f32>) -> serde_json::Value {
    serde_json::json!({
        "key": a.key, "kind": a.kind, "page": a.anchor.page, "blocks": a.anchor.blocks,
        "bbox": a.anchor.bbox.map(|(x0, y0, x1, y1)| [x0, y0, x1, y1]),
        "text": a.text, "fields": a.fields.iter().map(|f| (f.key.clone(), f.value.clone())).collect::<Vec<_>>(),
        "links": a.links, "score": score,
    })
}
