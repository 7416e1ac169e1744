//! MaxSim on the CPU: the path for boxes without a real GPU.
//!
//! Where the CPU has AVX-512, `maxsim_avx512` scores sixteen page tokens to a register.
//! Elsewhere the query tokens of the whole batch are laid out transposed (`dim` rows of `lanes`), so that
//! each page token is broadcast against 24 query lanes at a time and every multiply-add does
//! useful work: a small matrix product with a running maximum instead of a sum. Pages are split
//! between threads; page tokens are converted from f16 four at a time into a scratch block.

use half::f16;
use half::slice::HalfFloatSliceExt;

use crate::maxsim::{PageVectors, QueryBatch};

/// Query lanes handled per pass: three 8-wide registers.
const LANE_GROUP: usize = 24;
/// Page tokens handled per pass.
const TOKEN_BLOCK: usize = 4;

/// The CPU MaxSim scorer.
#[derive(Debug, Clone)]
pub struct MaxSimCpu {
    threads: usize,
}

/// Which SIMD path the CPU scorer takes on this machine.
pub fn cpu_features() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if crate::maxsim_avx512::available() {
        return "avx512f";
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        return "avx2+fma";
    }
    "portable"
}

#[cfg(target_arch = "x86_64")]
fn has_avx2_fma() -> bool {
    std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
}

/// Queries transposed for the kernel: `qt[d * lanes + lane]`, lanes padded to whole groups
/// with zero vectors (whose maxima are ignored).
struct TransposedQueries {
    qt: Vec<f32>,
    lanes: usize,
    tokens: usize,
}

impl TransposedQueries {
    fn new(queries: &QueryBatch) -> TransposedQueries {
        let tokens = queries.token_count();
        let lanes = tokens.div_ceil(LANE_GROUP).max(1) * LANE_GROUP;
        let dim = queries.dim();
        let mut qt = vec![0.0f32; dim * lanes];
        for t in 0..tokens {
            for (d, v) in queries.token(t).iter().enumerate() {
                qt[d * lanes + t] = *v;
            }
        }
        TransposedQueries { qt, lanes, tokens }
    }
}

impl Default for MaxSimCpu {
    fn default() -> Self {
        MaxSimCpu::new(std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
    }
}

impl MaxSimCpu {
    /// A scorer using `threads` threads.
    pub fn new(threads: usize) -> MaxSimCpu {
        MaxSimCpu { threads: threads.max(1) }
    }

    /// Scores every page against every query: `scores[page * queries + query]`.
    pub fn score(&self, pages: &PageVectors, queries: &QueryBatch) -> Vec<f32> {
        let all: Vec<usize> = (0..pages.page_count()).collect();
        self.score_subset(pages, queries, &all)
    }

    /// Scores the pages `ids` against every query: `scores[i * queries + query]` for page
    /// `ids[i]` (the exact stage after a candidate stage).
    pub fn score_subset(&self, pages: &PageVectors, queries: &QueryBatch, ids: &[usize]) -> Vec<f32> {
        assert_eq!(pages.dim(), queries.dim(), "pages and queries differ in dimension");
        let nq = queries.query_count();
        let np = ids.len();
        let mut scores = vec![0.0f32; np * nq];
        if np == 0 || nq == 0 {
            return scores;
        }
        let layout = QueryLayout::new(queries);
        // Split by tokens, not pages, so that threads get equal work.
        let total: usize = ids.iter().map(|&p| pages.token_range(p).len()).sum();
        let per_thread = total.div_ceil(self.threads).max(1);
        let mut bounds = vec![0usize];
        let mut seen = 0;
        for (i, &p) in ids.iter().enumerate() {
            seen += pages.token_range(p).len();
            if seen >= per_thread * bounds.len() && bounds.len() < self.threads {
                bounds.push(i + 1);
            }
        }
        if *bounds.last().unwrap_or(&0) != np {
            bounds.push(np);
        }
        std::thread::scope(|s| {
            let mut rest: &mut [f32] = &mut scores;
            for w in bounds.windows(2) {
                let (chunk, tail) = rest.split_at_mut((w[1] - w[0]) * nq);
                rest = tail;
                let layout = &layout;
                let part = &ids[w[0]..w[1]];
                s.spawn(move || layout.score_pages(pages, queries, part, chunk));
            }
        });
        scores
    }
}

/// The queries laid out for the path this CPU takes.
enum QueryLayout {
    #[cfg(target_arch = "x86_64")]
    Avx512(crate::maxsim_avx512::QueryGroups),
    Lanes(TransposedQueries),
}

impl QueryLayout {
    fn new(queries: &QueryBatch) -> QueryLayout {
        #[cfg(target_arch = "x86_64")]
        if crate::maxsim_avx512::available() {
            return QueryLayout::Avx512(crate::maxsim_avx512::QueryGroups::new(queries));
        }
        QueryLayout::Lanes(TransposedQueries::new(queries))
    }

