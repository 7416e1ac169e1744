//! Retrieval: per-token page vectors scored by MaxSim, BM25 over page text, and their fusion.

mod artifact_cache;
mod artifacts;
mod candidates;
mod documents;
mod lexical;
mod snippet;
mod vector_cache;

pub use artifact_cache::ArtifactCache;
pub use artifacts::{ArtifactQuery, artifact_record, bm25, stored_artifact};
pub use candidates::{CandidateSettings, CandidateStage};
pub use documents::rank_with_documents;
pub use lexical::{LexicalError, LexicalIndex};
pub use snippet::{best_block, best_snippet, matching_word_boxes, trim_snippet};
pub use vector_cache::{DocumentVectors, PageVectorCache};

use std::path::Path;

use evident_kernels::{MaxSimCpu, MaxSimKernel, PageVectors, QueryBatch, pool_tokens};
use thiserror::Error;

use crate::models::{ModelError, TextEncoder};
use crate::store::{DocumentRecord, IndexState, Store, StoreError};

/// Pages encoded per call to the encoder while indexing.
const ENCODE_PAGES: usize = 16;

/// Name recorded with stored vectors, so that a change of encoder shows up as stale vectors.
pub const ENCODER_ID: &str = "all-MiniLM-L6-v2/tokens-v1";

/// Why retrieval failed.
#[derive(Debug, Error)]
pub enum RetrievalError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Lexical(#[from] LexicalError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Gpu(#[from] evident_kernels::GpuError),
    #[error("document {0} has no token vectors yet; run `evident index`")]
    NotIndexed(String),
}

impl crate::error::Classified for RetrievalError {
    fn kind(&self) -> crate::error::ErrorKind {
        match self {
            RetrievalError::Store(e) => e.kind(),
            RetrievalError::NotIndexed(_) => crate::error::ErrorKind::Conflict,
            RetrievalError::Lexical(_) | RetrievalError::Model(_) | RetrievalError::Gpu(_) => crate::error::ErrorKind::Internal,
        }
    }
}

/// How pages are ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    /// Late interaction over per-token vectors.
    Maxsim,
    /// BM25 over page text.
    Bm25,
    /// Both, each min-max normalised per query, then mixed.
    Hybrid,
}

/// One ranked page.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Hit {
    pub doc: String,
    pub page: u32,
    pub score: f32,
}

/// Where MaxSim runs.
pub enum MaxSimBackend {
    Cpu(MaxSimCpu),
    Gpu(MaxSimKernel),
}

impl MaxSimBackend {
    /// Which scorer this is, for reports.
    pub fn name(&self) -> &'static str {
        match self {
            MaxSimBackend::Cpu(_) => "the CPU",
            MaxSimBackend::Gpu(_) => "the GPU (WGSL kernel)",
        }
    }

    /// Scores `pages` against every query of the batch: `[page * queries + query]`.
    pub fn score(&self, pages: &PageVectors, queries: &QueryBatch) -> Result<Vec<f32>, RetrievalError> {
        match self {
            MaxSimBackend::Cpu(cpu) => Ok(cpu.score(pages, queries)),
            MaxSimBackend::Gpu(kernel) => Ok(kernel.score(&kernel.upload(pages)?, queries)?),
        }
    }

    /// Scores a document's pages, keeping them on the GPU for the next question.
    pub fn score_document(&self, doc: &DocumentVectors, queries: &QueryBatch) -> Result<Vec<f32>, RetrievalError> {
        match self {
            MaxSimBackend::Cpu(cpu) => Ok(cpu.score(&doc.pages, queries)),
            MaxSimBackend::Gpu(kernel) => {
                let pages = match doc.device.get() {
                    Some(pages) => pages,
                    None => {
                        let uploaded = kernel.upload(&doc.pages)?;
                        doc.device.get_or_init(|| uploaded)
                    }
                };
                Ok(kernel.score(pages, queries)?)
            }
        }
    }
}

/// The lexical index's folder inside the data directory.
pub fn lexical_dir(data_dir: &Path) -> std::path::PathBuf {
    data_dir.join("lexical")
}

/// The name recorded with vectors pooled by `factor` (1: the encoder's own vectors).
pub fn vectors_id(factor: u32) -> String {
    if factor <= 1 { ENCODER_ID.to_string() } else { format!("{ENCODER_ID}/pool{factor}") }
}

/// Brings one document's retrieval indexes up to date, its token vectors pooled by
/// `pool_factor` (`ingest.token_pool_factor`); returns whether anything was done.
pub fn index_document(store: &Store, lexical: &LexicalIndex, encoder: &TextEncoder, doc: &DocumentRecord, pool_factor: u32) -> Result<bool, RetrievalError> {
    index_document_with(store, lexical, encoder, doc, pool_factor, &|_| {})
}

/// Whether a document's retrieval indexes are missing or out of date.
pub fn needs_index(store: &Store, doc: &DocumentRecord) -> Result<bool, RetrievalError> {
    let state = store.index_state(doc)?;
    Ok(!has_current_vectors(&state) || !state.lexical)
}

