//! The candidate stage of a MaxSim search over many pages: centroid codes pick the pages worth
//! scoring exactly (PLAID's centroid interaction, `evident_kernels::CentroidTable`).
//!
//! The codebook is trained in memory at the first search whose scope is large enough, from
//! token vectors spread over the documents in scope, and each document's codes are assigned
//! at its first such search and kept; so the store's format is unchanged, and a search under
//! the threshold is exact as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use evident_kernels::{CentroidTable, Codebook, MaxSimCpu, PageCodes, QueryBatch, top_k};

use super::DocumentVectors;

/// Token vectors of the k-means sample per centroid.
const SAMPLE_PER_CENTROID: usize = 64;
/// Rounds of k-means.
const ROUNDS: usize = 4;

/// When and how a search first picks candidates (`[compute]`).
#[derive(Debug, Clone, Copy)]
pub struct CandidateSettings {
    /// Scopes of at least this many pages take the candidate stage (0: never).
    pub min_pages: usize,
    /// Pages each question scores exactly.
    pub per_question: usize,
    /// Centroids of the codebook.
    pub centroids: usize,
}

/// The codebook and the documents' codes, shared by every search of a process.
pub struct CandidateStage {
    settings: CandidateSettings,
    book: OnceLock<Arc<Codebook>>,
    codes: Mutex<HashMap<String, Arc<PageCodes>>>,
}

impl CandidateSettings {
    /// The settings `[compute]` names.
    pub fn of(compute: &crate::config::ComputeConfig) -> CandidateSettings {
        CandidateSettings { min_pages: compute.candidate_stage_pages, per_question: compute.candidates_per_question, centroids: compute.centroids }
    }
}

impl CandidateStage {
    /// A stage with nothing trained yet.
    pub fn new(settings: CandidateSettings) -> CandidateStage {
        CandidateStage { settings, book: OnceLock::new(), codes: Mutex::default() }
    }

    /// Whether a search over `pages` pages takes this stage.
    pub fn applies(&self, pages: usize) -> bool {
        self.settings.min_pages > 0 && pages >= self.settings.min_pages
    }

    /// Exact MaxSim scores for each question's candidates and, for every other page, its
    /// centroid score lowered under the lowest candidate's exact one (so that no page scored
    /// only approximately ranks above a page scored exactly): `[doc][page * queries + query]`,
    /// as `MaxSimCpu::score` lays them out per document.
    pub fn score(&self, cpu: &MaxSimCpu, docs: &[(String, Arc<DocumentVectors>)], queries: &QueryBatch) -> Vec<Vec<f32>> {
        let nq = queries.query_count();
        let book = self.book.get_or_init(|| Arc::new(self.train(docs))).clone();
        let table = CentroidTable::new(&book, queries);
        let mut scores: Vec<Vec<f32>> = docs.iter().map(|(id, v)| table.page_scores(&self.codes_of(&book, id, v), queries)).collect();
        // Each question's candidates over every document: (doc, page) by approximate score.
        let index: Vec<(usize, usize)> = docs.iter().enumerate().flat_map(|(d, (_, v))| (0..v.pages.page_count()).map(move |p| (d, p))).collect();
        let mut chosen: Vec<Vec<usize>> = vec![Vec::new(); docs.len()];
        for q in 0..nq {
            let column: Vec<f32> = index.iter().map(|&(d, p)| scores[d][p * nq + q]).collect();
            for i in top_k(&column, self.settings.per_question) {
                chosen[index[i].0].push(index[i].1);
            }
        }
        let mut floor = vec![f32::INFINITY; nq];
        let mut exact_of: Vec<Vec<Option<usize>>> = docs.iter().map(|(_, v)| vec![None; v.pages.page_count()]).collect();
        let mut exact: Vec<Vec<f32>> = Vec::with_capacity(docs.len());
        for (d, ids) in chosen.iter_mut().enumerate() {
            ids.sort_unstable();
            ids.dedup();
            let s = cpu.score_subset(&docs[d].1.pages, queries, ids);
            for (i, &p) in ids.iter().enumerate() {
                exact_of[d][p] = Some(i);
                for (q, f) in floor.iter_mut().enumerate() {
                    *f = f.min(s[i * nq + q]);
                }
            }
            exact.push(s);
        }
        for (d, doc_scores) in scores.iter_mut().enumerate() {
            for (p, row) in doc_scores.chunks_exact_mut(nq.max(1)).enumerate() {
                match exact_of[d][p] {
                    Some(i) => row.copy_from_slice(&exact[d][i * nq..(i + 1) * nq]),
                    None => {
                        for (q, s) in row.iter_mut().enumerate() {
                            *s = s.min(floor[q] - 1e-3 * floor[q].abs().max(1.0));
                        }
                    }
                }
            }
        }
        scores
    }

    /// Spherical k-means over tokens spread evenly over every document in scope.
    fn train(&self, docs: &[(String, Arc<DocumentVectors>)]) -> Codebook {
        let dim = docs.first().map_or(1, |(_, v)| v.pages.dim());
        let total: usize = docs.iter().map(|(_, v)| v.pages.token_count()).sum();
        let want = (SAMPLE_PER_CENTROID * self.settings.centroids).min(total).max(1);
        let mut sample = Vec::with_capacity(want * dim);
        let (mut seen, mut next) = (0usize, 0usize);
        for (_, v) in docs {
            let n = v.pages.token_count();
            while next < want && next * total / want < seen + n {
                let t = next * total / want - seen;
                sample.extend(v.pages.data()[t * dim..(t + 1) * dim].iter().map(|x| x.to_f32()));
                next += 1;
            }
            seen += n;
        }
        let started = std::time::Instant::now();
        let book = Codebook::train(&sample, dim, self.settings.centroids, ROUNDS);
        tracing::info!(centroids = book.len(), sample = want, seconds = started.elapsed().as_secs_f64(), "trained the MaxSim candidate stage's codebook");
        book
    }

    fn codes_of(&self, book: &Codebook, id: &str, vectors: &DocumentVectors) -> Arc<PageCodes> {
        if let Some(codes) = crate::error::lock(&self.codes).get(id)
            && codes.page_count() == vectors.pages.page_count()
            && codes.token_count() == vectors.pages.token_count()
        {
            return codes.clone();
        }
        let codes = Arc::new(PageCodes::new(book, &vectors.pages));
        crate::error::lock(&self.codes).insert(id.to_string(), codes.clone());
        codes
    }

    /// Drops a document's codes (it was removed or indexed again).
    pub fn forget(&self, id: &str) {
        crate::error::lock(&self.codes).remove(id);
    }
}
