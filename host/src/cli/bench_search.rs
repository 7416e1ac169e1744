//! `evident bench search`: how long one question's MaxSim search takes over a store's pages,
//! the first time (vectors read from the store) and warm (vectors kept in memory), as a server
//! answers it.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Result, bail};
use clap::Args;
use evident::retrieval::{PageVectorCache, Ranker, SearchMode, has_current_vectors};

use super::{Context, percentile};

/// Arguments of `evident bench search`.
#[derive(Args)]
pub struct BenchSearchArgs {
    /// Pages to search over: indexed documents are taken in store order until there are this many.
    #[arg(long, default_value_t = 1000)]
    pages: u32,
    /// Warm searches to time.
    #[arg(long, default_value_t = 30)]
    runs: usize,
    /// Hits kept per search.
    #[arg(long, default_value_t = 20)]
    k: usize,
}

const QUESTIONS: [&str; 6] = [
    "What was the total revenue in fiscal year 2022?",
    "How much did capital expenditure change compared with the previous year?",
    "Which segment had the highest operating margin?",
    "What is the dividend payout ratio?",
    "How many employees did the company have at the end of the year?",
    "What were the main risks named for the supply chain?",
];

/// Runs the benchmark over the configured store.
pub fn run(ctx: &Context, args: BenchSearchArgs) -> Result<ExitCode> {
    let store = ctx.store()?;
    let mut docs = Vec::new();
    let mut pages = 0;
    for doc in store.documents()? {
        if pages >= args.pages {
            break;
        }
        if has_current_vectors(&store.index_state(&doc)?) {
            pages += doc.page_count;
            docs.push(doc);
        }
    }
    if pages < args.pages {
        bail!("the store has only {pages} indexed pages; ingest and index more PDFs, or ask for fewer with --pages");
    }
    let lexical = ctx.lexical()?;
    let encoder = ctx.encoder()?;
    let maxsim = ctx.maxsim()?;
    let cache = PageVectorCache::new(ctx.config.compute.vector_cache_mib.max(4096));
    let ranker = Ranker { store: &store, lexical: &lexical, encoder: Some(&encoder), maxsim: &maxsim, vectors: Some(&cache), alpha: 0.5 };
    let started = Instant::now();
    ranker.rank(&[QUESTIONS[0]], &docs, SearchMode::Maxsim, args.k)?;
    let cold = started.elapsed().as_secs_f64() * 1e3;
    let (_, bytes) = cache.usage();
    let mut total = Vec::with_capacity(args.runs);
    let mut encode = Vec::with_capacity(args.runs);
    for r in 0..args.runs {
        let question = QUESTIONS[r % QUESTIONS.len()];
        let started = Instant::now();
        encoder.token_vectors(&[question])?;
        encode.push(started.elapsed().as_secs_f64() * 1e3);
        let started = Instant::now();
        let hits = ranker.rank(&[question], &docs, SearchMode::Maxsim, args.k)?;
        total.push(started.elapsed().as_secs_f64() * 1e3);
        if hits[0].len() != args.k.min(pages as usize) {
            bail!("a search returned {} hits instead of {}", hits[0].len(), args.k);
        }
    }
    let tokens: usize = docs.iter().map(|d| cache.get(&store, d, encoder.dim()).map(|v| v.pages.token_count())).sum::<Result<_, _>>()?;
    println!(
        "{} documents, {pages} pages, {tokens} page-token vectors ({:.0} MiB in memory); MaxSim on {}",
        docs.len(),
        bytes as f64 / f64::from(1 << 20),
        maxsim.name()
    );
    println!("{:<44} {:>9}", "search (question encoding + MaxSim + top-k)", "ms");
    println!("{:<44} {cold:>9.1}", "first, vectors read from the store");
    println!("{:<44} {:>9.1}", format!("warm, median of {}", args.runs), percentile(&total, 0.5));
    println!("{:<44} {:>9.1}", "warm, 95th percentile", percentile(&total, 0.95));
    println!("{:<44} {:>9.1}", "  of which question encoding, median", percentile(&encode, 0.5));
    Ok(ExitCode::SUCCESS)
}