/// [`index_document`], telling `on_encoded` how many pages have their vectors so far.
pub fn index_document_with(
    store: &Store,
    lexical: &LexicalIndex,
    encoder: &TextEncoder,
    doc: &DocumentRecord,
    pool_factor: u32,
    on_encoded: &dyn Fn(u32),
) -> Result<bool, RetrievalError> {
    let mut state = store.index_state(doc)?;
    let wanted = vectors_id(pool_factor);
    let wants_vectors = state.vectors_by.as_deref() != Some(wanted.as_str());
    if !wants_vectors && state.lexical {
        return Ok(false);
    }
    if wants_vectors && state.lexical && pool_factor > 1 && state.vectors_by.as_deref() == Some(ENCODER_ID) {
        // The encoder's own vectors are stored: pooling them needs no encoding.
        return pool_stored_vectors(store, doc, state, encoder.dim(), pool_factor, on_encoded).map(|()| true);
    }
    let pages: Vec<(u32, String)> = (1..=doc.page_count).map(|n| store.page(doc, n).map(|p| (n, p.text()))).collect::<Result<_, _>>()?;
    if !state.lexical {
        lexical.replace_document(&doc.id, &pages)?;
        state.lexical = true;
        if let Err(e) = store.set_index_state(doc, &state) {
            // Removed while its pages were indexed: take its BM25 entries back out.
            if matches!(e, StoreError::NoSuchDocument(_)) {
                lexical.remove_document(&doc.id)?;
            }
            return Err(e.into());
        }
    }
    if wants_vectors {
        // A few pages at a time, so that only their f32 vectors are held at once.
        let mut vectors: Vec<(u32, Vec<half::f16>)> = Vec::with_capacity(pages.len());
        for chunk in pages.chunks(ENCODE_PAGES) {
            let texts: Vec<&str> = chunk.iter().map(|(_, t)| t.as_str()).collect();
            for ((n, _), tv) in chunk.iter().zip(encoder.token_vectors(&texts)?) {
                let pooled = pool_tokens(&tv.vectors, encoder.dim(), pool_factor);
                vectors.push((*n, pooled.iter().map(|&x| half::f16::from_f32(x)).collect()));
            }
            on_encoded(vectors.len() as u32);
        }
        state.vectors_by = Some(wanted);
        store.put_page_vectors(doc, &vectors, &state)?;
    }
    Ok(true)
}

/// Replaces a document's stored (unpooled) token vectors by their pooling.
fn pool_stored_vectors(
    store: &Store,
    doc: &DocumentRecord,
    mut state: IndexState,
    dim: usize,
    pool_factor: u32,
    on_encoded: &dyn Fn(u32),
) -> Result<(), RetrievalError> {
    let stored = store.page_vectors(doc)?;
    let mut vectors = Vec::with_capacity(stored.len());
    for (n, v) in stored {
        let f32s: Vec<f32> = v.iter().map(|x| x.to_f32()).collect();
        vectors.push((n, pool_tokens(&f32s, dim, pool_factor).iter().map(|&x| half::f16::from_f32(x)).collect()));
        on_encoded(vectors.len() as u32);
    }
    state.vectors_by = Some(vectors_id(pool_factor));
    store.put_page_vectors(doc, &vectors, &state)?;
    Ok(())
}

/// A document's pages as MaxSim input, with the page number of each entry.
pub fn load_page_vectors(store: &Store, doc: &DocumentRecord, dim: usize) -> Result<(PageVectors, Vec<u32>), RetrievalError> {
    if !has_current_vectors(&store.index_state(doc)?) {
        return Err(RetrievalError::NotIndexed(doc.id.clone()));
    }
    let mut pages = PageVectors::new(dim);
    let mut numbers = Vec::new();
    for (n, v) in store.page_vectors(doc)? {
        pages.push_page_f16(&v);
        numbers.push(n);
    }
    Ok((pages, numbers))
}

/// Per-query min-max normalisation to [0, 1] (all equal: all 0).
pub fn min_max(scores: &mut [f32]) {
    let (lo, hi) = scores.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), &s| (l.min(s), h.max(s)));
    let span = hi - lo;
    for s in scores.iter_mut() {
        *s = if span > 0.0 { (*s - lo) / span } else { 0.0 };
    }
}

/// Ranks the pages of `docs` for several questions at once (a question and its sub-questions,
/// or a benchmark's questions about one document): the `k` best hits per question.
pub struct Ranker<'a> {
    pub store: &'a Store,
    pub lexical: &'a LexicalIndex,
    pub encoder: Option<&'a TextEncoder>,
    pub maxsim: &'a MaxSimBackend,
    /// Where page vectors stay between questions; without one they are read for each call.
    pub vectors: Option<&'a PageVectorCache>,
    /// The candidate stage that large scopes take on the CPU; without one, MaxSim is exact.
    pub candidates: Option<&'a CandidateStage>,
    /// Weight of BM25 in hybrid mode (HiKEY's alpha).
    pub alpha: f32,
    /// Over several documents, weight of a page's document in its score
    /// ([`rank_with_documents`]; 0 ranks pages alone).
    pub document_weight: f32,
}

