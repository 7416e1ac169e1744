//! MaxSim with AVX-512: a page's tokens sixteen to a register.
//!
//! The AVX2 path broadcasts a page value against query lanes, so a question of 20 tokens is
//! padded to whole lane groups and a third of every multiply-add is wasted. Here the other side
//! is vectorised: sixteen tokens of a page are converted from f16 and transposed into a scratch
//! block (`dim` rows of 16 lanes), and each query token's value is broadcast against a row, so
//! a group of up to 24 query tokens keeps its accumulators in registers and no lane is padding
//! but the last block of a page. The transposition is paid once per block and shared by every
//! query token of the batch.

use std::arch::x86_64::*;

use half::f16;

use crate::maxsim::{PageVectors, QueryBatch};

/// Page tokens per block: one 512-bit register of f32.
const TOKENS: usize = 16;
/// Most query tokens whose accumulators stay in registers at once (of 32 registers).
const MAX_GROUP: usize = 24;

/// Whether this CPU can take the AVX-512 path.
pub(crate) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
}

/// Query tokens split into groups of at most [`MAX_GROUP`], each laid out dimension-major
/// (`values[d * size + g]`) so that a step over `d` reads one short contiguous run.
pub(crate) struct QueryGroups {
    groups: Vec<(usize, Vec<f32>)>,
    tokens: usize,
}

impl QueryGroups {
    /// The batch's tokens in groups as even as possible.
    pub(crate) fn new(queries: &QueryBatch) -> QueryGroups {
        let tokens = queries.token_count();
        let dim = queries.dim();
        let count = tokens.div_ceil(MAX_GROUP).max(1);
        let mut groups = Vec::with_capacity(count);
        let mut start = 0;
        for i in 0..count {
            let end = tokens * (i + 1) / count;
            let size = end - start;
            let mut values = vec![0.0f32; dim * size];
            for g in 0..size {
                for (d, v) in queries.token(start + g).iter().enumerate() {
                    values[d * size + g] = *v;
                }
            }
            groups.push((size, values));
            start = end;
        }
        QueryGroups { groups, tokens }
    }
}

/// A 64-byte aligned run of f32, for the transposed block.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Row([f32; TOKENS]);

/// Scores the pages `ids` against every query: `out[i * queries + q]` for page `ids[i]`.
///
/// # Safety
/// The CPU must support AVX-512F ([`available`]); `out` holds `ids.len() * queries` values.
#[target_feature(enable = "avx512f")]
pub(crate) unsafe fn score_pages(pages: &PageVectors, queries: &QueryBatch, groups: &QueryGroups, ids: &[usize], out: &mut [f32]) {
    let dim = pages.dim();
    let nq = queries.query_count();
    let mut block = vec![Row([0.0; TOKENS]); dim];
    // Per query token, the running maximum of each of the sixteen lanes.
    let mut best = vec![0.0f32; groups.tokens * TOKENS];
    let mut maxima = vec![0.0f32; groups.tokens];
    for (i, &p) in ids.iter().enumerate() {
        let page = pages.page(p);
        let ntok = page.len().checked_div(dim).unwrap_or(0);
        if ntok == 0 || groups.tokens == 0 {
            out[i * nq..(i + 1) * nq].iter_mut().for_each(|s| *s = 0.0);
            continue;
        }
        best.iter_mut().for_each(|b| *b = f32::NEG_INFINITY);
        for t in (0..ntok).step_by(TOKENS) {
            // SAFETY: AVX-512F is enabled for this function; `block` has `dim` rows.
            unsafe { transpose_block(page, dim, t, ntok, &mut block) };
            let mut first = 0;
            for (size, values) in &groups.groups {
                let best = &mut best[first * TOKENS..(first + size) * TOKENS];
                // SAFETY: `values` holds `dim * size` values and `best` `size` rows of 16.
                unsafe { accumulate(*size, &block, values, dim, best) };
                first += size;
            }
        }
        for (m, row) in maxima.iter_mut().zip(best.chunks_exact(TOKENS)) {
            // SAFETY: `row` is 16 values.
            *m = unsafe { _mm512_reduce_max_ps(_mm512_loadu_ps(row.as_ptr())) };
        }
        for q in 0..nq {
            out[i * nq + q] = queries.token_range(q).map(|l| maxima[l]).sum();
        }
    }
}

