//! Search over what enrich stages made: MaxSim over each artifact's token vectors, BM25 over
//! its text, or both fused with the caller's weight, and nearest neighbours by sentence
//! embedding. A set is small beside a document's pages (tens to thousands of short texts), so
//! BM25 is computed over the set in scope when asked, and nothing beside redb needs keeping
//! in step with it.

use std::collections::HashMap;
use std::sync::Arc;

use evident_kernels::{PageVectors, QueryBatch, top_k};
use tantivy::tokenizer::{Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, TextAnalyzer};

use crate::models::TextEncoder;
use crate::plugins::types;
use crate::plugins::{HostFailure, HostResult};
use crate::store::{ArtifactRecord, BoundingBox, DocumentRecord, Store};

use super::{ArtifactCache, MaxSimBackend, SearchMode, min_max};

/// BM25's usual constants (Robertson and Zaragoza), as tantivy uses for pages.
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// Searches one enrich set's artifacts in the documents of a request.
pub struct ArtifactQuery<'a> {
    pub store: &'a Store,
    pub encoder: &'a TextEncoder,
    pub maxsim: &'a MaxSimBackend,
    /// The enrich set read.
    pub set: &'a str,
    /// Artifacts kept between calls.
    pub cache: &'a ArtifactCache,
}

fn failed(e: impl std::fmt::Display) -> HostFailure {
    HostFailure::Failed(e.to_string())
}

/// An artifact as a stage receives it.
pub fn stored_artifact(doc: &str, a: &ArtifactRecord) -> types::StoredArtifact {
    types::StoredArtifact {
        document: doc.to_string(),
        artifact: types::Artifact {
            key: a.key.clone(),
            kind: a.kind.clone(),
            anchor: types::Anchor { page: a.page, bbox: a.bbox.map(|b| (b.x0, b.y0, b.x1, b.y1)), blocks: a.blocks.clone() },
            text: a.text.clone(),
            fields: a.fields.iter().map(|(k, v)| types::Param { key: k.clone(), value: v.clone() }).collect(),
            links: a.links.clone(),
        },
    }
}

/// An artifact a stage returned, as stored (its vectors filled in later).
pub fn artifact_record(a: &types::Artifact) -> ArtifactRecord {
    ArtifactRecord {
        key: a.key.clone(),
        kind: a.kind.clone(),
        page: a.anchor.page,
        bbox: a.anchor.bbox.map(|(x0, y0, x1, y1)| BoundingBox { x0, y0, x1, y1 }),
        blocks: a.anchor.blocks.clone(),
        text: a.text.clone(),
        fields: a.fields.iter().map(|p| (p.key.clone(), p.value.clone())).collect(),
        links: a.links.clone(),
        embedding: Vec::new(),
        tokens: Vec::new(),
    }
}