impl Ranker<'_> {
    /// The best `k` pages of `docs` for each question.
    pub fn rank(&self, questions: &[&str], docs: &[DocumentRecord], mode: SearchMode, k: usize) -> Result<Vec<Vec<Hit>>, RetrievalError> {
        // Every page in scope, in a fixed order: (doc index, page number).
        let mut pages: Vec<(usize, u32)> = Vec::new();
        let mut dense: Vec<Vec<f32>> = vec![Vec::new(); questions.len()];
        if mode != SearchMode::Bm25 {
            let encoder = self.encoder.ok_or_else(|| ModelError::Compute("no encoder loaded".into()))?;
            let mut batch = QueryBatch::new(encoder.dim());
            for tv in encoder.token_vectors(questions)? {
                batch.push_query(&tv.vectors);
            }
            let load = |doc: &DocumentRecord| -> Result<std::sync::Arc<DocumentVectors>, RetrievalError> {
                match self.vectors {
                    Some(cache) => cache.get(self.store, doc, encoder.dim()),
                    None => {
                        let (pages, numbers) = load_page_vectors(self.store, doc, encoder.dim())?;
                        Ok(std::sync::Arc::new(DocumentVectors::new(pages, numbers)))
                    }
                }
            };
            let in_scope: usize = docs.iter().map(|d| d.page_count as usize).sum();
            let staged = match (self.candidates, self.maxsim) {
                (Some(stage), MaxSimBackend::Cpu(cpu)) if stage.applies(in_scope) => {
                    let loaded: Vec<(String, std::sync::Arc<DocumentVectors>)> =
                        docs.iter().map(|d| load(d).map(|v| (d.id.clone(), v))).collect::<Result<_, _>>()?;
                    let scores = stage.score(cpu, &loaded, &batch);
                    Some(loaded.into_iter().map(|(_, v)| v).zip(scores).collect::<Vec<_>>())
                }
                _ => None,
            };
            let mut staged = staged.map(Vec::into_iter);
            for (d, doc) in docs.iter().enumerate() {
                // One document's vectors at a time, unless the candidate stage needed them all.
                let (vectors, scores) = match staged.as_mut().and_then(Iterator::next) {
                    Some(pair) => pair,
                    None => {
                        let vectors = load(doc)?;
                        let scores = self.maxsim.score_document(&vectors, &batch)?;
                        (vectors, scores)
                    }
                };
                let nq = questions.len();
                for (i, n) in vectors.numbers.iter().enumerate() {
                    pages.push((d, *n));
                    for (q, col) in dense.iter_mut().enumerate() {
                        col.push(scores[i * nq + q]);
                    }
                }
            }
        } else {
            for (d, doc) in docs.iter().enumerate() {
                pages.extend((1..=doc.page_count).map(|n| (d, n)));
            }
        }
        let ids: Vec<String> = docs.iter().map(|d| d.id.clone()).collect();
        let position: std::collections::HashMap<(&str, u32), usize> = pages.iter().enumerate().map(|(i, (d, n))| ((ids[*d].as_str(), *n), i)).collect();
        let document_of: Vec<usize> = pages.iter().map(|(d, _)| *d).collect();
        let mut out = Vec::with_capacity(questions.len());
        for (q, question) in questions.iter().enumerate() {
            let mut scores = match mode {
                SearchMode::Maxsim => dense[q].clone(),
                SearchMode::Bm25 | SearchMode::Hybrid => {
                    let mut lex = vec![0.0f32; pages.len()];
                    for (doc, page, score) in self.lexical.search(question, Some(&ids), pages.len().max(1))? {
                        if let Some(&i) = position.get(&(doc.as_str(), page)) {
                            lex[i] = score;
                        }
                    }
                    if mode == SearchMode::Hybrid {
                        let mut dn = dense[q].clone();
                        min_max(&mut dn);
                        min_max(&mut lex);
                        lex.iter().zip(&dn).map(|(l, d)| self.alpha * l + (1.0 - self.alpha) * d).collect()
                    } else {
                        lex
                    }
                }
            };
            if mode == SearchMode::Bm25 {
                // Pages BM25 never matched stay at 0 and are ranked after every match.
                scores.iter_mut().for_each(|s| *s = s.max(0.0));
            }
            // One document in scope keeps its pages' own scores and order.
            let hits = rank_with_documents(&scores, &document_of, k, self.document_weight)
                .into_iter()
                .map(|(i, score)| Hit { doc: ids[pages[i].0].clone(), page: pages[i].1, score })
                .collect();
            out.push(hits);
        }
        Ok(out)
    }
}

/// Whether a document's stored token vectors come from the current encoder, pooled or not
/// (MaxSim scores either; `index` brings them to the configured pooling).
pub fn has_current_vectors(state: &IndexState) -> bool {
    state.vectors_by.as_deref().is_some_and(|id| id == ENCODER_ID || id.strip_prefix(ENCODER_ID).is_some_and(|rest| rest.starts_with("/pool")))
}