/// Writes tokens `t..t + 16` of a page into `block`, dimension by dimension (`block[d]` holds
/// dimension `d` of the sixteen tokens); past the page's last token, the last token is
/// repeated, which leaves every maximum as it is.
#[target_feature(enable = "avx512f")]
unsafe fn transpose_block(page: &[f16], dim: usize, t: usize, ntok: usize, block: &mut [Row]) {
    let token = |k: usize| &page[(t + k).min(ntok - 1) * dim..((t + k).min(ntok - 1) + 1) * dim];
    let whole = dim / TOKENS * TOKENS;
    for d0 in (0..whole).step_by(TOKENS) {
        let mut r = [_mm512_setzero_ps(); TOKENS];
        for (k, reg) in r.iter_mut().enumerate() {
            // SAFETY: `token(k)` has `dim` values and `d0 + 16 <= dim`.
            *reg = unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(token(k)[d0..].as_ptr().cast())) };
        }
        let rows = transpose_16x16(r);
        for (j, row) in rows.iter().enumerate() {
            // SAFETY: `block[d0 + j]` is a 64-byte aligned row of 16 f32.
            unsafe { _mm512_store_ps(block[d0 + j].0.as_mut_ptr(), *row) };
        }
    }
    for (d, row) in block.iter_mut().enumerate().skip(whole) {
        for (k, v) in row.0.iter_mut().enumerate() {
            *v = token(k)[d].to_f32();
        }
    }
}

/// Transposes sixteen rows of sixteen: `out[j]` lane `k` is `r[k]` lane `j`.
#[inline]
#[target_feature(enable = "avx512f")]
fn transpose_16x16(r: [__m512; TOKENS]) -> [__m512; TOKENS] {
    // Pairs of rows interleaved by 32-bit element, then by 64-bit pair: u[4g + j], 128-bit
    // lane L, holds rows 4g..4g+3 at column 4L + j.
    let mut t = [_mm512_setzero_ps(); TOKENS];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    let mut u = [_mm512_setzero_ps(); TOKENS];
    for g in 0..4 {
        let (a, b) = (_mm512_castps_pd(t[4 * g]), _mm512_castps_pd(t[4 * g + 2]));
        let (c, e) = (_mm512_castps_pd(t[4 * g + 1]), _mm512_castps_pd(t[4 * g + 3]));
        u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, e));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, e));
    }
    // Column 4L + j gathers lane L of u[j], u[4 + j], u[8 + j], u[12 + j].
    let mut out = [_mm512_setzero_ps(); TOKENS];
    for j in 0..4 {
        let low01 = _mm512_shuffle_f32x4::<0x44>(u[j], u[4 + j]);
        let high01 = _mm512_shuffle_f32x4::<0x44>(u[8 + j], u[12 + j]);
        let low23 = _mm512_shuffle_f32x4::<0xEE>(u[j], u[4 + j]);
        let high23 = _mm512_shuffle_f32x4::<0xEE>(u[8 + j], u[12 + j]);
        out[j] = _mm512_shuffle_f32x4::<0x88>(low01, high01);
        out[4 + j] = _mm512_shuffle_f32x4::<0xDD>(low01, high01);
        out[8 + j] = _mm512_shuffle_f32x4::<0x88>(low23, high23);
        out[12 + j] = _mm512_shuffle_f32x4::<0xDD>(low23, high23);
    }
    out
}

