//! Late-interaction (MaxSim) scoring: the data it runs on and the plain reference.
//!
//! A page's score for a query is the sum, over the query's token vectors, of the best dot
//! product with any of the page's token vectors. A page with no tokens scores 0.

use half::f16;

/// The token vectors of many pages, flattened with offsets (no padding) and stored as f16.
#[derive(Debug, Clone, Default)]
pub struct PageVectors {
    dim: usize,
    data: Vec<f16>,
    /// Token offsets: page `p` holds tokens `offsets[p]..offsets[p + 1]`.
    offsets: Vec<u32>,
}

impl PageVectors {
    /// An empty set of pages with vectors of `dim` dimensions.
    pub fn new(dim: usize) -> PageVectors {
        PageVectors { dim, data: Vec::new(), offsets: vec![0] }
    }

    /// An empty set with room for `pages` pages of `tokens` token vectors in all, so that
    /// filling it never copies what it holds.
    pub fn with_capacity(dim: usize, pages: usize, tokens: usize) -> PageVectors {
        let mut offsets = Vec::with_capacity(pages + 1);
        offsets.push(0);
        PageVectors { dim, data: Vec::with_capacity(tokens * dim), offsets }
    }

    /// Appends a page; `vectors` holds `tokens * dim` values, token after token.
    pub fn push_page(&mut self, vectors: &[f32]) {
        assert_eq!(vectors.len() % self.dim.max(1), 0, "page vectors must be whole tokens");
        self.data.extend(vectors.iter().map(|&v| f16::from_f32(v)));
        self.offsets.push((self.data.len() / self.dim.max(1)) as u32);
    }

    /// Appends a page already stored as f16.
    pub fn push_page_f16(&mut self, vectors: &[f16]) {
        assert_eq!(vectors.len() % self.dim.max(1), 0, "page vectors must be whole tokens");
        self.data.extend_from_slice(vectors);
        self.offsets.push((self.data.len() / self.dim.max(1)) as u32);
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of pages.
    pub fn page_count(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Number of token vectors over all pages.
    pub fn token_count(&self) -> usize {
        *self.offsets.last().unwrap_or(&0) as usize
    }

    /// Token range of page `p`.
    pub fn token_range(&self, p: usize) -> std::ops::Range<usize> {
        self.offsets[p] as usize..self.offsets[p + 1] as usize
    }

    /// Page `p`'s vectors, token after token.
    pub fn page(&self, p: usize) -> &[f16] {
        let r = self.token_range(p);
        &self.data[r.start * self.dim..r.end * self.dim]
    }

    /// All vectors, token after token.
    pub fn data(&self) -> &[f16] {
        &self.data
    }

    /// The token offsets (one more than pages).
    pub fn offsets(&self) -> &[u32] {
        &self.offsets
    }
}

/// Several queries scored in one pass (a question and its sub-questions), each a list of
/// token vectors.
#[derive(Debug, Clone)]
pub struct QueryBatch {
    dim: usize,
    data: Vec<f32>,
    offsets: Vec<u32>,
}

impl QueryBatch {
    /// An empty batch of `dim`-dimensional queries.
    pub fn new(dim: usize) -> QueryBatch {
        QueryBatch { dim, data: Vec::new(), offsets: vec![0] }
    }

    /// Appends a query of `vectors.len() / dim` tokens.
    pub fn push_query(&mut self, vectors: &[f32]) {
        assert_eq!(vectors.len() % self.dim.max(1), 0, "query vectors must be whole tokens");
        self.data.extend_from_slice(vectors);
        self.offsets.push((self.data.len() / self.dim.max(1)) as u32);
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of queries.
    pub fn query_count(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Number of token vectors over all queries.
    pub fn token_count(&self) -> usize {
        *self.offsets.last().unwrap_or(&0) as usize
    }

    /// Token range of query `q`.
    pub fn token_range(&self, q: usize) -> std::ops::Range<usize> {
        self.offsets[q] as usize..self.offsets[q + 1] as usize
    }

    /// All query vectors, token after token.
    pub fn data(&self) -> &[f32] {
        &self.data
    }

    /// The token offsets (one more than queries).
    pub fn offsets(&self) -> &[u32] {
        &self.offsets
    }

    /// Token `t`'s vector.
    pub fn token(&self, t: usize) -> &[f32] {
        &self.data[t * self.dim..(t + 1) * self.dim]
    }
}

/// The plain reference: scores laid out page-major, `scores[page * queries + query]`.
pub fn maxsim_reference(pages: &PageVectors, queries: &QueryBatch) -> Vec<f32> {
    assert_eq!(pages.dim(), queries.dim(), "pages and queries differ in dimension");
    let dim = pages.dim();
    let nq = queries.query_count();
    let mut scores = vec![0.0f32; pages.page_count() * nq];
    for p in 0..pages.page_count() {
        let page: Vec<f32> = pages.page(p).iter().map(|v| v.to_f32()).collect();
        for q in 0..nq {
            let mut total = 0.0f64;
            for t in queries.token_range(q) {
                let qv = queries.token(t);
                let best = page
                    .chunks_exact(dim)
                    .map(|pv| pv.iter().zip(qv).map(|(a, b)| f64::from(*a) * f64::from(*b)).sum::<f64>())
                    .fold(f64::NEG_INFINITY, f64::max);
                if best.is_finite() {
                    total += best;
                }
            }
            scores[p * nq + q] = total as f32;
        }
    }
    scores
}
