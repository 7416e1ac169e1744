//! `evident eval --profile P...`: answer benchmark questions with each profile and compare
//! retrieval (on the pipeline's final page order) and rule-based answer accuracy side by side.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use evident::eval::{AnswerRecord, ResultsLog, answer_question, answer_rows, in_turn, load_questions};
use indicatif::{ProgressBar, ProgressStyle};

use super::Context;

/// Runs every profile over the chosen questions (each question with every profile in turn, so
/// that a partial run still compares them on the same questions) and prints one table.
pub fn run(ctx: &Context, path: &Path, profiles: &[String], limit: Option<usize>, ks: &[usize], json: Option<&Path>, log: Option<&Path>) -> Result<ExitCode> {
    let questions = load_questions(path)?;
    let store = Arc::new(ctx.store()?);
    let docs = store.documents()?;
    let chosen = in_turn(&questions, &docs, limit);
    anyhow::ensure!(!chosen.is_empty(), "none of the questions' documents is in the store; ingest them first (evident ingest <the benchmark's docs folder>)");

    let registry = ctx.registry(store.clone())?;
    let services = ctx.services(store.clone())?;
    let resolved = profiles.iter().map(|name| Ok((name, registry.resolve(name)?))).collect::<Result<Vec<_>>>()?;
    let wanted: HashSet<(&str, &str)> = chosen.iter().flat_map(|(q, _)| profiles.iter().map(|p| (p.as_str(), q.qid.as_str()))).collect();
    let (mut log, logged) = match log {
        Some(path) => {
            let (log, held) = ResultsLog::open(path)?;
            (Some(log), held)
        }
        None => (None, Vec::new()),
    };
    let mut records: Vec<AnswerRecord> = logged.into_iter().filter(|r| wanted.contains(&(r.profile.as_str(), r.qid.as_str()))).collect();
    let done: HashSet<(String, String)> = records.iter().map(|r| (r.profile.clone(), r.qid.clone())).collect();
    let bar = ProgressBar::new((chosen.len() * profiles.len()) as u64);
    bar.set_style(ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} answers  eta {eta}").unwrap_or_else(|_| ProgressStyle::default_bar()));
    bar.set_position(done.len() as u64);
    if !done.is_empty() {
        bar.suspend(|| eprintln!("{} answers already in the results log; going on from there", done.len()));
    }
    for (q, doc) in &chosen {
        for (name, profile) in &resolved {
            if done.contains(&(name.to_string(), q.qid.clone())) {
                continue;
            }
            bar.set_message(name.to_string());
            let record = answer_question(registry.runtime(), &services, name, profile, q, doc);
            if record.failed {
                bar.suspend(|| eprintln!("{} {}: {}", name, q.qid, record.predicted));
            }
            if let Some(log) = log.as_mut() {
                log.append(&record)?;
            }
            records.push(record);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let answerable: HashMap<&str, bool> = chosen.iter().map(|(q, _)| (q.qid.as_str(), q.answerable)).collect();
    let rows = answer_rows(&records, &answerable, ks);
    let mut per_source: BTreeMap<&str, usize> = BTreeMap::new();
    for (q, _) in &chosen {
        *per_source.entry(q.source.as_str()).or_default() += 1;
    }
    println!(
        "{} questions ({}), each asked of its own document",
        chosen.len(),
        per_source.iter().map(|(s, n)| format!("{s}: {n}")).collect::<Vec<_>>().join(", ")
    );
    let mut header = format!("{:<12} {:>4}", "profile", "n");
    for k in ks {
        header.push_str(&format!(" {:>7}", format!("R@{k}")));
    }
    header.push_str(&format!(
        " {:>7} {:>9} {:>11} {:>11} {:>7} {:>7} {:>7} {:>8} {:>9} {:>9}",
        "MRR@10", "accuracy", "abstain-NA", "abstain-A", "errors", "s/q", "p50 s", "calls/q", "tokens/q", "reused/q"
    ));
    println!("{header}");
    for (name, r) in &rows {
        let mut line = format!("{name:<12} {:>4}", r.n);
        for x in r.recall() {
            line.push_str(&format!(" {:>7.3}", x));
        }
        let (mean_s, p50_s) = r.seconds();
        let (calls, tokens, reused) = r.per_question_costs();
        line.push_str(&format!(
            " {:>7.3} {:>9.3} {:>11} {:>11} {:>7} {:>7.1} {:>7.1} {:>8.1} {:>9.0} {:>9.0}",
            r.mrr(),
            r.accuracy(),
            format!("{}/{}", r.abstained_right, r.unanswerable),
            format!("{}/{}", r.abstained_wrong, r.answerable_answered()),
            r.failed,
            mean_s,
            p50_s,
            calls,
            tokens,
            reused
        ));
        println!("{line}");
    }
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&records)?).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