    fn score_pages(&self, pages: &PageVectors, queries: &QueryBatch, ids: &[usize], out: &mut [f32]) {
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: this layout is made only where AVX-512F is available; `out` holds the
            // pages' scores for every query.
            QueryLayout::Avx512(groups) => unsafe { crate::maxsim_avx512::score_pages(pages, queries, groups, ids, out) },
            QueryLayout::Lanes(tq) => score_pages(pages, queries, tq, ids, out),
        }
    }
}

fn score_pages(pages: &PageVectors, queries: &QueryBatch, tq: &TransposedQueries, ids: &[usize], out: &mut [f32]) {
    let dim = pages.dim();
    let nq = queries.query_count();
    let mut best = vec![f32::NEG_INFINITY; tq.lanes];
    let mut block = vec![0.0f32; TOKEN_BLOCK * dim];
    for (i, &p) in ids.iter().enumerate() {
        let page = pages.page(p);
        let ntok = page.len() / dim.max(1);
        best.iter_mut().for_each(|b| *b = f32::NEG_INFINITY);
        let mut t = 0;
        while t < ntok {
            let n = (ntok - t).min(TOKEN_BLOCK);
            load_block(&page[t * dim..(t + n) * dim], n, dim, &mut block);
            max_block(&block, dim, tq, &mut best);
            t += n;
        }
        for q in 0..nq {
            out[i * nq + q] = if ntok == 0 { 0.0 } else { queries.token_range(q).map(|l| best[l]).sum() };
        }
    }
    debug_assert!(tq.tokens <= tq.lanes);
}

/// Converts `n` tokens to f32; a short block repeats its last token, which leaves maxima as
/// they are.
fn load_block(src: &[f16], n: usize, dim: usize, block: &mut [f32]) {
    src.convert_to_f32_slice(&mut block[..n * dim]);
    for k in n..TOKEN_BLOCK {
        block.copy_within((n - 1) * dim..n * dim, k * dim);
    }
}

fn max_block(block: &[f32], dim: usize, tq: &TransposedQueries, best: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU supports AVX2 and FMA (checked above); slices are sized by the caller
        // (block: TOKEN_BLOCK * dim, qt: dim * lanes, best: lanes, lanes a multiple of 24).
        unsafe { max_block_avx2(block, dim, tq, best) };
        return;
    }
    max_block_portable(block, dim, tq, best);
}

