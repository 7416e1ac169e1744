//! A candidate stage for MaxSim over large corpora: PLAID's centroid interaction.
//!
//! Every page token is given the code of its nearest centroid (spherical k-means over a sample
//! of the corpus's tokens). A question's tokens are scored once against the centroids; a page's
//! approximate score is then, per question token, the best centroid score among its tokens'
//! codes, summed: a table look-up per token instead of a dot product of `dim` values, and two
//! bytes a token instead of the vector. Only the best-scoring pages are scored exactly
//! (Santhanam et al., "PLAID: an efficient engine for late interaction retrieval", 2022; this
//! is their centroid interaction without the pruning of low-scoring centroids, which a corpus
//! of this appliance's size does not need).

use gemm::{Parallelism, gemm};
use half::f16;
use rayon::prelude::*;

use crate::maxsim::{PageVectors, QueryBatch};
use crate::maxsim_cpu::MaxSimCpu;
use crate::topk::top_k;

/// Tokens assigned per matrix product.
const ASSIGN_ROWS: usize = 4096;

/// Unit-length centroids of a corpus's token vectors.
#[derive(Debug, Clone)]
pub struct Codebook {
    dim: usize,
    /// `count × dim`, row after row.
    centroids: Vec<f32>,
}

impl Codebook {
    /// Spherical k-means over `sample` (token after token): `count` centroids (at most 65,536
    /// and at most the sample's tokens), started from tokens spread evenly over the sample.
    pub fn train(sample: &[f32], dim: usize, count: usize, iterations: usize) -> Codebook {
        let n = sample.len() / dim.max(1);
        let count = count.clamp(1, n.clamp(1, 1 << 16));
        let mut centroids: Vec<f32> = (0..count).flat_map(|c| sample[c * n / count * dim..(c * n / count + 1) * dim].iter().copied()).collect();
        if n == 0 {
            centroids = vec![0.0; count * dim];
        }
        for _ in 0..iterations {
            let book = Codebook { dim, centroids };
            let codes = book.assign_f32(sample);
            let mut sums = vec![0.0f32; count * dim];
            for (t, &c) in codes.iter().enumerate() {
                for (s, v) in sums[c as usize * dim..(c as usize + 1) * dim].iter_mut().zip(&sample[t * dim..(t + 1) * dim]) {
                    *s += v;
                }
            }
            // An empty cluster keeps its centroid.
            for (c, mean) in sums.chunks_exact_mut(dim).enumerate() {
                let norm = mean.iter().map(|v| v * v).sum::<f32>().sqrt();
                if norm > 0.0 {
                    mean.iter_mut().for_each(|v| *v /= norm);
                } else {
                    mean.copy_from_slice(&book.centroids[c * dim..(c + 1) * dim]);
                }
            }
            centroids = sums;
        }
        Codebook { dim, centroids }
    }

