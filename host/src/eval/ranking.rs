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
    /// Over the whole corpus: questions whose document is the first, or among the first
    /// three, documents of the ranking (each document placed by its best page).
    routed: [usize; 2],
}

/// How many documents document-level routing accuracy is read at.
pub const ROUTING_KS: [usize; 2] = [1, 3];

/// The distinct documents of a ranking of pages, in the order their best pages come.
pub fn document_order<'a>(page_docs: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut order: Vec<&str> = Vec::new();
    for d in page_docs {
        if !order.contains(&d) {
            order.push(d);
        }
    }
    order
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

    fn add_routing(&mut self, documents: &[&str], gold: &str) {
        for (i, k) in ROUTING_KS.iter().enumerate() {
            self.routed[i] += usize::from(documents.iter().take(*k).any(|d| *d == gold));
        }
    }

    /// Share of the questions whose document was among the first 1 and 3 documents (corpus
    /// scope only; 0 over a question's own document, where it is not measured).
    pub fn routing(&self) -> Vec<f64> {
        self.routed.iter().map(|&r| r as f64 / self.n.max(1) as f64).collect()
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

/// Pages ranked per question over the corpus for routing accuracy.
const ROUTING_DEPTH: usize = 100;

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
    // Over the corpus, enough pages that the first three documents show among them.
    let depth = if corpus { kmax.max(ROUTING_DEPTH) } else { kmax };
    let mut reports = Vec::new();
    for &mode in modes {
        let started = Instant::now();
        let mut by_source: BTreeMap<String, RankingTotals> = BTreeMap::new();
        for (doc_id, qs) in &groups {
            let scope: Vec<DocumentRecord> = if corpus { docs.to_vec() } else { docs.iter().filter(|d| d.id == *doc_id).cloned().collect() };
            let texts: Vec<&str> = qs.iter().map(|q| q.question.as_str()).collect();
            let ranked = ranker.rank(&texts, &scope, mode, depth)?;
            for (q, hits) in qs.iter().zip(ranked) {
                let pages: Vec<u32> = hits.iter().take(kmax).map(|h| if h.doc == *doc_id { h.page } else { 0 }).collect();
                let documents = document_order(hits.iter().map(|h| h.doc.as_str()));
                for key in [q.source.clone(), "overall".to_string()] {
                    let totals = by_source.entry(key).or_default();
                    totals.add(&pages, &q.evidence_pages, ks);
                    if corpus {
                        totals.add_routing(&documents, doc_id);
                    }
                }
            }
        }
        reports.push(RankingReport { mode, seconds: started.elapsed().as_secs_f64(), by_source, scored, unanswerable, missing });
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_come_in_the_order_of_their_best_page() {
        assert_eq!(document_order(["b", "b", "a", "c", "a", "d"]), vec!["b", "a", "c", "d"]);
    }

    #[test]
    fn routing_counts_the_gold_document_among_the_first_one_and_three() {
        let mut t = RankingTotals::default();
        for (docs, gold) in [(vec!["g", "x"], "g"), (vec!["x", "y", "g"], "g"), (vec!["x", "y", "z", "g"], "g"), (vec![], "g")] {
            t.add(&[1], &[1], &[1]);
            t.add_routing(&docs, gold);
        }
        assert_eq!(t.routing(), vec![0.25, 0.5]);
    }
}
