//! Answer quality: one profile's answer to one question as a record of the results log, the
//! log itself (appended as answers come, so a stopped run goes on where it was), and the rows
//! of the comparison table.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::accuracy::is_correct_either;
use super::metrics::{percentile, recall_at, rr_at};
use super::{EvalError, Question};
use crate::pipeline::{Outcome, RequestHost, ResolvedProfile, Services, TraceStep};
use crate::plugins::StageRuntime;
use crate::store::DocumentRecord;

/// What the log records as the prediction when a profile says a question is not answerable.
pub const ABSTAINED: &str = "Not answerable";

/// One profile's answer to one question: a line of the results log, and all a row needs.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct AnswerRecord {
    pub profile: String,
    pub qid: String,
    pub source: String,
    pub gold: String,
    pub predicted: String,
    pub correct: bool,
    /// The run failed (the error is the prediction).
    pub failed: bool,
    pub seconds: f64,
    pub llm_calls: u64,
    pub tokens: u64,
    /// Of the prompt tokens, those read from an earlier prompt's cache.
    #[serde(default)]
    pub reused_tokens: u64,
    /// The pipeline's final page order (0 for a page of another document).
    pub ranked: Vec<u32>,
    pub evidence_pages: Vec<u32>,
    /// Rounds of reading the answer stage went through (see [`rounds_in`]).
    #[serde(default = "one_round")]
    pub rounds: u32,
    /// CPU seconds the process spent on the answer (all threads): unlike `seconds`, not
    /// inflated when the run is paused or shares the machine with other work.
    #[serde(default)]
    pub cpu_seconds: f64,
    /// When the answer was logged (Unix seconds), so that a log kept over several sessions
    /// can be matched with the commits that produced its parts.
    #[serde(default)]
    pub finished_unix: u64,
    /// The question searched every stored document, not only its own.
    #[serde(default)]
    pub corpus: bool,
    /// Over the corpus: where the question's document comes among the documents of the final
    /// page order, each placed by its first page (1 = first; 0 = absent).
    #[serde(default)]
    pub document_rank: u32,
}

impl AnswerRecord {
    /// The name its row goes under: the profile, marked when it searched the whole corpus.
    pub fn row_name(&self) -> String {
        if self.corpus { format!("{} (corpus)", self.profile) } else { self.profile.clone() }
    }
}

fn one_round() -> u32 {
    1
}

/// The rounds a run's log shows: its lines "round N read pages ..." (what a stage that reads in
/// rounds, DocMemo's, logs for each), or 1 for a stage that logs none.
pub fn rounds_in(log: &[String]) -> u32 {
    let rounds = log
        .iter()
        .filter(|l| {
            l.strip_prefix("round ")
                .is_some_and(|rest| rest.split_once(' ').is_some_and(|(n, tail)| n.parse::<u32>().is_ok() && tail.starts_with("read pages")))
        })
        .count();
    (rounds as u32).max(1)
}

/// Asks `question` with `profile` (named `name`) and scores the answer: over its own document
/// `doc`, or, given `corpus` (every stored document), over all of them.
pub fn answer_question(
    runtime: &StageRuntime,
    services: &Arc<Services>,
    name: &str,
    profile: &ResolvedProfile,
    question: &Question,
    doc: &DocumentRecord,
    corpus: Option<&[DocumentRecord]>,
) -> (AnswerRecord, Option<Outcome>) {
    let scope = corpus.map_or_else(|| vec![doc.clone()], <[DocumentRecord]>::to_vec);
    let host = Arc::new(RequestHost::new(services.clone(), scope, 0));
    let cpu_before = process_cpu_seconds();
    let outcome = crate::pipeline::run(runtime, profile, host, &question.question);
    let cpu_seconds = (process_cpu_seconds() - cpu_before).max(0.0);
    let mut record = AnswerRecord {
        profile: name.to_string(),
        qid: question.qid.clone(),
        source: question.source.clone(),
        gold: question.answer.clone(),
        predicted: String::new(),
        correct: false,
        failed: false,
        seconds: 0.0,
        llm_calls: 0,
        tokens: 0,
        reused_tokens: 0,
        ranked: Vec::new(),
        evidence_pages: question.evidence_pages.clone(),
        rounds: 1,
        cpu_seconds,
        corpus: corpus.is_some(),
        document_rank: 0,
        finished_unix: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
    };
    let mut answered = None;
    match outcome {
        Ok(o) => {
            record.predicted = if o.answerable { o.answer.clone() } else { ABSTAINED.into() };
            record.correct =
                is_correct_either(&question.question, &o.answer, o.answerable, &question.answer, question.extra.answer_2.as_deref(), question.answerable);
            record.seconds = o.ms / 1000.0;
            record.llm_calls = o.llm_calls;
            record.tokens = o.tokens;
            record.reused_tokens = o.reused_tokens;
            record.ranked = o.ranked_pages.iter().map(|(d, p)| if *d == doc.id { *p } else { 0 }).collect();
            if record.corpus {
                let documents = super::ranking::document_order(o.ranked_pages.iter().map(|(d, _)| d.as_str()));
                record.document_rank = documents.iter().position(|d| *d == doc.id).map_or(0, |i| i as u32 + 1);
            }
            record.rounds = rounds_in(&o.log);
            answered = Some(o);
        }
        Err(e) => {
            record.predicted = format!("error: {e}");
            record.failed = true;
        }
    }
    (record, answered)
}

