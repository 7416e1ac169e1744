//! `evident eval --profile P...`: answer benchmark questions with each profile and compare
//! retrieval (on the pipeline's final page order) and rule-based answer accuracy side by side.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use evident::pipeline::accuracy::is_correct;
use evident::pipeline::RequestHost;
use evident::retrieval::metrics::{recall_at, rr_at};
use indicatif::{ProgressBar, ProgressStyle};

use super::Context;
use super::eval::{Question, file_name, load_questions};

#[derive(Default)]
struct Row {
    n: usize,
    correct: usize,
    failed: usize,
    with_gold: usize,
    recall: Vec<f64>,
    mrr: f64,
    seconds: f64,
    llm_calls: u64,
    tokens: u64,
}

/// Runs every profile over the chosen questions and prints one table.
pub fn run(ctx: &Context, path: &Path, profiles: &[String], limit: Option<usize>, ks: &[usize], json: Option<&Path>) -> Result<ExitCode> {
    let questions = load_questions(path)?;
    let store = Arc::new(ctx.store()?);
    let docs = store.documents()?;
    let by_file: HashMap<&str, &evident::store::DocumentRecord> = docs.iter().map(|d| (file_name(&d.source_path), d)).collect();
    // Questions whose document is stored, taken in turn from each source.
    let mut per_source: BTreeMap<&str, Vec<&Question>> = BTreeMap::new();
    for q in &questions {
        if by_file.contains_key(file_name(&q.doc)) {
            per_source.entry(q.source.as_str()).or_default().push(q);
        }
    }
    let mut chosen: Vec<&Question> = Vec::new();
    let longest = per_source.values().map(Vec::len).max().unwrap_or(0);
    for i in 0..longest {
        for list in per_source.values() {
            if let Some(q) = list.get(i) {
                chosen.push(q);
            }
        }
    }
    chosen.truncate(limit.unwrap_or(usize::MAX));
    anyhow::ensure!(!chosen.is_empty(), "none of the questions' documents is in the store; ingest them first (evident ingest ../shared/bench/docs)");

    let registry = ctx.registry(store.clone())?;
    let services = ctx.services(store.clone())?;
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    let mut records = Vec::new();
    for name in profiles {
        let profile = registry.resolve(name)?;
        let bar = ProgressBar::new(chosen.len() as u64);
        bar.set_style(ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} questions  eta {eta}").unwrap_or_else(|_| ProgressStyle::default_bar()));
        bar.set_message(name.clone());
        let row = rows.entry(name.clone()).or_default();
        row.recall = vec![0.0; ks.len()];
        for q in &chosen {
            let doc = by_file[file_name(&q.doc)];
            let host = Arc::new(RequestHost::new(services.clone(), vec![doc.clone()], 0));
            let outcome = evident::pipeline::run(registry.runtime(), &profile, host, &q.question);
            row.n += 1;
            let (correct, predicted) = match &outcome {
                Ok(o) => {
                    row.seconds += o.ms / 1000.0;
                    row.llm_calls += o.llm_calls;
                    row.tokens += o.tokens;
                    if !q.evidence_pages.is_empty() {
                        let ranked: Vec<u32> = o.ranked_pages.iter().map(|(d, p)| if *d == doc.id { *p } else { 0 }).collect();
                        row.with_gold += 1;
                        for (i, &k) in ks.iter().enumerate() {
                            row.recall[i] += recall_at(&ranked, &q.evidence_pages, k);
                        }
                        row.mrr += rr_at(&ranked, &q.evidence_pages, 10);
                    }
                    (is_correct(&o.answer, o.answerable, &q.answer, q.answerable), if o.answerable { o.answer.clone() } else { "Not answerable".into() })
                }
                Err(e) => {
                    row.failed += 1;
                    bar.suspend(|| eprintln!("{} {}: {e}", name, q.qid));
                    (false, format!("error: {e}"))
                }
            };
            row.correct += usize::from(correct);
            records.push(serde_json::json!({"profile": name, "qid": q.qid, "source": q.source, "gold": q.answer, "predicted": predicted, "correct": correct}));
            bar.inc(1);
        }
        bar.finish_and_clear();
    }
    println!("{} questions ({}), each asked of its own document", chosen.len(), per_source.iter().map(|(s, l)| format!("{s}: {}", l.len().min(chosen.iter().filter(|q| q.source == *s).count()))).collect::<Vec<_>>().join(", "));
    let mut header = format!("{:<12} {:>4}", "profile", "n");
    for k in ks {
        header.push_str(&format!(" {:>7}", format!("R@{k}")));
    }
    header.push_str(&format!(" {:>7} {:>9} {:>7} {:>10} {:>10} {:>7}", "MRR@10", "accuracy", "errors", "s/question", "calls/q", "tokens/q"));
    println!("{header}");
    for (name, r) in &rows {
        let mut line = format!("{name:<12} {:>4}", r.n);
        for x in &r.recall {
            line.push_str(&format!(" {:>7.3}", x / r.with_gold.max(1) as f64));
        }
        let per = |v: f64| v / r.n.max(1) as f64;
        line.push_str(&format!(
            " {:>7.3} {:>9.3} {:>7} {:>10.1} {:>10.1} {:>7.0}",
            r.mrr / r.with_gold.max(1) as f64,
            r.correct as f64 / r.n.max(1) as f64,
            r.failed,
            per(r.seconds),
            per(r.llm_calls as f64),
            per(r.tokens as f64)
        ));
        println!("{line}");
    }
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&records)?).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
