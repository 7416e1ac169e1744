//! `evident eval --profile P...`: answer benchmark questions with each profile and compare
//! retrieval (on the pipeline's final page order) and rule-based answer accuracy side by side.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use evident::pipeline::RequestHost;
use evident::pipeline::accuracy::is_correct;
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
    seconds: Vec<f64>,
    llm_calls: u64,
    tokens: u64,
    reused_tokens: u64,
    /// Unanswerable questions, and those of them the profile said were not answerable.
    unanswerable: usize,
    abstained_right: usize,
    /// Answerable questions the profile said were not answerable.
    abstained_wrong: usize,
}

/// One profile's answer to one question: a line of the results log, and all a table row needs.
#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    profile: String,
    qid: String,
    source: String,
    gold: String,
    predicted: String,
    correct: bool,
    failed: bool,
    seconds: f64,
    llm_calls: u64,
    tokens: u64,
    /// Of the prompt tokens, those read from an earlier prompt's cache.
    #[serde(default)]
    reused_tokens: u64,
    /// The pipeline's final page order (0 for a page of another document).
    ranked: Vec<u32>,
    evidence_pages: Vec<u32>,
}

/// What the log records as the prediction when a profile says a question is not answerable.
const ABSTAINED: &str = "Not answerable";

impl Row {
    /// Counts `r`, an answer to a question the benchmark deems `answerable` or not.
    fn add(&mut self, r: &Record, answerable: bool, ks: &[usize]) {
        self.recall.resize(ks.len(), 0.0);
        self.n += 1;
        self.correct += usize::from(r.correct);
        self.failed += usize::from(r.failed);
        self.seconds.push(r.seconds);
        self.llm_calls += r.llm_calls;
        self.tokens += r.tokens;
        self.reused_tokens += r.reused_tokens;
        if !r.failed {
            match (answerable, r.predicted == ABSTAINED) {
                (false, abstained) => {
                    self.unanswerable += 1;
                    self.abstained_right += usize::from(abstained);
                }
                (true, true) => self.abstained_wrong += 1,
                (true, false) => {}
            }
        }
        if !r.failed && !r.evidence_pages.is_empty() {
            self.with_gold += 1;
            for (i, &k) in ks.iter().enumerate() {
                self.recall[i] += recall_at(&r.ranked, &r.evidence_pages, k);
            }
            self.mrr += rr_at(&r.ranked, &r.evidence_pages, 10);
        }
    }
}

/// Answers of an earlier run kept in the results log, so that a long evaluation can stop and
/// go on later where it was; and whether the log ends in a torn line (a run killed mid-write),
/// whose answer is asked again.
fn read_log(path: &Path) -> Result<(Vec<Record>, bool)> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), false)),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let torn = !text.is_empty() && !text.ends_with('\n');
    Ok((text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect(), torn))
}

