//! `evident eval --profile P...`: answer benchmark questions with each profile and compare
//! retrieval (on the pipeline's final page order) and rule-based answer accuracy side by side.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use evident::eval::{
    AnswerRecord, AnswerRow, Question, ROUTING_KS, ResultsLog, TraceLog, TraceRecord, answer_question, answer_rows, answer_rows_by, in_turn, load_questions,
    rejudge,
};
use evident::store::DocumentRecord;
use indicatif::{ProgressBar, ProgressStyle};

use super::Context;

/// How `eval --profile` runs: which questions, where it logs, over what scope.
pub struct AnswerRun<'a> {
    pub questions: &'a Path,
    pub profiles: &'a [String],
    pub limit: Option<usize>,
    pub ks: &'a [usize],
    pub json: Option<&'a Path>,
    pub log: Option<&'a Path>,
    /// Where each answer's trace is appended, when wanted.
    pub traces: Option<&'a Path>,
    /// Every question searches every stored document.
    pub corpus: bool,
}

/// `eval --profile`: runs every profile over the chosen questions (each question with every
/// profile in turn, so that a partial run still compares them on the same questions, going on
/// from the results log) and prints one table, a row per profile.
pub fn run(ctx: &Context, run: AnswerRun<'_>) -> Result<ExitCode> {
    let AnswerRun { questions: path, profiles, limit, ks, json, log, traces, corpus } = run;
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
    let mut traces = traces.map(TraceLog::open).transpose()?;
    // An answer over the corpus and one over the question's own document are different answers.
    let mut records: Vec<AnswerRecord> = logged.into_iter().filter(|r| r.corpus == corpus && wanted.contains(&(r.profile.as_str(), r.qid.as_str()))).collect();
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
            let (record, outcome) = answer_question(registry.runtime(), &services, name, profile, q, doc, corpus.then_some(docs.as_slice()));
            if record.failed {
                bar.suspend(|| eprintln!("{} {}: {}", name, q.qid, record.predicted));
            }
            if let Some(log) = log.as_mut() {
                log.append(&record)?;
            }
            if let (Some(traces), Some(o)) = (traces.as_mut(), outcome.as_ref()) {
                traces.append(&TraceRecord { profile: name, qid: &q.qid, corpus, trace: &o.trace, log: &o.log })?;
            }
            records.push(record);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let answerable: HashMap<&str, bool> = chosen.iter().map(|(q, _)| (q.qid.as_str(), q.answerable)).collect();
    println!("{}{}", describe(&chosen), if corpus { "; each searching every stored document" } else { "" });
    print_rows(&answer_rows(&records, &answerable, ks), ks);
    let by_qid: HashMap<&str, &Question> = chosen.iter().map(|(q, _)| (q.qid.as_str(), *q)).collect();
    print_breakdowns(&records, &by_qid, &answerable, ks);
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&records)?).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// "N questions (source: n, ...)".
fn describe(chosen: &[(&Question, &DocumentRecord)]) -> String {
    let mut per_source: BTreeMap<&str, usize> = BTreeMap::new();
    for (q, _) in chosen {
        *per_source.entry(q.source.as_str()).or_default() += 1;
    }
    let sources = per_source.iter().map(|(s, n)| format!("{s}: {n}")).collect::<Vec<_>>().join(", ");
    format!("{} questions ({sources}), each asked of its own document", chosen.len())
}

/// The table again by source (when the answers span several) and, over the answerable questions
/// whose benchmark names the kind of their evidence (MMLongBench-Doc's), by that kind: a row per
/// profile and group, so that where a profile wins or fails shows without a script.
fn print_breakdowns(records: &[AnswerRecord], by_qid: &HashMap<&str, &Question>, answerable: &HashMap<&str, bool>, ks: &[usize]) {
    let sources: HashSet<&str> = records.iter().map(|r| r.source.as_str()).collect();
    if sources.len() > 1 {
        println!("\nby source");
        print_rows(&answer_rows_by(records, answerable, ks, |r| Some(format!("{} / {}", r.row_name(), r.source))), ks);
    }
    let kind_of = |r: &AnswerRecord| {
        let question = by_qid.get(r.qid.as_str()).filter(|q| q.answerable)?;
        question.evidence_kind().map(|kind| format!("{} / {kind}", r.row_name()))
    };
    let kinds = answer_rows_by(records, answerable, ks, kind_of);
    if !kinds.is_empty() {
        println!("\nby the kind of evidence the benchmark names (MMLongBench-Doc's answerable questions)");
        print_rows(&kinds, ks);
    }
}