/// User plus system CPU time of this process so far, in seconds (0 where it can't be read).
fn process_cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into the pointer it is given, which is valid for it.
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return 0.0;
        }
        usage.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// `record` judged again with the current accuracy rules (its answer as it was logged), for
/// comparing a change of metric on answers already paid for.
pub fn rejudge(record: &AnswerRecord, question: &Question) -> AnswerRecord {
    let mut out = record.clone();
    if !record.failed {
        let answered = record.predicted != ABSTAINED;
        out.correct =
            is_correct_either(&question.question, &record.predicted, answered, &question.answer, question.extra.answer_2.as_deref(), question.answerable);
    }
    out
}

/// The results log: one JSON record a line, appended as each answer comes.
pub struct ResultsLog {
    path: PathBuf,
    file: std::fs::File,
}

impl ResultsLog {
    /// Opens the log at `path` for appending, with the records an earlier run left there. A
    /// torn last line (a run killed mid-write) is ended, and its answer is asked again.
    pub fn open(path: &Path) -> Result<(ResultsLog, Vec<AnswerRecord>), EvalError> {
        let (file, text) = open_appending(path)?;
        let records = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        Ok((ResultsLog { path: path.to_path_buf(), file }, records))
    }

    /// Appends `record` as one line.
    pub fn append(&mut self, record: &AnswerRecord) -> Result<(), EvalError> {
        append_line(&mut self.file, &self.path, record)
    }
}

/// One answer's trace as a line of the trace log.
#[derive(Debug, serde::Serialize)]
pub struct TraceRecord<'a> {
    pub profile: &'a str,
    pub qid: &'a str,
    pub corpus: bool,
    pub trace: &'a [TraceStep],
    /// The lines the stages logged (DocMemo's beliefs per round, SLEUTH's clue records, ...).
    pub log: &'a [String],
}

/// The trace log: each answer's stage-by-stage trace (what each stage read and returned, the
/// verifier's verdict and score per page among them) and its stages' log, one JSON record a
/// line, appended beside the results log so that a long run can be studied without asking again.
pub struct TraceLog {
    path: PathBuf,
    file: std::fs::File,
}

impl TraceLog {
    /// Opens the trace log at `path` for appending (a torn last line is ended).
    pub fn open(path: &Path) -> Result<TraceLog, EvalError> {
        let (file, _) = open_appending(path)?;
        Ok(TraceLog { path: path.to_path_buf(), file })
    }

    /// Appends `record` as one line.
    pub fn append(&mut self, record: &TraceRecord<'_>) -> Result<(), EvalError> {
        append_line(&mut self.file, &self.path, record)
    }
}

/// The file at `path` opened for appending, created if missing, with the text it held; a last
/// line without its newline (a run killed mid-write) is ended so the next line stands alone.
fn open_appending(path: &Path) -> Result<(std::fs::File, String), EvalError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => return Err(EvalError::Read { path: path.to_path_buf(), source }),
    };
    let write_err = |source| EvalError::Write { path: path.to_path_buf(), source };
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).map_err(write_err)?;
    if !text.is_empty() && !text.ends_with('\n') {
        writeln!(file).map_err(write_err)?;
    }
    Ok((file, text))
}

fn append_line(file: &mut std::fs::File, path: &Path, record: &impl serde::Serialize) -> Result<(), EvalError> {
    let line = serde_json::to_string(record).map_err(|e| EvalError::Write { path: path.to_path_buf(), source: e.into() })?;
    writeln!(file, "{line}").map_err(|source| EvalError::Write { path: path.to_path_buf(), source })
}