/// Runs every profile over the chosen questions (each question with every profile in turn, so
/// that a partial run still compares them on the same questions) and prints one table.
pub fn run(ctx: &Context, path: &Path, profiles: &[String], limit: Option<usize>, ks: &[usize], json: Option<&Path>, log: Option<&Path>) -> Result<ExitCode> {
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
    let resolved = profiles.iter().map(|name| Ok((name, registry.resolve(name)?))).collect::<Result<Vec<_>>>()?;
    let wanted: std::collections::HashSet<(&str, &str)> = chosen.iter().flat_map(|q| profiles.iter().map(|p| (p.as_str(), q.qid.as_str()))).collect();
    let (logged, torn) = match log {
        Some(path) => read_log(path)?,
        None => (Vec::new(), false),
    };
    let mut records: Vec<Record> = logged.into_iter().filter(|r| wanted.contains(&(r.profile.as_str(), r.qid.as_str()))).collect();
    let done: std::collections::HashSet<(String, String)> = records.iter().map(|r| (r.profile.clone(), r.qid.clone())).collect();
    let mut log_file = match log {
        Some(path) => {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).with_context(|| format!("cannot open {}", path.display()))?;
            if torn {
                writeln!(f).context("cannot append to the results log")?;
            }
            Some(f)
        }
        None => None,
    };
    let bar = ProgressBar::new((chosen.len() * profiles.len()) as u64);
    bar.set_style(ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} answers  eta {eta}").unwrap_or_else(|_| ProgressStyle::default_bar()));
    bar.set_position(done.len() as u64);
    if !done.is_empty() {
        bar.suspend(|| eprintln!("{} answers already in the results log; going on from there", done.len()));
    }
    for q in &chosen {
        let doc = by_file[file_name(&q.doc)];
        for (name, profile) in &resolved {
            if done.contains(&(name.to_string(), q.qid.clone())) {
                continue;
            }
            bar.set_message(name.to_string());
            let host = Arc::new(RequestHost::new(services.clone(), vec![doc.clone()], 0));
            let outcome = evident::pipeline::run(registry.runtime(), profile, host, &q.question);
            let mut record = Record {
                profile: name.to_string(),
                qid: q.qid.clone(),
                source: q.source.clone(),
                gold: q.answer.clone(),
                predicted: String::new(),
                correct: false,
                failed: false,
                seconds: 0.0,
                llm_calls: 0,
                tokens: 0,
                reused_tokens: 0,
                ranked: Vec::new(),
                evidence_pages: q.evidence_pages.clone(),
            };
            match &outcome {
                Ok(o) => {
                    record.predicted = if o.answerable { o.answer.clone() } else { ABSTAINED.into() };
                    record.correct = is_correct(&o.answer, o.answerable, &q.answer, q.answerable);
                    record.seconds = o.ms / 1000.0;
                    record.llm_calls = o.llm_calls;
                    record.tokens = o.tokens;
                    record.reused_tokens = o.reused_tokens;
                    record.ranked = o.ranked_pages.iter().map(|(d, p)| if *d == doc.id { *p } else { 0 }).collect();
                }
                Err(e) => {
                    bar.suspend(|| eprintln!("{} {}: {e}", name, q.qid));
                    record.predicted = format!("error: {e}");
                    record.failed = true;
                }
            }
            if let Some(f) = log_file.as_mut() {
                use std::io::Write;
                writeln!(f, "{}", serde_json::to_string(&record)?).context("cannot append to the results log")?;
            }
            records.push(record);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let answerable: HashMap<&str, bool> = chosen.iter().map(|q| (q.qid.as_str(), q.answerable)).collect();
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    for r in &records {
        rows.entry(r.profile.clone()).or_default().add(r, answerable.get(r.qid.as_str()).copied().unwrap_or(true), ks);
    }
    println!(
        "{} questions ({}), each asked of its own document",
        chosen.len(),
        per_source.iter().map(|(s, l)| format!("{s}: {}", l.len().min(chosen.iter().filter(|q| q.source == *s).count()))).collect::<Vec<_>>().join(", ")
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
        for x in &r.recall {
            line.push_str(&format!(" {:>7.3}", x / r.with_gold.max(1) as f64));
        }
        let per = |v: f64| v / r.n.max(1) as f64;
        let answered = r.n - r.failed;
        line.push_str(&format!(
            " {:>7.3} {:>9.3} {:>11} {:>11} {:>7} {:>7.1} {:>7.1} {:>8.1} {:>9.0} {:>9.0}",
            r.mrr / r.with_gold.max(1) as f64,
            r.correct as f64 / r.n.max(1) as f64,
            format!("{}/{}", r.abstained_right, r.unanswerable),
            format!("{}/{}", r.abstained_wrong, answered - r.unanswerable),
            r.failed,
            per(r.seconds.iter().sum()),
            super::percentile(&r.seconds, 0.5),
            per(r.llm_calls as f64),
            per(r.tokens as f64),
            per(r.reused_tokens as f64)
        ));
        println!("{line}");
    }
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&records)?).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
