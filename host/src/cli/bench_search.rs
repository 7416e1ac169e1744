//! `evident bench search`: how long one question's MaxSim search takes over a store's pages,
//! the first time (vectors read from the store) and warm (vectors kept in memory), as a server
//! answers it; or, with `--synthetic-pages`, over a corpus of any size (`bench_scale`).

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Result, bail};
use clap::Args;
use evident::retrieval::{CandidateSettings, CandidateStage, PageVectorCache, Ranker, SearchMode, has_current_vectors};

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
    /// Instead of the store's vectors, this many pages of random unit vectors, with token
    /// counts drawn from the store's pages, searched at once as a corpus (measured at 1,000,
    /// 10,000, ... up to this many).
    #[arg(long)]
    synthetic_pages: Option<usize>,
    /// With --synthetic-pages: pages pooled to one vector per this many tokens (default:
    /// `ingest.token_pool_factor`).
    #[arg(long, requires = "synthetic_pages", value_parser = clap::value_parser!(u32).range(1..=8))]
    pool_factor: Option<u32>,
    /// Also search through a candidate stage (PLAID's centroid codes) that scores only this
    /// many pages a question exactly; 0: exact MaxSim over every page only.
    #[arg(long, default_value_t = 0)]
    candidates: usize,
    /// Centroids of the candidate stage.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=65536))]
    centroids: u32,
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
    if let Some(pages) = args.synthetic_pages {
        let pool_factor = args.pool_factor.unwrap_or(ctx.config.ingest.token_pool_factor);
        return super::bench_scale::run(
            ctx,
            super::bench_scale::ScaleArgs {
                pages,
                pool_factor,
                runs: args.runs,
                k: args.k,
                candidates: args.candidates,
                centroids: args.centroids as usize,
                questions: &QUESTIONS,
            },
        );
    }
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
    let candidates = CandidateStage::new(CandidateSettings {
        min_pages: usize::from(args.candidates > 0),
        per_question: args.candidates.max(1),
        centroids: args.centroids as usize,
    });
    let ranker = Ranker {
        store: &store,
        lexical: &lexical,
        encoder: Some(&encoder),
        maxsim: &maxsim,
        vectors: Some(&cache),
        candidates: Some(&candidates),
        alpha: 0.5,
        document_weight: ctx.config.retrieval.document_weight,
    };
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
    if args.candidates > 0 {
        // The same questions exactly, for how much of the top k the candidate stage keeps.
        let exact = Ranker { candidates: None, ..ranker };
        let mut kept = 0;
        let mut shown = 0;
        for question in QUESTIONS {
            let want: std::collections::HashSet<(String, u32)> =
                exact.rank(&[question], &docs, SearchMode::Maxsim, args.k)?[0].iter().map(|h| (h.doc.clone(), h.page)).collect();
            let got = ranker.rank(&[question], &docs, SearchMode::Maxsim, args.k)?;
            kept += got[0].iter().filter(|h| want.contains(&(h.doc.clone(), h.page))).count();
            shown += want.len();
        }
        println!(
            "candidate stage: {} centroids, {} pages a question scored exactly; it keeps {kept} of the exact top-{} pages of {} questions ({:.1} %)",
            args.centroids,
            args.candidates,
            args.k,
            QUESTIONS.len(),
            100.0 * kept as f64 / shown.max(1) as f64
        );
    }
    println!("{:<44} {:>9}", "search (question encoding + MaxSim + top-k)", "ms");
    println!("{:<44} {cold:>9.1}", "first, vectors read from the store");
    println!("{:<44} {:>9.1}", format!("warm, median of {}", args.runs), percentile(&total, 0.5));
    println!("{:<44} {:>9.1}", "warm, 95th percentile", percentile(&total, 0.95));
    println!("{:<44} {:>9.1}", "  of which question encoding, median", percentile(&encode, 0.5));
    Ok(ExitCode::SUCCESS)
}
