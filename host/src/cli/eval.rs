//! `evident eval`: retrieval quality on a benchmark's questions.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context as _, Result};
use clap::Args;
use evident::retrieval::metrics::{ndcg_at, recall_at, rr_at};
use evident::retrieval::{Ranker, SearchMode};
use evident::store::DocumentRecord;
use serde::Deserialize;

use super::Context;

/// Arguments of `evident eval`.
#[derive(Args)]
pub struct EvalArgs {
    /// Questions, one JSON object a line (source, qid, doc, question, evidence_pages).
    #[arg(long, default_value = "../shared/bench/questions.jsonl")]
    questions: PathBuf,
    /// Cut-offs K, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,3,5,10")]
    k: Vec<usize>,
    /// Ranking modes to compare (repeatable).
    #[arg(long = "mode", value_enum, default_values_t = [SearchMode::Maxsim, SearchMode::Bm25, SearchMode::Hybrid])]
    modes: Vec<SearchMode>,
    /// Search every document instead of each question's own.
    #[arg(long)]
    corpus: bool,
    /// Weight of BM25 in hybrid mode.
    #[arg(long, default_value_t = 0.5)]
    alpha: f32,
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Answer the questions with these profiles (repeatable) and compare retrieval and answer
    /// accuracy side by side, instead of ranking pages only.
    #[arg(long = "profile")]
    profiles: Vec<String>,
    /// With --profile: at most this many questions, taken in turn from each source.
    #[arg(long)]
    limit: Option<usize>,
    /// With --profile: append each answer to this JSON-lines file as it comes, and skip the
    /// answers it already holds, so that a long evaluation stopped part way goes on from there.
    #[arg(long, value_name = "FILE")]
    results: Option<PathBuf>,
}

#[derive(Deserialize)]
pub(super) struct Question {
    pub source: String,
    pub qid: String,
    pub doc: String,
    pub question: String,
    #[serde(default)]
    pub evidence_pages: Vec<u32>,
    #[serde(default)]
    pub answer: String,
    #[serde(default = "answerable_default")]
    pub answerable: bool,
}

fn answerable_default() -> bool {
    true
}

/// Sums of each metric at each K, over a group of questions.
#[derive(Default, Clone)]
struct Totals {
    n: usize,
    recall: Vec<f64>,
    ndcg: Vec<f64>,
    mrr: Vec<f64>,
}

impl Totals {
    fn add(&mut self, ranked: &[u32], gold: &[u32], ks: &[usize]) {
        if self.recall.is_empty() {
            self.recall = vec![0.0; ks.len()];
            self.ndcg = vec![0.0; ks.len()];
            self.mrr = vec![0.0; ks.len()];
        }
        self.n += 1;
        for (i, &k) in ks.iter().enumerate() {
            self.recall[i] += recall_at(ranked, gold, k);
            self.ndcg[i] += ndcg_at(ranked, gold, k);
            self.mrr[i] += rr_at(ranked, gold, k);
        }
    }

    fn mean(v: &[f64], n: usize) -> Vec<f64> {
        v.iter().map(|x| x / n.max(1) as f64).collect()
    }
}

pub(super) fn load_questions(path: &Path) -> Result<Vec<Question>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).with_context(|| format!("{} line {}: not a question", path.display(), i + 1)))
        .collect()
}

pub(super) fn file_name(path: &str) -> &str {
    Path::new(path).file_name().and_then(|n| n.to_str()).unwrap_or(path)
}

/// Evaluates retrieval and prints one table per mode.
pub fn run(ctx: &Context, args: EvalArgs) -> Result<ExitCode> {
    if !args.profiles.is_empty() {
        return super::eval_answers::run(ctx, &args.questions, &args.profiles, args.limit, &args.k, args.json.as_deref(), args.results.as_deref());
    }
    let questions = load_questions(&args.questions)?;
    let store = ctx.store()?;
    let docs = store.documents()?;
    let by_file: HashMap<&str, &DocumentRecord> = docs.iter().map(|d| (file_name(&d.source_path), d)).collect();
    let mut skipped_missing = 0;
    let mut skipped_unanswerable = 0;
    // Questions with gold pages whose document is in the store, grouped by document.
    let mut groups: BTreeMap<&str, Vec<&Question>> = BTreeMap::new();
    for q in &questions {
        if q.evidence_pages.is_empty() {
            skipped_unanswerable += 1;
        } else if let Some(doc) = by_file.get(file_name(&q.doc)) {
            groups.entry(doc.id.as_str()).or_default().push(q);
        } else {
            skipped_missing += 1;
        }
    }
    let kmax = args.k.iter().copied().max().unwrap_or(10);
    let lexical = ctx.lexical()?;
    let needs_encoder = args.modes.iter().any(|m| *m != SearchMode::Bm25);
    let encoder = if needs_encoder { Some(ctx.encoder()?) } else { None };
    let maxsim = ctx.maxsim()?;
    let ranker = Ranker { store: &store, lexical: &lexical, encoder: encoder.as_ref(), maxsim: &maxsim, vectors: None, alpha: args.alpha };

    let mut report = Vec::new();
    for &mode in &args.modes {
        let started = Instant::now();
        let mut totals: BTreeMap<String, Totals> = BTreeMap::new();
        for (doc_id, qs) in &groups {
            let scope: Vec<DocumentRecord> = if args.corpus { docs.clone() } else { docs.iter().filter(|d| d.id == *doc_id).cloned().collect() };
            let texts: Vec<&str> = qs.iter().map(|q| q.question.as_str()).collect();
            let ranked = ranker.rank(&texts, &scope, mode, kmax)?;
            for (q, hits) in qs.iter().zip(ranked) {
                // A hit counts only on the question's own document.
                let pages: Vec<u32> = hits.iter().map(|h| if h.doc == *doc_id { h.page } else { 0 }).collect();
                totals.entry(q.source.clone()).or_default().add(&pages, &q.evidence_pages, &args.k);
                totals.entry("overall".into()).or_default().add(&pages, &q.evidence_pages, &args.k);
                let _ = &q.qid;
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        print_table(mode, &args.k, &totals, seconds);
        for (source, t) in &totals {
            report.push(serde_json::json!({
                "mode": mode, "source": source, "questions": t.n, "k": args.k,
                "recall": Totals::mean(&t.recall, t.n), "ndcg": Totals::mean(&t.ndcg, t.n), "mrr": Totals::mean(&t.mrr, t.n),
                "seconds": seconds, "scope": if args.corpus { "corpus" } else { "document" },
            }));
        }
    }
    println!(
        "{} questions scored; {} without evidence pages (not answerable) and {} whose document is not in the store were left out",
        groups.values().map(Vec::len).sum::<usize>(),
        skipped_unanswerable,
        skipped_missing
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_table(mode: SearchMode, ks: &[usize], totals: &BTreeMap<String, Totals>, seconds: f64) {
    println!("\n{mode:?} ({seconds:.1} s)");
    let mut header = format!("{:<16} {:>5}", "source", "n");
    for metric in ["R", "NDCG", "MRR"] {
        for k in ks {
            header.push_str(&format!(" {:>8}", format!("{metric}@{k}")));
        }
    }
    println!("{header}");
    for (source, t) in totals {
        let mut row = format!("{source:<16} {:>5}", t.n);
        for v in [&t.recall, &t.ndcg, &t.mrr] {
            for x in Totals::mean(v, t.n) {
                row.push_str(&format!(" {:>8.3}", x));
            }
        }
        println!("{row}");
    }
}