impl ArtifactQuery<'_> {
    /// The set's artifacts of `kind` ("" for all) of `doc` when the set is complete; None when
    /// it is not built yet.
    fn complete(&self, doc: &DocumentRecord, kind: &str) -> HostResult<Option<Arc<Vec<ArtifactRecord>>>> {
        match self.store.enrich_set(&doc.id, self.set).map_err(failed)? {
            Some(set) if set.complete => Ok(Some(self.cache.get(&doc.id, &set, kind, || self.store.artifacts(&doc.id, self.set).map_err(failed))?)),
            _ => Ok(None),
        }
    }

    fn of_document(&self, doc: &DocumentRecord, kind: &str) -> HostResult<Arc<Vec<ArtifactRecord>>> {
        self.complete(doc, kind)?.ok_or_else(|| {
            HostFailure::Refused(format!("the artifacts of document {} are not built for this profile's enrich stage yet; `evident index` builds them", doc.id))
        })
    }

    /// One artifact by key.
    pub fn get(&self, doc: &DocumentRecord, key: &str) -> HostResult<Option<types::StoredArtifact>> {
        Ok(self.of_document(doc, "")?.iter().find(|a| a.key == key).map(|a| stored_artifact(&doc.id, a)))
    }

    /// A document's artifacts of one kind (every kind when empty).
    pub fn of_kind(&self, doc: &DocumentRecord, kind: &str) -> HostResult<Vec<types::StoredArtifact>> {
        Ok(self.of_document(doc, kind)?.iter().map(|a| stored_artifact(&doc.id, a)).collect())
    }

    /// The `k` best artifacts of `kind` for `query` across `docs`, and the documents skipped
    /// because their set is not built (refused when that is every one of them).
    pub fn search(
        &self,
        query: &str,
        kind: &str,
        mode: SearchMode,
        alpha: f32,
        k: usize,
        docs: &[DocumentRecord],
    ) -> HostResult<(Vec<types::ArtifactHit>, Vec<String>)> {
        let mut lists: Vec<(&str, Arc<Vec<ArtifactRecord>>)> = Vec::new();
        let mut unbuilt = Vec::new();
        for doc in docs {
            match self.complete(doc, kind)? {
                Some(list) => lists.push((doc.id.as_str(), list)),
                None => unbuilt.push(doc.id.clone()),
            }
        }
        let pool: Vec<(&str, &ArtifactRecord)> = lists.iter().flat_map(|(doc, list)| list.iter().map(move |a| (*doc, a))).collect();
        if pool.is_empty() && !unbuilt.is_empty() && unbuilt.len() == docs.len() {
            return Err(HostFailure::Refused(format!(
                "the artifacts of {} are not built for this profile's enrich stage yet; `evident index` builds them (`evident index --profile NAME` for a stage marked at_ingest = false)",
                if unbuilt.len() == 1 { format!("document {}", unbuilt[0]) } else { format!("the {} documents in scope", unbuilt.len()) }
            )));
        }
        if pool.is_empty() {
            return Ok((Vec::new(), unbuilt));
        }
        let texts: Vec<&str> = pool.iter().map(|(_, a)| a.text.as_str()).collect();
        let scores = match mode {
            SearchMode::Bm25 => bm25(query, &texts),
            SearchMode::Maxsim => self.dense(query, &pool)?,
            SearchMode::Hybrid => {
                let (mut lex, mut dense) = (bm25(query, &texts), self.dense(query, &pool)?);
                min_max(&mut lex);
                min_max(&mut dense);
                lex.iter().zip(&dense).map(|(l, d)| alpha * l + (1.0 - alpha) * d).collect()
            }
        };
        let hits = top_k(&scores, k)
            .into_iter()
            .enumerate()
            .map(|(rank, i)| types::ArtifactHit { found: stored_artifact(pool[i].0, pool[i].1), score: scores[i], rank: rank as u32 + 1 })
            .collect();
        Ok((hits, unbuilt))
    }

    /// MaxSim of the query over each artifact's token vectors (0 for an artifact without text).
    fn dense(&self, query: &str, pool: &[(&str, &ArtifactRecord)]) -> HostResult<Vec<f32>> {
        let dim = self.encoder.dim();
        let mut batch = QueryBatch::new(dim);
        for tv in self.encoder.token_vectors(&[query]).map_err(failed)? {
            batch.push_query(&tv.vectors);
        }
        let mut pages = PageVectors::new(dim);
        let mut placed = Vec::new();
        for (i, (_, a)) in pool.iter().enumerate() {
            if !a.tokens.is_empty() && a.tokens.len() % dim == 0 {
                pages.push_page_f16(bytemuck::cast_slice::<u16, half::f16>(&a.tokens));
                placed.push(i);
            }
        }
        let mut scores = vec![0.0f32; pool.len()];
        if !placed.is_empty() {
            let got = self.maxsim.score(&pages, &batch).map_err(failed)?;
            for (j, &i) in placed.iter().enumerate() {
                scores[i] = got[j];
            }
        }
        Ok(scores)
    }

    /// The `k` artifacts of the same document and kind nearest to `key`.
    pub fn neighbours(&self, doc: &DocumentRecord, key: &str, k: usize) -> HostResult<Vec<types::ArtifactHit>> {
        let all = self.of_document(doc, "")?;
        let Some(me) = all.iter().find(|a| a.key == key) else {
            return Err(HostFailure::Refused(format!("document {} has no artifact with key {key:?}", doc.id)));
        };
        let mine: Vec<f32> = me.embedding.iter().map(|&b| half::f16::from_bits(b).to_f32()).collect();
        let others: Vec<&ArtifactRecord> = all.iter().filter(|a| a.key != key && a.kind == me.kind && a.embedding.len() == mine.len()).collect();
        let scores: Vec<f32> = others.iter().map(|a| a.embedding.iter().zip(&mine).map(|(&b, m)| half::f16::from_bits(b).to_f32() * m).sum()).collect();
        Ok(top_k(&scores, k)
            .into_iter()
            .enumerate()
            .map(|(rank, i)| types::ArtifactHit { found: stored_artifact(&doc.id, others[i]), score: scores[i], rank: rank as u32 + 1 })
            .collect())
    }
}

/// Words as the page index makes them: split on non-alphanumerics, lower-cased, stemmed.
fn terms(analyzer: &mut TextAnalyzer, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stream = analyzer.token_stream(text);
    while stream.advance() {
        out.push(stream.token().text.clone());
    }
    out
}

/// BM25 of `query` against each text, the texts being the whole collection.
pub fn bm25(query: &str, texts: &[&str]) -> Vec<f32> {
    let mut analyzer = TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(Stemmer::new(Language::English))
        .build();
    let docs: Vec<Vec<String>> = texts.iter().map(|t| terms(&mut analyzer, t)).collect();
    let n = docs.len() as f32;
    let average = (docs.iter().map(Vec::len).sum::<usize>() as f32 / n.max(1.0)).max(1.0);
    let mut query_terms = terms(&mut analyzer, query);
    query_terms.sort();
    query_terms.dedup();
    let mut frequency: HashMap<&str, f32> = HashMap::new();
    for term in &query_terms {
        frequency.insert(term, docs.iter().filter(|d| d.contains(term)).count() as f32);
    }
    docs.iter()
        .map(|d| {
            let length = d.len() as f32;
            query_terms
                .iter()
                .map(|term| {
                    let tf = d.iter().filter(|t| *t == term).count() as f32;
                    let df = frequency[term.as_str()];
                    let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                    idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * length / average))
                })
                .sum()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::bm25;

    #[test]
    fn bm25_ranks_the_text_with_the_rare_word_first_and_scores_no_match_zero() {
        let texts = ["revenue grew in the third quarter", "the board met", "the third board and the revenues"];
        let s = bm25("quarterly revenue", &texts);
        assert!(s[0] > s[2] && s[2] > 0.0, "{s:?}");
        assert_eq!(s[1], 0.0);
        // A term in every text weighs less than one in a single text.
        let common = bm25("the", &texts);
        let rare = bm25("met", &texts);
        assert!(rare[1] > common[1], "{rare:?} {common:?}");
    }
}