fn max_block_portable(block: &[f32], dim: usize, tq: &TransposedQueries, best: &mut [f32]) {
    for g in (0..tq.lanes).step_by(LANE_GROUP) {
        let mut acc = [[0.0f32; LANE_GROUP]; TOKEN_BLOCK];
        for d in 0..dim {
            let q = &tq.qt[d * tq.lanes + g..d * tq.lanes + g + LANE_GROUP];
            for (k, row) in acc.iter_mut().enumerate() {
                let b = block[k * dim + d];
                for (a, qv) in row.iter_mut().zip(q) {
                    *a += b * qv;
                }
            }
        }
        for row in &acc {
            for (l, a) in row.iter().enumerate() {
                best[g + l] = best[g + l].max(*a);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
// The register tiles are indexed by token and lane group at once; iterators would hide that.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma")]
unsafe fn max_block_avx2(block: &[f32], dim: usize, tq: &TransposedQueries, best: &mut [f32]) {
    use std::arch::x86_64::*;
    let lanes = tq.lanes;
    let qt = tq.qt.as_ptr();
    let bp = block.as_ptr();
    for g in (0..lanes).step_by(LANE_GROUP) {
        // SAFETY (whole block): every pointer offset stays inside the slices sized as above.
        unsafe {
            let z = _mm256_setzero_ps();
            let mut a = [[z; 3]; TOKEN_BLOCK];
            for d in 0..dim {
                let row = qt.add(d * lanes + g);
                let q0 = _mm256_loadu_ps(row);
                let q1 = _mm256_loadu_ps(row.add(8));
                let q2 = _mm256_loadu_ps(row.add(16));
                for (k, acc) in a.iter_mut().enumerate() {
                    let b = _mm256_broadcast_ss(&*bp.add(k * dim + d));
                    acc[0] = _mm256_fmadd_ps(b, q0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(b, q1, acc[1]);
                    acc[2] = _mm256_fmadd_ps(b, q2, acc[2]);
                }
            }
            let out = best.as_mut_ptr().add(g);
            for j in 0..3 {
                let m = _mm256_max_ps(_mm256_max_ps(a[0][j], a[1][j]), _mm256_max_ps(a[2][j], a[3][j]));
                let cur = _mm256_loadu_ps(out.add(8 * j));
                _mm256_storeu_ps(out.add(8 * j), _mm256_max_ps(cur, m));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maxsim::maxsim_reference;
    use crate::testing::{Noise, assert_all_close};

    #[test]
    fn matches_the_reference_on_odd_sizes() {
        let mut rng = Noise::new(7);
        for (dim, nq_tokens, page_tokens, threads) in [
            (384, vec![20, 7, 1], vec![1, 3, 1001, 0, 57, 4, 5], 2),
            (37, vec![1], vec![1, 1, 1, 2], 1),
            (8, vec![25, 24, 23], (0..300).map(|i| i % 9).collect(), 3),
        ] {
            let mut pages = PageVectors::new(dim);
            for n in &page_tokens {
                pages.push_page(&rng.uniform(n * dim));
            }
            let mut queries = QueryBatch::new(dim);
            for n in &nq_tokens {
                queries.push_query(&rng.uniform(n * dim));
            }
            let want = maxsim_reference(&pages, &queries);
            assert_all_close("MaxSim on the CPU", &MaxSimCpu::new(threads).score(&pages, &queries), &want, 1e-4, 1e-4);
            // The lane path (AVX2 where the CPU has it) too, even where AVX-512 is taken.
            let mut lanes = vec![f32::NAN; want.len()];
            let all: Vec<usize> = (0..pages.page_count()).collect();
            QueryLayout::Lanes(TransposedQueries::new(&queries)).score_pages(&pages, &queries, &all, &mut lanes);
            assert_all_close("MaxSim on the CPU's lane path", &lanes, &want, 1e-4, 1e-4);
            // A subset, out of order and with a page twice, gets the same rows.
            let nq = queries.query_count();
            let ids: Vec<usize> = (0..pages.page_count()).rev().step_by(2).chain([0]).collect();
            let rows: Vec<f32> = ids.iter().flat_map(|&p| want[p * nq..(p + 1) * nq].iter().copied()).collect();
            assert_all_close("MaxSim on a subset", &MaxSimCpu::new(threads).score_subset(&pages, &queries, &ids), &rows, 1e-4, 1e-4);
            // The portable path too, whatever this CPU supports.
            let tq = TransposedQueries::new(&queries);
            let mut best = vec![f32::NEG_INFINITY; tq.lanes];
            let mut block = vec![0.0; TOKEN_BLOCK * dim];
            let p = page_tokens.iter().position(|&n| n > 0).expect("a page with tokens");
            let page = pages.page(p);
            let ntok = page.len() / dim;
            for t in (0..ntok).step_by(TOKEN_BLOCK) {
                let n = (ntok - t).min(TOKEN_BLOCK);
                load_block(&page[t * dim..(t + n) * dim], n, dim, &mut block);
                max_block_portable(&block, dim, &tq, &mut best);
            }
            let nq = queries.query_count();
            for q in 0..nq {
                let s: f32 = queries.token_range(q).map(|l| best[l]).sum();
                assert!((s - want[p * nq + q]).abs() / want[p * nq + q].abs().max(1.0) < 1e-4);
            }
        }
    }
}