    /// Number of centroids.
    pub fn len(&self) -> usize {
        self.centroids.len() / self.dim.max(1)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.centroids.is_empty()
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The centroids, row after row.
    pub fn centroids(&self) -> &[f32] {
        &self.centroids
    }

    /// Each token's nearest centroid by dot product (tokens stored as f16).
    pub fn assign(&self, tokens: &[f16]) -> Vec<u16> {
        tokens
            .par_chunks(ASSIGN_ROWS * self.dim)
            .flat_map_iter(|chunk| {
                let x: Vec<f32> = chunk.iter().map(|v| v.to_f32()).collect();
                self.assign_block(&x)
            })
            .collect()
    }

    fn assign_f32(&self, tokens: &[f32]) -> Vec<u16> {
        tokens.par_chunks(ASSIGN_ROWS * self.dim).flat_map_iter(|x| self.assign_block(x)).collect()
    }

    fn assign_block(&self, x: &[f32]) -> Vec<u16> {
        let (rows, k, dim) = (x.len() / self.dim, self.len(), self.dim);
        if rows == 0 {
            return Vec::new();
        }
        let scores = dot_rows(x, &self.centroids, dim);
        scores.chunks_exact(k).map(|row| top_k(row, 1).first().copied().unwrap_or(0) as u16).collect()
    }
}

/// Every row of `a` against every row of `b` (both row-major, `dim` columns):
/// `out[i * rows_of_b + j]` is the dot product of row `i` of `a` and row `j` of `b`.
fn dot_rows(a: &[f32], b: &[f32], dim: usize) -> Vec<f32> {
    let (m, n) = (a.len().checked_div(dim).unwrap_or(0), b.len().checked_div(dim).unwrap_or(0));
    let mut out = vec![0.0f32; m * n];
    if out.is_empty() {
        return out;
    }
    // SAFETY: a is m × dim row-major, b is n × dim row-major (read as its transpose, dim × n),
    // out m × n row-major; the lengths match these shapes.
    unsafe {
        gemm(
            m,
            n,
            dim,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            dim as isize,
            b.as_ptr(),
            dim as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
    out
}

/// Every page's token codes, in the same order and with the same offsets as its vectors.
#[derive(Debug, Clone)]
pub struct PageCodes {
    codes: Vec<u16>,
    offsets: Vec<u32>,
}

impl PageCodes {
    /// The codes of `pages`' tokens.
    pub fn new(book: &Codebook, pages: &PageVectors) -> PageCodes {
        PageCodes { codes: book.assign(pages.data()), offsets: pages.offsets().to_vec() }
    }

    /// Codes already computed, with the pages' token offsets.
    pub fn from_parts(codes: Vec<u16>, offsets: Vec<u32>) -> PageCodes {
        assert_eq!(offsets.last().copied().unwrap_or(0) as usize, codes.len(), "offsets end at the last code");
        PageCodes { codes, offsets }
    }

    /// Number of pages.
    pub fn page_count(&self) -> usize {
        self.offsets.len().saturating_sub(1)
    }

    /// Number of token codes.
    pub fn token_count(&self) -> usize {
        self.codes.len()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.codes.len() * 2 + self.offsets.len() * 4
    }
}

/// Every centroid's dot product with every query token of a batch, computed once per search.
pub struct CentroidTable {
    tokens: usize,
    /// `values[c * tokens + token]`: one row per centroid, read whole for each page token.
    values: Vec<f32>,
}

impl CentroidTable {
    /// The table of `book`'s centroids against `queries`' tokens.
    pub fn new(book: &Codebook, queries: &QueryBatch) -> CentroidTable {
        let (t, dim) = (queries.token_count(), book.dim);
        let values = dot_rows(&book.centroids, queries.data(), dim);
        CentroidTable { tokens: t, values }
    }

    /// Approximate MaxSim of every page for every query, `[page * queries + query]`: per query
    /// token, the best score of a centroid among the page's token codes.
    pub fn page_scores(&self, codes: &PageCodes, queries: &QueryBatch) -> Vec<f32> {
        let (t, nq) = (self.tokens, queries.query_count());
        let np = codes.page_count();
        let mut scores = vec![0.0f32; np * nq];
        if nq == 0 {
            return scores;
        }
        scores.par_chunks_mut(nq * 256).enumerate().for_each(|(chunk, out)| {
            let mut best = vec![0.0f32; t];
            for (i, page_scores) in out.chunks_exact_mut(nq).enumerate() {
                let p = chunk * 256 + i;
                let page = &codes.codes[codes.offsets[p] as usize..codes.offsets[p + 1] as usize];
                if page.is_empty() {
                    continue;
                }
                best.iter_mut().for_each(|b| *b = f32::NEG_INFINITY);
                for &c in page {
                    let row = &self.values[c as usize * t..(c as usize + 1) * t];
                    for (b, r) in best.iter_mut().zip(row) {
                        *b = b.max(*r);
                    }
                }
                for (q, s) in page_scores.iter_mut().enumerate() {
                    *s = queries.token_range(q).map(|token| best[token]).sum();
                }
            }
        });
        scores
    }
}

/// [`CentroidTable::page_scores`] with a table made for this call.
pub fn centroid_scores(book: &Codebook, codes: &PageCodes, queries: &QueryBatch) -> Vec<f32> {
    CentroidTable::new(book, queries).page_scores(codes, queries)
}

/// The pages worth scoring exactly: the union, over the batch's queries, of each query's
/// `per_query` best pages by [`centroid_scores`], in page order.
pub fn candidates(book: &Codebook, codes: &PageCodes, queries: &QueryBatch, per_query: usize) -> Vec<usize> {
    let nq = queries.query_count();
    let approx = centroid_scores(book, codes, queries);
    let mut chosen = vec![false; codes.page_count()];
    for q in 0..nq {
        let column: Vec<f32> = approx.iter().skip(q).step_by(nq.max(1)).copied().collect();
        for p in top_k(&column, per_query) {
            chosen[p] = true;
        }
    }
    chosen.iter().enumerate().filter(|(_, c)| **c).map(|(p, _)| p).collect()
}

/// The `k` best pages for each query, best first, with their exact scores: candidates by
/// centroid codes ([`candidates`], `per_query` a query), then exact MaxSim on those alone.
pub fn two_stage_top_k(
    cpu: &MaxSimCpu,
    book: &Codebook,
    codes: &PageCodes,
    pages: &PageVectors,
    queries: &QueryBatch,
    per_query: usize,
    k: usize,
) -> Vec<Vec<(usize, f32)>> {
    let chosen = candidates(book, codes, queries, per_query);
    let exact = cpu.score_subset(pages, queries, &chosen);
    let nq = queries.query_count();
    (0..nq)
        .map(|q| {
            let column: Vec<f32> = exact.iter().skip(q).step_by(nq).copied().collect();
            top_k(&column, k).into_iter().map(|i| (chosen[i], column[i])).collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maxsim::maxsim_reference;
    use crate::testing::Noise;

    fn unit(v: &mut [f32], dim: usize) {
        for t in v.chunks_exact_mut(dim) {
            let n = t.iter().map(|x| x * x).sum::<f32>().sqrt();
            t.iter_mut().for_each(|x| *x /= n);
        }
    }

    /// Pages whose tokens lie near a few of `topics` directions, and a question near one page's.
    fn corpus(rng: &mut Noise, dim: usize, topics: usize, pages: usize) -> (PageVectors, Vec<f32>) {
        let mut centres = rng.uniform(topics * dim);
        unit(&mut centres, dim);
        let mut out = PageVectors::new(dim);
        for _ in 0..pages {
            let n = 5 + rng.below(40);
            let mut v = Vec::with_capacity(n * dim);
            let own: Vec<usize> = (0..3).map(|_| rng.below(topics)).collect();
            for _ in 0..n {
                let c = own[rng.below(3)];
                v.extend(centres[c * dim..(c + 1) * dim].iter().zip(rng.uniform(dim)).map(|(a, b)| a + 0.15 * b));
            }
            unit(&mut v, dim);
            out.push_page(&v);
        }
        (out, centres)
    }

    #[test]
    fn assignment_is_the_nearest_centroid() {
        let mut rng = Noise::new(5);
        let dim = 37;
        let mut sample = rng.uniform(500 * dim);
        unit(&mut sample, dim);
        let book = Codebook::train(&sample, dim, 23, 4);
        assert_eq!(book.len(), 23);
        let tokens: Vec<f16> = rng.uniform(301 * dim).iter().map(|&v| f16::from_f32(v)).collect();
        let codes = book.assign(&tokens);
        for (t, &c) in codes.iter().enumerate() {
            let x: Vec<f32> = tokens[t * dim..(t + 1) * dim].iter().map(|v| v.to_f32()).collect();
            let dots: Vec<f32> = book.centroids().chunks_exact(dim).map(|cv| cv.iter().zip(&x).map(|(a, b)| a * b).sum()).collect();
            let best = dots.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            assert!(dots[c as usize] >= best - 1e-4, "token {t}: code {c} scores {} of the best {best}", dots[c as usize]);
        }
    }

    #[test]
    fn centroid_scores_equal_maxsim_over_the_centroids_themselves() {
        // Pages made of the centroids exactly: the approximation is then exact.
        let mut rng = Noise::new(8);
        let dim = 20;
        let mut sample = rng.uniform(64 * dim);
        unit(&mut sample, dim);
        let book = Codebook { dim, centroids: sample.clone() };
        let mut pages = PageVectors::new(dim);
        for p in 0..50 {
            let picks: Vec<usize> = (0..p % 9).map(|_| rng.below(64)).collect();
            let v: Vec<f32> = picks.iter().flat_map(|&c| sample[c * dim..(c + 1) * dim].iter().copied()).collect();
            pages.push_page(&v);
        }
        let mut queries = QueryBatch::new(dim);
        queries.push_query(&rng.uniform(7 * dim));
        queries.push_query(&rng.uniform(dim));
        let got = centroid_scores(&book, &PageCodes::new(&book, &pages), &queries);
        crate::testing::assert_all_close("centroid scores", &got, &maxsim_reference(&pages, &queries), 2e-3, 2e-3);
    }

    #[test]
    fn candidates_hold_the_exact_top_pages() {
        let mut rng = Noise::new(21);
        let dim = 48;
        let (pages, centres) = corpus(&mut rng, dim, 40, 2000);
        let sample: Vec<f32> = pages.data().iter().map(|v| v.to_f32()).collect();
        let book = Codebook::train(&sample, dim, 64, 6);
        let codes = PageCodes::new(&book, &pages);
        for q in 0..5 {
            let mut query: Vec<f32> = (0..6).flat_map(|i| centres[((q * 7 + i % 2) % 40) * dim..((q * 7 + i % 2) % 40 + 1) * dim].to_vec()).collect();
            query.iter_mut().zip(rng.uniform(6 * dim)).for_each(|(a, b)| *a += 0.1 * b);
            unit(&mut query, dim);
            let mut batch = QueryBatch::new(dim);
            batch.push_query(&query);
            let exact = maxsim_reference(&pages, &batch);
            let top10 = top_k(&exact, 10);
            // 5 % of the corpus as candidates.
            let chosen = candidates(&book, &codes, &batch, 100);
            assert!(chosen.len() <= 100);
            for &p in &top10 {
                assert!(chosen.binary_search(&p).is_ok(), "question {q}: exact top-10 page {p} is not a candidate");
            }
            let two_stage = two_stage_top_k(&MaxSimCpu::new(2), &book, &codes, &pages, &batch, 100, 10);
            assert_eq!(two_stage[0].iter().map(|(p, _)| *p).collect::<Vec<_>>(), top10, "question {q}: the same top 10, in order");
            for (p, score) in &two_stage[0] {
                assert!((score - exact[*p]).abs() < 1e-3, "question {q}: page {p} keeps its exact score");
            }
        }
    }
}
