//! AVX-512 block kernels: a 512-bit register takes half a run (16 weights) per instruction.

use std::arch::x86_64::*;

use super::BlockEncoding;
use crate::quant::blocks::q6k_run;

/// Lane indices 0..16 and 16..32: which bit of Q5_0's 32 fifth bits each lane reads.
const LANES_LO: [i32; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
const LANES_HI: [i32; 16] = [16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31];
/// Q6_K's top bits: weights 0..8 of a run in bits 0–1, 8..16 in 2–3, 16..24 in 4–5, 24..32 in 6–7.
const TOP_LO: [i32; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2];
const TOP_HI: [i32; 16] = [4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6, 6, 6];

#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn lanes(v: &[i32; 16]) -> __m512i {
    // SAFETY: 16 i32 are 64 bytes.
    unsafe { _mm512_loadu_si512(v.as_ptr() as *const __m512i) }
}

/// A run's 32 nibbles as two vectors of 16 integers: weights 0..16, then 16..32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn nibbles(q: *const u8) -> (__m512i, __m512i) {
    unsafe {
        let v = _mm_loadu_si128(q as *const __m128i);
        let mask = _mm_set1_epi8(0x0f);
        (_mm512_cvtepu8_epi32(_mm_and_si128(v, mask)), _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(v, 4), mask)))
    }
}

/// A Q5_0 run's quants (0..32): the nibbles with each weight's fifth bit from `qh`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn q5_run(q: *const u8) -> (__m512i, __m512i) {
    unsafe {
        let qh = _mm512_set1_epi32((q as *const i32).read_unaligned());
        let (lo, hi) = nibbles(q.add(4));
        let one = _mm512_set1_epi32(1);
        let bit = |idx: &[i32; 16]| _mm512_slli_epi32(_mm512_and_si512(_mm512_srlv_epi32(qh, lanes(idx)), one), 4);
        (_mm512_or_si512(lo, bit(&LANES_LO)), _mm512_or_si512(hi, bit(&LANES_HI)))
    }
}

/// Run `j` of a Q6_K block's quants minus 32 (−32..32): its 16 nibble bytes and 8 top-bit bytes.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn q6_run(block: *const u8, j: usize) -> (__m512i, __m512i) {
    unsafe {
        let (nib, top) = q6k_run(j);
        let (lo, hi) = nibbles(block.add(nib));
        let top = _mm512_cvtepu8_epi32(_mm_set1_epi64x((block.add(top) as *const i64).read_unaligned()));
        let three = _mm512_set1_epi32(3);
        let bits = |shift: &[i32; 16]| _mm512_slli_epi32(_mm512_and_si512(_mm512_srlv_epi32(top, lanes(shift)), three), 4);
        let bias = _mm512_set1_epi32(32);
        (_mm512_sub_epi32(_mm512_or_si512(lo, bits(&TOP_LO)), bias), _mm512_sub_epi32(_mm512_or_si512(hi, bits(&TOP_HI)), bias))
    }
}

/// A Q8_0 run's 32 signed bytes as two vectors of 16 integers.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn q8_run(q: *const u8) -> (__m512i, __m512i) {
    unsafe { (_mm512_cvtepi8_epi32(_mm_loadu_si128(q as *const __m128i)), _mm512_cvtepi8_epi32(_mm_loadu_si128(q.add(16) as *const __m128i))) }
}

/// Σ q·x over a run, lane-wise (not yet summed across lanes).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn run_dot((lo, hi): (__m512i, __m512i), x: *const f32) -> __m512 {
    unsafe { _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_loadu_ps(x.add(16)), _mm512_mul_ps(_mm512_cvtepi32_ps(lo), _mm512_loadu_ps(x))) }
}

