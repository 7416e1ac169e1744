//! AVX2 block kernels: a 256-bit register takes a quarter run (8 weights) per instruction.

use std::arch::x86_64::*;

use super::BlockEncoding;
use crate::quant::blocks::q6k_run;

#[inline]
#[target_feature(enable = "avx2,fma")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    _mm_cvtss_f32(s)
}

/// A run's 32 quants as four vectors of 8 integers, in weight order.
type Run = [__m256i; 4];

/// The nibbles of a run (byte i: weight i low, weight i + 16 high).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn nibbles(q: *const u8) -> Run {
    unsafe {
        let v = _mm_loadu_si128(q as *const __m128i);
        let mask = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(v, mask);
        let hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
        [_mm256_cvtepu8_epi32(lo), _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)), _mm256_cvtepu8_epi32(hi), _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))]
    }
}

/// A Q5_0 run's quants (0..32).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q5_run(q: *const u8) -> Run {
    unsafe {
        let qh = _mm256_set1_epi32((q as *const i32).read_unaligned());
        let mut run = nibbles(q.add(4));
        let one = _mm256_set1_epi32(1);
        for (g, v) in run.iter_mut().enumerate() {
            let base = 8 * g as i32;
            let idx = _mm256_setr_epi32(base, base + 1, base + 2, base + 3, base + 4, base + 5, base + 6, base + 7);
            *v = _mm256_or_si256(*v, _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(qh, idx), one), 4));
        }
        run
    }
}

/// Run `j` of a Q6_K block's quants minus 32.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q6_run(block: *const u8, j: usize) -> Run {
    unsafe {
        let (nib, top) = q6k_run(j);
        let mut run = nibbles(block.add(nib));
        let top = _mm256_cvtepu8_epi32(_mm_loadl_epi64(block.add(top) as *const __m128i));
        let (three, bias) = (_mm256_set1_epi32(3), _mm256_set1_epi32(32));
        for (g, v) in run.iter_mut().enumerate() {
            let bits = _mm256_and_si256(_mm256_srlv_epi32(top, _mm256_set1_epi32(2 * g as i32)), three);
            *v = _mm256_sub_epi32(_mm256_or_si256(*v, _mm256_slli_epi32(bits, 4)), bias);
        }
        run
    }
}

/// A Q8_0 run's 32 signed bytes.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q8_run(q: *const u8) -> Run {
    unsafe {
        let lo = _mm_loadu_si128(q as *const __m128i);
        let hi = _mm_loadu_si128(q.add(16) as *const __m128i);
        [_mm256_cvtepi8_epi32(lo), _mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)), _mm256_cvtepi8_epi32(hi), _mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))]
    }
}

/// Σ q·x over quarter runs `from..to` of a run, lane-wise.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_dot(run: &Run, x: *const f32, quarters: std::ops::Range<usize>) -> __m256 {
    unsafe {
        let mut s = _mm256_setzero_ps();
        for g in quarters {
            s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(run[g]), _mm256_loadu_ps(x.add(8 * g)), s);
        }
        s
    }
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_blocks(encoding: BlockEncoding, s: &[f32], q: &[u8], x: &[f32], sums: &[f32]) -> f32 {
    unsafe {
        let (qp, xp) = (q.as_ptr(), x.as_ptr());
        let runs = x.len() / 32;
        let mut acc = _mm256_setzero_ps();
        let mut offset = 0.0f32;
        let sum = |i: usize| *sums.get_unchecked(i);
        let scale = |i: usize| *s.get_unchecked(i);
        match encoding {
            BlockEncoding::Q4_0 | BlockEncoding::Q4_1 | BlockEncoding::Q5_0 | BlockEncoding::Q8_0 => {
                for i in 0..runs {
                    let (run, d) = match encoding {
                        BlockEncoding::Q4_0 => (nibbles(qp.add(16 * i)), scale(i)),
                        BlockEncoding::Q4_1 => (nibbles(qp.add(16 * i)), scale(2 * i)),
                        BlockEncoding::Q5_0 => (q5_run(qp.add(20 * i)), scale(i)),
                        _ => (q8_run(qp.add(32 * i)), scale(i)),
                    };
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), run_dot(&run, xp.add(32 * i), 0..4), acc);
                    offset += match encoding {
                        BlockEncoding::Q4_0 => -8.0 * d * sum(i),
                        BlockEncoding::Q4_1 => scale(2 * i + 1) * sum(i),
                        BlockEncoding::Q5_0 => -16.0 * d * sum(i),
                        _ => 0.0,
                    };
                }
            }
            BlockEncoding::Q4_K => {
                for b in 0..runs / 8 {
                    let (d, dmin) = (scale(2 * b), scale(2 * b + 1));
                    let qb = qp.add(144 * b);
                    for j in 0..8 {
                        let r = 8 * b + j;
                        let dot = run_dot(&nibbles(qb.add(16 + 16 * j)), xp.add(32 * r), 0..4);
                        acc = _mm256_fmadd_ps(_mm256_set1_ps(d * f32::from(*qb.add(j))), dot, acc);
                        offset -= dmin * f32::from(*qb.add(8 + j)) * sum(r);
                    }
                }
            }
            BlockEncoding::Q6_K => {
                for b in 0..runs / 8 {
                    let d = scale(b);
                    let qb = qp.add(208 * b);
                    for j in 0..8 {
                        let run = q6_run(qb, j);
                        let xr = xp.add(256 * b + 32 * j);
                        let sa = _mm256_set1_ps(d * f32::from(*qb.add(2 * j) as i8));
                        let sb = _mm256_set1_ps(d * f32::from(*qb.add(2 * j + 1) as i8));
                        acc = _mm256_fmadd_ps(sa, run_dot(&run, xr, 0..2), acc);
                        acc = _mm256_fmadd_ps(sb, run_dot(&run, xr, 2..4), acc);
                    }
                }
            }
        }
        hsum(acc) + offset
    }
}

#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_f32(w: &[f32], x: &[f32]) -> f32 {
    unsafe {
        let n = x.len();
        let (wp, xp) = (w.as_ptr(), x.as_ptr());
        let mut acc = _mm256_setzero_ps();
        let mut i = 0;
        while i + 8 <= n {
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(wp.add(i)), _mm256_loadu_ps(xp.add(i)), acc);
            i += 8;
        }
        let mut tail = 0.0;
        while i < n {
            tail += w[i] * x[i];
            i += 1;
        }
        hsum(acc) + tail
    }
}
