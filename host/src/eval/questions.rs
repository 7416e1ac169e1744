//! Benchmark questions (one JSON object a line) and their match to stored documents.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;

use super::EvalError;
use crate::store::DocumentRecord;

/// One benchmark question, as `questions.jsonl` holds it.
#[derive(Debug, Clone, Deserialize)]
pub struct Question {
    /// The benchmark it comes from (mmlongbench, financebench, uda).
    pub source: String,
    pub qid: String,
    /// The document's file name (or a path ending in it).
    pub doc: String,
    pub question: String,
    /// Gold evidence pages, 1-based; none for a question that is not answerable.
    #[serde(default)]
    pub evidence_pages: Vec<u32>,
    #[serde(default)]
    pub answer: String,
    #[serde(default = "answerable_default")]
    pub answerable: bool,
    /// What the benchmark adds beside the question (only the second reference answer is read).
    #[serde(default)]
    pub extra: QuestionExtra,
}

/// The part of a question's `extra` object that judging and the tables read.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct QuestionExtra {
    /// A second reference answer: UDA's FinQA questions give the gold program's exact value
    /// ("-0.2445") beside the rounded or percentage answer ("-24.5%").
    #[serde(default)]
    pub answer_2: Option<String>,
    /// Where the evidence lies, as MMLongBench-Doc names it ("Pure-text (Plain-text)", "Table",
    /// "Chart", "Figure", "Generalized-text (Layout)"); none elsewhere and when unanswerable.
    #[serde(default)]
    pub evidence_sources: EvidenceSources,
}

/// MMLongBench-Doc's evidence sources: a list, which the benchmark's file writes as the text
/// of a Python list ("['Chart', 'Table']").
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum EvidenceSources {
    List(Vec<String>),
    Text(String),
}

impl Default for EvidenceSources {
    fn default() -> Self {
        EvidenceSources::List(Vec::new())
    }
}

impl EvidenceSources {
    /// The names in the list.
    pub fn names(&self) -> Vec<&str> {
        match self {
            EvidenceSources::List(names) => names.iter().map(String::as_str).collect(),
            EvidenceSources::Text(text) => text
                .trim()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .split(',')
                .map(|name| name.trim().trim_matches(['\'', '"']).trim())
                .filter(|name| !name.is_empty())
                .collect(),
        }
    }
}

impl Question {
    /// The kind of evidence the answer rests on, from the benchmark's `evidence_sources`: a
    /// chart or a figure among them makes it that kind, then a table, then text alone; `None`
    /// where the benchmark names no source.
    pub fn evidence_kind(&self) -> Option<&'static str> {
        let sources = self.extra.evidence_sources.names();
        let any = |words: &[&str]| sources.iter().any(|s| words.iter().any(|w| s.contains(w)));
        if sources.is_empty() {
            None
        } else if any(&["Chart", "Figure"]) {
            Some("chart or figure")
        } else if any(&["Table"]) {
            Some("table")
        } else if sources.iter().all(|s| s.starts_with("Pure-text")) {
            Some("plain text only")
        } else {
            Some("layout and other")
        }
    }
}

fn answerable_default() -> bool {
    true
}

/// Reads the questions at `path`, skipping blank lines.
pub fn load_questions(path: &Path) -> Result<Vec<Question>, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Read { path: path.to_path_buf(), source })?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| EvalError::BadQuestion { path: path.to_path_buf(), line: i + 1, reason: e.to_string() }))
        .collect()
}

/// The last part of a path, which is how questions name their documents.
pub fn file_name(path: &str) -> &str {
    Path::new(path).file_name().and_then(|n| n.to_str()).unwrap_or(path)
}