#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn dot_blocks(encoding: BlockEncoding, s: &[f32], q: &[u8], x: &[f32], sums: &[f32]) -> f32 {
    unsafe {
        let (qp, xp) = (q.as_ptr(), x.as_ptr());
        let runs = x.len() / 32;
        let mut acc = _mm512_setzero_ps();
        let mut offset = 0.0f32;
        let sum = |i: usize| *sums.get_unchecked(i);
        let scale = |i: usize| *s.get_unchecked(i);
        match encoding {
            BlockEncoding::Q4_0 => {
                for i in 0..runs {
                    let d = scale(i);
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(d), run_dot(nibbles(qp.add(16 * i)), xp.add(32 * i)), acc);
                    offset -= 8.0 * d * sum(i);
                }
            }
            BlockEncoding::Q4_1 => {
                for i in 0..runs {
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(scale(2 * i)), run_dot(nibbles(qp.add(16 * i)), xp.add(32 * i)), acc);
                    offset += scale(2 * i + 1) * sum(i);
                }
            }
            BlockEncoding::Q5_0 => {
                for i in 0..runs {
                    let d = scale(i);
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(d), run_dot(q5_run(qp.add(20 * i)), xp.add(32 * i)), acc);
                    offset -= 16.0 * d * sum(i);
                }
            }
            BlockEncoding::Q8_0 => {
                for i in 0..runs {
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(scale(i)), run_dot(q8_run(qp.add(32 * i)), xp.add(32 * i)), acc);
                }
            }
            BlockEncoding::Q4_K => {
                for b in 0..runs / 8 {
                    let (d, dmin) = (scale(2 * b), scale(2 * b + 1));
                    let qb = qp.add(144 * b);
                    for j in 0..8 {
                        let r = 8 * b + j;
                        let dot = run_dot(nibbles(qb.add(16 + 16 * j)), xp.add(32 * r));
                        acc = _mm512_fmadd_ps(_mm512_set1_ps(d * f32::from(*qb.add(j))), dot, acc);
                        offset -= dmin * f32::from(*qb.add(8 + j)) * sum(r);
                    }
                }
            }
            BlockEncoding::Q6_K => {
                for b in 0..runs / 8 {
                    let d = scale(b);
                    let qb = qp.add(208 * b);
                    for j in 0..8 {
                        let (lo, hi) = q6_run(qb, j);
                        let xr = xp.add(256 * b + 32 * j);
                        let sa = _mm512_set1_ps(d * f32::from(*qb.add(2 * j) as i8));
                        let sb = _mm512_set1_ps(d * f32::from(*qb.add(2 * j + 1) as i8));
                        acc = _mm512_fmadd_ps(sa, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), _mm512_loadu_ps(xr)), acc);
                        acc = _mm512_fmadd_ps(sb, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), _mm512_loadu_ps(xr.add(16))), acc);
                    }
                }
            }
        }
        _mm512_reduce_add_ps(acc) + offset
    }
}

/// Stores a run's weights `scale · q + min` (two halves, each with its scale).
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn store_run((lo, hi): (__m512i, __m512i), scales: (f32, f32), min: f32, out: *mut f32) {
    unsafe {
        let m = _mm512_set1_ps(min);
        _mm512_storeu_ps(out, _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), _mm512_set1_ps(scales.0), m));
        _mm512_storeu_ps(out.add(16), _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), _mm512_set1_ps(scales.1), m));
    }
}

#[target_feature(enable = "avx512f,avx512bw")]
pub unsafe fn dequantize_row(encoding: BlockEncoding, s: &[f32], q: &[u8], out: &mut [f32]) {
    unsafe {
        let (qp, op) = (q.as_ptr(), out.as_mut_ptr());
        let runs = out.len() / 32;
        let scale = |i: usize| *s.get_unchecked(i);
        match encoding {
            BlockEncoding::Q4_0 => (0..runs).for_each(|i| store_run(nibbles(qp.add(16 * i)), (scale(i), scale(i)), -8.0 * scale(i), op.add(32 * i))),
            BlockEncoding::Q4_1 => (0..runs).for_each(|i| store_run(nibbles(qp.add(16 * i)), (scale(2 * i), scale(2 * i)), scale(2 * i + 1), op.add(32 * i))),
            BlockEncoding::Q5_0 => (0..runs).for_each(|i| store_run(q5_run(qp.add(20 * i)), (scale(i), scale(i)), -16.0 * scale(i), op.add(32 * i))),
            BlockEncoding::Q8_0 => (0..runs).for_each(|i| store_run(q8_run(qp.add(32 * i)), (scale(i), scale(i)), 0.0, op.add(32 * i))),
            BlockEncoding::Q4_K => {
                for b in 0..runs / 8 {
                    let (d, dmin) = (scale(2 * b), scale(2 * b + 1));
                    let qb = qp.add(144 * b);
                    for j in 0..8 {
                        let sc = d * f32::from(*qb.add(j));
                        store_run(nibbles(qb.add(16 + 16 * j)), (sc, sc), -dmin * f32::from(*qb.add(8 + j)), op.add(256 * b + 32 * j));
                    }
                }
            }
            BlockEncoding::Q6_K => {
                for b in 0..runs / 8 {
                    let d = scale(b);
                    let qb = qp.add(208 * b);
                    for j in 0..8 {
                        let scales = (d * f32::from(*qb.add(2 * j) as i8), d * f32::from(*qb.add(2 * j + 1) as i8));
                        store_run(q6_run(qb, j), scales, 0.0, op.add(256 * b + 32 * j));
                    }
                }
            }
        }
    }
}