/// The comparison table, a row per profile (or per profile and group).
fn print_rows(rows: &BTreeMap<String, AnswerRow>, ks: &[usize]) {
    let routed = rows.keys().any(|name| name.contains("(corpus)"));
    let width = rows.keys().map(|name| name.chars().count()).max().unwrap_or(0).max(21);
    let mut header = format!("{:<width$} {:>4}", "profile", "n");
    for k in ks {
        header.push_str(&format!(" {:>7}", format!("R@{k}")));
    }
    if routed {
        for k in ROUTING_KS {
            header.push_str(&format!(" {:>7}", format!("doc@{k}")));
        }
    }
    header.push_str(&format!(
        " {:>7} {:>9} {:>11} {:>11} {:>7} {:>7} {:>7} {:>9} {:>8} {:>8} {:>9} {:>9}",
        "MRR@10", "accuracy", "abstain-NA", "abstain-A", "errors", "s/q", "p50 s", "p50 cpu s", "rounds/q", "calls/q", "tokens/q", "reused/q"
    ));
    println!("{header}");
    for (name, r) in rows {
        let mut line = format!("{name:<width$} {:>4}", r.n);
        let routing = if routed { r.routing() } else { Vec::new() };
        for x in r.recall().into_iter().chain(routing) {
            line.push_str(&format!(" {:>7.3}", x));
        }
        let (mean_s, p50_s) = r.seconds();
        let (calls, tokens, reused) = r.per_question_costs();
        line.push_str(&format!(
            " {:>7.3} {:>9.3} {:>11} {:>11} {:>7} {:>7.1} {:>7.1} {:>9.1} {:>8.2} {:>8.1} {:>9.0} {:>9.0}",
            r.mrr(),
            r.accuracy(),
            format!("{}/{}", r.abstained_right, r.unanswerable),
            format!("{}/{}", r.abstained_wrong, r.answerable_answered()),
            r.failed,
            mean_s,
            p50_s,
            r.cpu_seconds_p50(),
            r.rounds(),
            calls,
            tokens,
            reused
        ));
        println!("{line}");
    }
}

/// `eval --rejudge`: the logged answers (of the first `limit` questions in the log's order, when
/// given), judged as logged and again with today's rules, side by side; nothing is asked and no
/// store is needed.
pub fn rejudge_log(path: &Path, profiles: &[String], limit: Option<usize>, ks: &[usize], log: &Path) -> Result<ExitCode> {
    let questions = load_questions(path)?;
    let by_qid: HashMap<&str, &Question> = questions.iter().map(|q| (q.qid.as_str(), q)).collect();
    let (_, logged) = ResultsLog::open(log)?;
    let mut order: Vec<&str> = Vec::new();
    for r in &logged {
        if by_qid.contains_key(r.qid.as_str()) && !order.contains(&r.qid.as_str()) {
            order.push(r.qid.as_str());
        }
    }
    order.truncate(limit.unwrap_or(usize::MAX));
    let wanted = |r: &AnswerRecord| order.contains(&r.qid.as_str()) && (profiles.is_empty() || profiles.contains(&r.profile));
    let logged: Vec<AnswerRecord> = logged.iter().filter(|r| wanted(r)).cloned().collect();
    anyhow::ensure!(!logged.is_empty(), "{} holds no answer to these questions from these profiles", log.display());
    let again: Vec<AnswerRecord> = logged.iter().map(|r| rejudge(r, by_qid[r.qid.as_str()])).collect();
    let answerable: HashMap<&str, bool> = questions.iter().map(|q| (q.qid.as_str(), q.answerable)).collect();
    let mut per_source: BTreeMap<&str, usize> = BTreeMap::new();
    for qid in &order {
        *per_source.entry(by_qid[qid].source.as_str()).or_default() += 1;
    }
    let sources = per_source.iter().map(|(s, n)| format!("{s}: {n}")).collect::<Vec<_>>().join(", ");
    println!("{} questions of the results log ({sources})", order.len());
    println!("\nas logged");
    print_rows(&answer_rows(&logged, &answerable, ks), ks);
    println!("\njudged again with today's rules");
    print_rows(&answer_rows(&again, &answerable, ks), ks);
    print_breakdowns(&again, &by_qid, &answerable, ks);
    let changed: Vec<&AnswerRecord> = again.iter().zip(&logged).filter(|(a, b)| a.correct != b.correct).map(|(a, _)| a).collect();
    println!("\n{} answers judged differently:", changed.len());
    for r in changed {
        let verdict = if r.correct { "now right" } else { "now wrong" };
        let brief: String = r.predicted.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(70).collect();
        println!("  {} {} {verdict}: {brief:?} (gold {:?})", r.profile, r.qid, r.gold.chars().take(40).collect::<String>());
    }
    Ok(ExitCode::SUCCESS)
}
