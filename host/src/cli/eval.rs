//! `evident eval`: retrieval quality on a benchmark's questions.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Args;
use evident::eval::{ROUTING_KS, RankingReport, load_questions, score_rankings};
use evident::retrieval::{CandidateStage, PageVectorCache, Ranker, SearchMode};

use super::Context;

/// Arguments of `evident eval`.
#[derive(Args)]
pub struct EvalArgs {
    /// Questions, one JSON object a line (source, qid, doc, question, evidence_pages); the dev
    /// benchmark's are ../shared/bench/questions.jsonl in a checkout.
    #[arg(long, value_name = "FILE")]
    questions: PathBuf,
    /// Cut-offs K, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,3,5,10")]
    k: Vec<usize>,
    /// Ranking modes to compare (repeatable).
    #[arg(long = "mode", value_enum, default_values_t = [SearchMode::Maxsim, SearchMode::Bm25, SearchMode::Hybrid])]
    modes: Vec<SearchMode>,
    /// Search every document instead of each question's own; the tables then add document
    /// routing accuracy (the question's document first, or among the first three documents).
    #[arg(long)]
    corpus: bool,
    /// Weight of BM25 in hybrid mode.
    #[arg(long, default_value_t = 0.5)]
    alpha: f32,
    /// With --corpus, ranking pages only: weight of a page's document in its score (default:
    /// retrieval.document_weight; 0 ranks pages alone). Profiles take the configuration's.
    #[arg(long, value_name = "W", conflicts_with = "profiles", value_parser = super::search::unit_weight)]
    document_weight: Option<f32>,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Answer the questions with these profiles (repeatable) and compare retrieval (on each
    /// profile's final page order: the retrieve step's, then pages its answer stage found and
    /// read), answer accuracy, rounds, model calls and tokens side by side, instead of ranking
    /// pages only; the same table follows by source, and by the kind of evidence where the
    /// benchmark names it (MMLongBench-Doc's `evidence_sources`).
    #[arg(long = "profile")]
    profiles: Vec<String>,
    /// With --profile: at most this many questions, taken in turn from each source.
    #[arg(long)]
    limit: Option<usize>,
    /// With --profile: append each answer to this JSON-lines file as it comes, and skip the
    /// answers it already holds, so that a long evaluation stopped part way goes on from there.
    #[arg(long, value_name = "FILE")]
    results: Option<PathBuf>,
    /// With --profile: append each answer's trace (every stage's input and output in brief,
    /// the verifier's verdict and score for each page among them) and its stages' log to this
    /// JSON-lines file.
    #[arg(long, value_name = "FILE", requires = "profiles")]
    traces: Option<PathBuf>,
    /// With --profile and --results: ask nothing, judge the answers the log holds again with
    /// today's accuracy rules, and print the table as logged beside the one rejudged.
    #[arg(long, requires = "results")]
    rejudge: bool,
}

/// Evaluates retrieval and prints one table per mode.
pub fn run(ctx: &Context, args: EvalArgs) -> Result<ExitCode> {
    if !args.profiles.is_empty() {
        let log = args.results.as_deref();
        if args.rejudge {
            return super::eval_answers::rejudge_log(&args.questions, &args.profiles, args.limit, &args.k, log.unwrap_or(Path::new("")));
        }
        let run = super::eval_answers::AnswerRun {
            questions: &args.questions,
            profiles: &args.profiles,
            limit: args.limit,
            ks: &args.k,
            json: args.json.as_deref(),
            log,
            traces: args.traces.as_deref(),
            corpus: args.corpus,
        };
        return super::eval_answers::run(ctx, run);
    }
    let questions = load_questions(&args.questions)?;
    let store = ctx.store()?;
    let docs = store.documents()?;
    let lexical = ctx.lexical()?;
    let needs_encoder = args.modes.iter().any(|m| *m != SearchMode::Bm25);
    let encoder = if needs_encoder { Some(ctx.encoder()?) } else { None };
    let maxsim = ctx.maxsim()?;
    let candidates = CandidateStage::new(evident::retrieval::CandidateSettings::of(&ctx.config.compute));
    // Over the whole corpus every group of questions searches every document: keep the vectors.
    let cache = PageVectorCache::new(if args.corpus { ctx.config.compute.vector_cache_mib.max(8192) } else { 0 });
    let ranker = Ranker {
        store: &store,
        lexical: &lexical,
        encoder: encoder.as_ref(),
        maxsim: &maxsim,
        vectors: args.corpus.then_some(&cache),
        candidates: Some(&candidates),
        alpha: args.alpha,
        document_weight: args.document_weight.unwrap_or(ctx.config.retrieval.document_weight),
    };
    let reports = score_rankings(&ranker, &questions, &docs, &args.modes, &args.k, args.corpus)?;
    let mut json = Vec::new();
    for r in &reports {
        print_table(r, &args.k, args.corpus);
        for (source, t) in &r.by_source {
            let mut row = serde_json::json!({
                "mode": r.mode, "source": source, "questions": t.n, "k": args.k,
                "recall": t.recall(), "ndcg": t.ndcg(), "mrr": t.mrr(),
                "seconds": r.seconds, "scope": if args.corpus { "corpus" } else { "document" },
            });
            if args.corpus {
                row["document_routing"] = serde_json::json!({ "k": ROUTING_KS, "accuracy": t.routing() });
            }
            json.push(row);
        }
    }
    if let Some(r) = reports.first() {
        println!(
            "{} questions scored; {} without evidence pages (not answerable) and {} whose document is not in the store were left out",
            r.scored, r.unanswerable, r.missing
        );
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&json)?).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(report: &RankingReport, ks: &[usize], corpus: bool) {
    println!("\n{:?} ({:.1} s)", report.mode, report.seconds);
    let mut header = format!("{:<16} {:>5}", "source", "n");
    for metric in ["R", "NDCG", "MRR"] {
        for k in ks {
            header.push_str(&format!(" {:>8}", format!("{metric}@{k}")));
        }
    }
    if corpus {
        // Is the question's document the first, or among the first three, documents?
        for k in ROUTING_KS {
            header.push_str(&format!(" {:>8}", format!("doc@{k}")));
        }
    }
    println!("{header}");
    for (source, t) in &report.by_source {
        let mut row = format!("{source:<16} {:>5}", t.n);
        let routing = if corpus { t.routing() } else { Vec::new() };
        for v in [t.recall(), t.ndcg(), t.mrr(), routing] {
            for x in v {
                row.push_str(&format!(" {:>8.3}", x));
            }
        }
        println!("{row}");
    }
}