/// One block against one group of `size` query tokens, into the group's running maxima.
#[target_feature(enable = "avx512f")]
unsafe fn accumulate(size: usize, block: &[Row], values: &[f32], dim: usize, best: &mut [f32]) {
    macro_rules! sized {
        ($($n:literal)*) => {
            match size {
                // SAFETY: as this function's.
                $($n => unsafe { accumulate_group::<$n>(block, values, dim, best) },)*
                _ => unreachable!("query groups hold at most {MAX_GROUP} tokens"),
            }
        };
    }
    sized!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24)
}

/// [`accumulate`] for a group of `G` tokens, whose accumulators the compiler keeps in registers.
// The accumulators are indexed by query token inside the step over dimensions.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f")]
unsafe fn accumulate_group<const G: usize>(block: &[Row], values: &[f32], dim: usize, best: &mut [f32]) {
    debug_assert!(block.len() >= dim && values.len() >= dim * G && best.len() >= G * TOKENS);
    let mut acc = [_mm512_setzero_ps(); G];
    let q = values.as_ptr();
    for d in 0..dim {
        // SAFETY (whole loop): `block` has `dim` aligned rows and `values` `dim * G` values.
        unsafe {
            let row = _mm512_load_ps(block.get_unchecked(d).0.as_ptr());
            let qd = q.add(d * G);
            for g in 0..G {
                acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(*qd.add(g)), row, acc[g]);
            }
        }
    }
    for g in 0..G {
        // SAFETY: `best` holds `G` rows of 16.
        unsafe {
            let b = best.as_mut_ptr().add(g * TOKENS);
            _mm512_storeu_ps(b, _mm512_max_ps(_mm512_loadu_ps(b), acc[g]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maxsim::maxsim_reference;
    use crate::testing::{Noise, assert_all_close};

    #[test]
    fn transposes_sixteen_by_sixteen() {
        if !available() {
            eprintln!("no AVX-512 on this CPU: the transposition is not exercised");
            return;
        }
        let values: Vec<f32> = (0..256).map(|i| i as f32).collect();
        // SAFETY: AVX-512F checked above.
        let got = unsafe {
            let mut r = [_mm512_setzero_ps(); TOKENS];
            for (k, reg) in r.iter_mut().enumerate() {
                *reg = _mm512_loadu_ps(values[k * 16..].as_ptr());
            }
            let out = transpose_16x16(r);
            let mut flat = vec![0.0f32; 256];
            for (j, row) in out.iter().enumerate() {
                _mm512_storeu_ps(flat[j * 16..].as_mut_ptr(), *row);
            }
            flat
        };
        let want: Vec<f32> = (0..256).map(|i| ((i % 16) * 16 + i / 16) as f32).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn matches_the_reference_on_odd_sizes() {
        if !available() {
            eprintln!("no AVX-512 on this CPU: its MaxSim path is not exercised");
            return;
        }
        let mut rng = Noise::new(11);
        // Dimensions with and without a tail past whole 16s; query batches of 1 to 61 tokens
        // (groups of every size from 1 to 24 and uneven splits); pages of 0 to 1001 tokens.
        for (dim, nq_tokens, page_tokens) in [
            (384, vec![20, 7, 1], vec![1, 3, 1001, 0, 57, 4, 5, 16, 17, 15, 32]),
            (37, vec![1], vec![1, 1, 1, 2, 33]),
            (8, vec![25, 24, 12], (0..300).map(|i| i % 19).collect()),
            (64, vec![3, 2], vec![16, 31, 0, 48]),
            (48, (1..=11).collect(), vec![5, 40]),
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
            let groups = QueryGroups::new(&queries);
            let mut got = vec![f32::NAN; pages.page_count() * queries.query_count()];
            // SAFETY: AVX-512F checked above; `got` is sized for every page and query.
            let all: Vec<usize> = (0..pages.page_count()).collect();
            unsafe { score_pages(&pages, &queries, &groups, &all, &mut got) };
            assert_all_close(&format!("AVX-512 MaxSim, dim {dim}"), &got, &want, 1e-4, 1e-4);
        }
    }
}