/// The questions whose document is stored, each with its document, taken in turn from each
/// source (so that the first N cover every source), at most `limit`.
pub fn in_turn<'q, 'd>(questions: &'q [Question], docs: &'d [DocumentRecord], limit: Option<usize>) -> Vec<(&'q Question, &'d DocumentRecord)> {
    let by_file: HashMap<&str, &DocumentRecord> = docs.iter().map(|d| (file_name(&d.source_path), d)).collect();
    let mut per_source: BTreeMap<&str, Vec<(&Question, &DocumentRecord)>> = BTreeMap::new();
    for q in questions {
        if let Some(doc) = by_file.get(file_name(&q.doc)) {
            per_source.entry(q.source.as_str()).or_default().push((q, doc));
        }
    }
    let longest = per_source.values().map(Vec::len).max().unwrap_or(0);
    let mut chosen = Vec::new();
    for i in 0..longest {
        for list in per_source.values() {
            if let Some(pair) = list.get(i) {
                chosen.push(*pair);
            }
        }
    }
    chosen.truncate(limit.unwrap_or(usize::MAX));
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str, file: &str) -> DocumentRecord {
        DocumentRecord {
            id: id.into(),
            content_hash: id.into(),
            title: file.into(),
            page_count: 1,
            source_path: format!("/somewhere/{file}"),
            ingested_at: 0,
            pages_without_text: 0,
            has_page_images: false,
        }
    }

    fn question(source: &str, qid: &str, file: &str) -> Question {
        Question {
            source: source.into(),
            qid: qid.into(),
            doc: file.into(),
            question: "q".into(),
            evidence_pages: vec![1],
            answer: String::new(),
            answerable: true,
            extra: QuestionExtra::default(),
        }
    }

    #[test]
    fn questions_are_taken_in_turn_from_each_source_and_only_over_stored_documents() {
        let docs = [doc("a", "a.pdf"), doc("b", "b.pdf")];
        let qs = [question("x", "x1", "a.pdf"), question("x", "x2", "a.pdf"), question("y", "y1", "dir/b.pdf"), question("y", "y2", "missing.pdf")];
        let order: Vec<&str> = in_turn(&qs, &docs, None).iter().map(|(q, _)| q.qid.as_str()).collect();
        assert_eq!(order, ["x1", "y1", "x2"]);
        let first: Vec<&str> = in_turn(&qs, &docs, Some(2)).iter().map(|(_, d)| d.id.as_str()).collect();
        assert_eq!(first, ["a", "b"]);
    }

    #[test]
    fn a_chart_or_figure_outranks_a_table_which_outranks_text() {
        let kind = |sources: &[&str]| {
            let mut q = question("mmlongbench-doc", "m", "a.pdf");
            q.extra.evidence_sources = EvidenceSources::List(sources.iter().map(|s| s.to_string()).collect());
            q.evidence_kind()
        };
        assert_eq!(kind(&[]), None);
        assert_eq!(kind(&["Pure-text (Plain-text)"]), Some("plain text only"));
        assert_eq!(kind(&["Pure-text (Plain-text)", "Table"]), Some("table"));
        assert_eq!(kind(&["Table", "Figure"]), Some("chart or figure"));
        assert_eq!(kind(&["Pure-text (Plain-text)", "Chart"]), Some("chart or figure"));
        assert_eq!(kind(&["Pure-text (Plain-text)", "Generalized-text (Layout)"]), Some("layout and other"));
        // The benchmark's file writes the list as the text of a Python list.
        let parsed = |sources: &str| {
            let json = format!(r#"{{"source": "s", "qid": "q", "doc": "d.pdf", "question": "?", "extra": {{"evidence_sources": {sources}, "other": 1}}}}"#);
            serde_json::from_str::<Question>(&json).expect("a question").evidence_kind()
        };
        assert_eq!(parsed(r#"["Table"]"#), Some("table"));
        assert_eq!(parsed(r#""['Pure-text (Plain-text)', 'Table']""#), Some("table"));
        assert_eq!(parsed(r#""['Pure-text (Plain-text)']""#), Some("plain text only"));
        assert_eq!(parsed(r#""[]""#), None);
    }
}
