//! Retrieval quality: each question's pages ranked over its own document (or the corpus),
//! scored against its gold pages.

use std::collections::BTreeMap;
use std::time::Instant;

use super::metrics::{ndcg_at, recall_at, rr_at};
use super::{EvalError, Question, file_name};
use crate::retrieval::{Ranker, SearchMode};
use crate::store::DocumentRecord;

/// Sums of each metric at each K, over a group of questions.
#[derive(Debug, Default, Clone)]
pub struct RankingTotals {
    pub n: usize,
    recall: Vec<f64>,
    ndcg: Vec<f64>,
    mrr: Vec<f64>,
}

impl RankingTotals {
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

    fn mean(&self, v: &[f64]) -> Vec<f64> {
        v.iter().map(|x| x / self.n.max(1) as f64).collect()
    }

    /// Mean Recall@K at each K.
    pub fn recall(&self) -> Vec<f64> {
        self.mean(&self.recall)
    }

    /// Mean NDCG@K at each K.
    pub fn ndcg(&self) -> Vec<f64> {
        self.mean(&self.ndcg)
    }

    /// Mean RR@K at each K.
    pub fn mrr(&self) -> Vec<f64> {
        self.mean(&self.mrr)
    }
}

/// One ranking mode's scores, per source and `overall`.
#[derive(Debug, Clone)]
pub struct RankingReport {
    pub mode: SearchMode,
    pub seconds: f64,
    pub by_source: BTreeMap<String, RankingTotals>,
    /// Questions scored; left out for having no gold pages, or no stored document.
    pub scored: usize,
    pub unanswerable: usize,
    pub missing: usize,
}

/// Ranks every question with gold pages whose document is stored, in each of `modes`, and
/// scores the first K pages at each of `ks`. With `corpus` a question searches every
/// document, and a page of another document counts as a miss.
pub fn score_rankings(
    ranker: &Ranker,
    questions: &[Question],
    docs: &[DocumentRecord],
    modes: &[SearchMode],
    ks: &[usize],
    corpus: bool,
) -> Result<Vec<RankingReport>, EvalError> {
    let by_file: std::collections::HashMap<&str, &DocumentRecord> = docs.iter().map(|d| (file_name(&d.source_path), d)).collect();
    let (mut unanswerable, mut missing) = (0, 0);
    // Grouped by document, so that one batch ranks a document's questions together.
    let mut groups: BTreeMap<&str, Vec<&Question>> = BTreeMap::new();
    for q in questions {
        if q.evidence_pages.is_empty() {
            unanswerable += 1;
        } else if let Some(doc) = by_file.get(file_name(&q.doc)) {
            groups.entry(doc.id.as_str()).or_default().push(q);
        } else {
            missing += 1;
        }
    }
    let scored = groups.values().map(Vec::len).sum();
    let kmax = ks.iter().copied().max().unwrap_or(10);
    let mut reports = Vec::new();
    for &mode in modes {
        let started = Instant::now();
        let mut by_source: BTreeMap<String, RankingTotals> = BTreeMap::new();
        for (doc_id, qs) in &groups {
            let scope: Vec<DocumentRecord> = if corpus { docs.to_vec() } else { docs.iter().filter(|d| d.id == *doc_id).cloned().collect() };
            let texts: Vec<&str> = qs.iter().map(|q| q.question.as_str()).collect();
            let ranked = ranker.rank(&texts, &scope, mode, kmax)?;
            for (q, hits) in qs.iter().zip(ranked) {
                let pages: Vec<u32> = hits.iter().map(|h| if h.doc == *doc_id { h.page } else { 0 }).collect();
                by_source.entry(q.source.clone()).or_default().add(&pages, &q.evidence_pages, ks);
                by_source.entry("overall".into()).or_default().add(&pages, &q.evidence_pages, ks);
            }
        }
        reports.push(RankingReport { mode, seconds: started.elapsed().as_secs_f64(), by_source, scored, unanswerable, missing });
    }
    Ok(reports)
}