/// One profile's row of the comparison table.
#[derive(Debug, Default, Clone)]
pub struct AnswerRow {
    pub n: usize,
    pub correct: usize,
    pub failed: usize,
    /// Answered questions with gold pages, over which recall and MRR are means.
    pub with_gold: usize,
    recall: Vec<f64>,
    mrr: f64,
    seconds: Vec<f64>,
    cpu_seconds: Vec<f64>,
    llm_calls: u64,
    tokens: u64,
    reused_tokens: u64,
    rounds: u64,
    /// Over the corpus: answers whose document came first, and among the first three.
    routed: [usize; 2],
    /// Unanswerable questions, and those of them the profile said were not answerable.
    pub unanswerable: usize,
    pub abstained_right: usize,
    /// Answerable questions the profile said were not answerable.
    pub abstained_wrong: usize,
}

impl AnswerRow {
    /// Counts `r`, an answer to a question the benchmark deems `answerable` or not.
    fn add(&mut self, r: &AnswerRecord, answerable: bool, ks: &[usize]) {
        self.recall.resize(ks.len(), 0.0);
        self.n += 1;
        self.correct += usize::from(r.correct);
        self.failed += usize::from(r.failed);
        self.seconds.push(r.seconds);
        self.cpu_seconds.push(r.cpu_seconds);
        self.llm_calls += r.llm_calls;
        self.tokens += r.tokens;
        self.reused_tokens += r.reused_tokens;
        self.rounds += u64::from(r.rounds);
        if r.corpus && !r.failed {
            for (i, k) in super::ROUTING_KS.iter().enumerate() {
                self.routed[i] += usize::from(r.document_rank >= 1 && r.document_rank as usize <= *k);
            }
        }
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

    fn per_question(&self, v: f64) -> f64 {
        v / self.n.max(1) as f64
    }

    /// Mean Recall@K of the final page order at each K.
    pub fn recall(&self) -> Vec<f64> {
        self.recall.iter().map(|x| x / self.with_gold.max(1) as f64).collect()
    }

    /// Share of the questions whose document came first, and among the first three, in the
    /// final page order (over the corpus; 0 over each question's own document).
    pub fn routing(&self) -> Vec<f64> {
        self.routed.iter().map(|&r| self.per_question(r as f64)).collect()
    }

    /// Mean RR@10 of the final page order.
    pub fn mrr(&self) -> f64 {
        self.mrr / self.with_gold.max(1) as f64
    }

    /// Share of the questions answered correctly (failures count as wrong).
    pub fn accuracy(&self) -> f64 {
        self.per_question(self.correct as f64)
    }

    /// Answerable questions answered without an error.
    pub fn answerable_answered(&self) -> usize {
        self.n - self.failed - self.unanswerable
    }

    /// Mean and median seconds per question.
    pub fn seconds(&self) -> (f64, f64) {
        (self.per_question(self.seconds.iter().sum()), percentile(&self.seconds, 0.5))
    }

    /// Median CPU seconds per question (0 for answers logged before it was recorded).
    pub fn cpu_seconds_p50(&self) -> f64 {
        percentile(&self.cpu_seconds, 0.5)
    }

    /// Rounds of reading per question.
    pub fn rounds(&self) -> f64 {
        self.per_question(self.rounds as f64)
    }

    /// Model calls, tokens and reused prompt tokens per question.
    pub fn per_question_costs(&self) -> (f64, f64, f64) {
        (self.per_question(self.llm_calls as f64), self.per_question(self.tokens as f64), self.per_question(self.reused_tokens as f64))
    }
}

/// A row per profile over `records`; `answerable` says which questions the benchmark deems
/// answerable (those it does not name count as answerable).
pub fn answer_rows(records: &[AnswerRecord], answerable: &HashMap<&str, bool>, ks: &[usize]) -> BTreeMap<String, AnswerRow> {
    answer_rows_by(records, answerable, ks, |r| Some(r.row_name()))
}

/// A row per name that `group` gives a record (a profile and a source, say); records it gives
/// none are left out.
pub fn answer_rows_by(
    records: &[AnswerRecord],
    answerable: &HashMap<&str, bool>,
    ks: &[usize],
    group: impl Fn(&AnswerRecord) -> Option<String>,
) -> BTreeMap<String, AnswerRow> {
    let mut rows: BTreeMap<String, AnswerRow> = BTreeMap::new();
    for r in records {
        if let Some(name) = group(r) {
            rows.entry(name).or_default().add(r, answerable.get(r.qid.as_str()).copied().unwrap_or(true), ks);
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(qid: &str, predicted: &str, correct: bool, ranked: Vec<u32>, gold: Vec<u32>) -> AnswerRecord {
        AnswerRecord {
            profile: "p".into(),
            qid: qid.into(),
            source: "s".into(),
            gold: String::new(),
            predicted: predicted.into(),
            correct,
            failed: false,
            seconds: 2.0,
            llm_calls: 3,
            tokens: 100,
            reused_tokens: 10,
            ranked,
            evidence_pages: gold,
            rounds: 1,
            cpu_seconds: 3.0,
            finished_unix: 0,
            corpus: false,
            document_rank: 0,
        }
    }

    #[test]
    fn rounds_are_the_stage_s_round_lines_or_one() {
        let log = |lines: &[&str]| lines.iter().map(|l| l.to_string()).collect::<Vec<_>>();
        assert_eq!(rounds_in(&log(&["clue: page 3", "difficulty: d = 0"])), 1);
        assert_eq!(
            rounds_in(&log(&["beliefs round 1 (λ = 0)", "round 1 read pages 4, 5; useful none", "round 2 read pages 9; useful 9", "round two read pages"])),
            2
        );
    }

    #[test]
    fn rows_count_accuracy_abstentions_and_recall() {
        let records =
            [record("a", "59%", true, vec![7, 2], vec![2]), record("b", ABSTAINED, true, vec![], vec![]), record("c", ABSTAINED, false, vec![1], vec![4])];
        let answerable = HashMap::from([("a", true), ("b", false), ("c", true)]);
        let row = &answer_rows(&records, &answerable, &[1, 5])["p"];
        assert_eq!((row.n, row.correct, row.unanswerable, row.abstained_right, row.abstained_wrong), (3, 2, 1, 1, 1));
        assert_eq!(row.with_gold, 2);
        assert_eq!(row.recall(), vec![0.0, 0.5]);
        assert_eq!(row.mrr(), 0.25);
        assert!((row.accuracy() - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(row.per_question_costs(), (3.0, 100.0, 10.0));
    }

    #[test]
    fn rows_by_group_leave_out_what_the_group_does_not_name() {
        let mut records = [record("a", "1", true, vec![], vec![]), record("b", "2", false, vec![], vec![]), record("c", "3", true, vec![], vec![])];
        records[1].source = "t".into();
        let rows = answer_rows_by(&records, &HashMap::new(), &[1], |r| (r.qid != "c").then(|| format!("{} / {}", r.profile, r.source)));
        assert_eq!(rows.keys().collect::<Vec<_>>(), ["p / s", "p / t"]);
        assert_eq!((rows["p / s"].n, rows["p / s"].correct, rows["p / t"].n, rows["p / t"].correct), (1, 1, 1, 0));
    }

    #[test]
    fn corpus_answers_get_their_own_row_with_routing() {
        let mut records = [record("a", "1", true, vec![3], vec![3]), record("a", "1", true, vec![0, 3], vec![3]), record("b", "2", false, vec![0], vec![3])];
        for (r, rank) in records[1..].iter_mut().zip([2, 0]) {
            r.corpus = true;
            r.document_rank = rank;
        }
        let rows = answer_rows(&records, &HashMap::new(), &[1]);
        assert_eq!(rows.keys().collect::<Vec<_>>(), ["p", "p (corpus)"]);
        assert_eq!(rows["p (corpus)"].n, 2);
        assert_eq!(rows["p (corpus)"].routing(), vec![0.0, 0.5], "second of the documents counts at 3, not at 1");
        assert_eq!(rows["p"].routing(), vec![0.0, 0.0]);
    }

    #[test]
    fn the_log_keeps_what_it_held_and_mends_a_torn_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("log.jsonl");
        let whole = serde_json::to_string(&record("a", "1", true, vec![], vec![])).expect("json");
        std::fs::write(&path, format!("{whole}\n{{\"profile\": \"p\", \"qi")).expect("write");
        let (mut log, held) = ResultsLog::open(&path).expect("open");
        assert_eq!(held.len(), 1, "the torn line is not a record");
        log.append(&record("b", "2", false, vec![], vec![])).expect("append");
        drop(log);
        let (_, held) = ResultsLog::open(&path).expect("reopen");
        assert_eq!(held.iter().map(|r| r.qid.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    }
}
