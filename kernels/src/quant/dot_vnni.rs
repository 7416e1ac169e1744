//! AVX-512 VNNI block kernels for decoding steps: the input vector is rounded to 8-bit integers
//! once per product (one scale per run of 32, as llama.cpp's Q8 blocks), and each row's quants
//! meet it in integer dot products (`vpdpbusd`: 64 byte products per instruction), a quarter of
//! the instructions of widening every weight to f32.
//!
//! Two runs A and B (64 weights) fill one register. The packed layouts keep, per run, weight i
//! in the low nibble of byte i and weight i + 16 in the high one, so a pair's nibbles come out
//! as [A 0..16, B 0..16, A 16..32, B 16..32]; the input is stored in that order too, and
//! lanes 0–3 and 8–11 of the products belong to A, lanes 4–7 and 12–15 to B.

use std::arch::x86_64::*;

use super::{BlockEncoding, ahead, pair_order};

/// The input vector rounded to 8-bit integers for the VNNI kernels.
pub struct QuantizedInput {
    /// The integers, each pair of runs in the kernels' order (see the module's doc).
    q: Vec<i8>,
    /// Per run of 32: the scale (x ≈ scale · q).
    scale: Vec<f32>,
    /// Per run of 32: scale · Σ q (the run's sum as the kernels see it).
    run_sum: Vec<f32>,
    /// Per 16 values: the run's scale · Σ q over them (Q6_K's scales cover 16 weights).
    half_sum: Vec<f32>,
}

impl QuantizedInput {
    /// Rounds `x` (a multiple of 64 long) to integers, per run of 32.
    pub fn new(x: &[f32]) -> QuantizedInput {
        let runs = x.len() / 32;
        let mut input = QuantizedInput { q: vec![0i8; x.len()], scale: vec![0.0; runs], run_sum: vec![0.0; runs], half_sum: vec![0.0; 2 * runs] };
        // SAFETY: QuantizedInput is only built where AVX-512 F/BW/VNNI were detected (the VNNI
        // path); x and the buffers are whole runs.
        unsafe { input.fill(x) };
        input
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn fill(&mut self, x: &[f32]) {
        unsafe {
            let sign_off = _mm512_set1_ps(-0.0);
            for r in 0..x.len() / 32 {
                let a = _mm512_loadu_ps(x.as_ptr().add(32 * r));
                let b = _mm512_loadu_ps(x.as_ptr().add(32 * r + 16));
                let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign_off, a), _mm512_andnot_ps(sign_off, b)));
                let d = amax / 127.0;
                let inv = _mm512_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
                // Rounded to nearest, ties to even (the default rounding mode); |v| ≤ 127.
                let qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, inv));
                let qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, inv));
                let (sa, sb) = (_mm512_reduce_add_epi32(qa), _mm512_reduce_add_epi32(qb));
                // Run r is half `r % 2` of its pair: its first 16 values at 16·(r % 2), its last 16 at 32 + 16·(r % 2).
                let base = self.q.as_mut_ptr().add(64 * (r / 2) + 16 * (r % 2));
                _mm_storeu_si128(base as *mut __m128i, _mm512_cvtsepi32_epi8(qa));
                _mm_storeu_si128(base.add(32) as *mut __m128i, _mm512_cvtsepi32_epi8(qb));
                self.scale[r] = d;
                self.run_sum[r] = d * (sa + sb) as f32;
                self.half_sum[2 * r] = d * sa as f32;
                self.half_sum[2 * r + 1] = d * sb as f32;
            }
        }
    }

    /// The values as the kernels see them (scale · q, in the vector's own order), for tests.
    pub fn dequantized(&self) -> Vec<f32> {
        (0..self.q.len()).map(|i| self.scale[i / 32] * f32::from(self.q[pair_order(i)])).collect()
    }
}

/// Lanes [a ×4, b ×4, a ×4, b ×4]: one scale per run of the pair.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn pair_scale(a: f32, b: f32) -> __m512 {
    _mm512_mask_blend_ps(0xF0F0, _mm512_set1_ps(a), _mm512_set1_ps(b))
}

/// Two runs' nibble bytes (16 each, at `a` and `b`) as 64 quants in the kernels' order.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn nibble_pair(a: *const u8, b: *const u8) -> __m512i {
    unsafe { nibbles32(_mm256_set_m128i(_mm_loadu_si128(b as *const __m128i), _mm_loadu_si128(a as *const __m128i))) }
}

/// Lanes [a ×4, b ×4, a ×4, b ×4] of a vector: the lanes of a pair of runs a and b.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn pick_pair(a: i32, b: i32) -> __m512i {
    _mm512_set_epi32(b, b, b, b, a, a, a, a, b, b, b, b, a, a, a, a)
}

/// Eight bytes at `p` as eight f32.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn bytes8(p: *const u8) -> __m256 {
    unsafe { _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i))) }
}

#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn hsum8(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}

/// Two neighbouring runs' nibble bytes (32 in one register) as 64 quants in the kernels' order.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn nibbles32(v: __m256i) -> __m512i {
    let mask = _mm256_set1_epi8(0x0f);
    let lo = _mm256_and_si256(v, mask);
    let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
    _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1)
}

/// Σ over 64 weights of quant · input integer, per lane.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn products(quants: __m512i, x: *const i8) -> __m512 {
    unsafe { _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), quants, _mm512_loadu_si512(x as *const __m512i))) }
}

/// Σ w·x for consecutive rows (`scales`, `quants` in the repacked layout) against `x`, one
/// per value of `out`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub unsafe fn dot_rows(encoding: BlockEncoding, scales: &[f32], quants: &[u8], x: &QuantizedInput, out: &mut [f32]) {
    let blocks = x.q.len() / encoding.block_weights();
    let (ns, qb) = (blocks * encoding.scales_per_block(), blocks * encoding.packed_bytes());
    for (r, o) in out.iter_mut().enumerate() {
        // SAFETY: the caller passes `out.len()` whole rows of scales and quants.
        *o = unsafe { dot_blocks(encoding, scales.get_unchecked(r * ns..(r + 1) * ns), quants.get_unchecked(r * qb..(r + 1) * qb), x) };
    }
}

/// Σ w·x for one row (`scales`, `quants` in the repacked layout) against `x`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn dot_blocks(encoding: BlockEncoding, s: &[f32], q: &[u8], x: &QuantizedInput) -> f32 {
    unsafe {
        let pairs = x.q.len() / 64;
        let (qp, xp) = (q.as_ptr(), x.q.as_ptr());
        let xs = |r: usize| *x.scale.get_unchecked(r);
        let scale = |i: usize| *s.get_unchecked(i);
        let mut acc = _mm512_setzero_ps();
        // What the offsets of the quants (unsigned here) and the minimums take away.
        let mut offset = 0.0f32;
        match encoding {
            BlockEncoding::Q4_K => {
                // Per super-block: the eight runs' scales d·sc·dx at once, then each pair's
                // lanes picked out of them.
                let picks: [__m512i; 4] = std::array::from_fn(|k| pick_pair(2 * k as i32, 2 * k as i32 + 1));
                let mut mins = _mm256_setzero_ps();
                for b in 0..pairs / 4 {
                    let qb = qp.add(144 * b);
                    ahead(qb, 144);
                    let xs8 = _mm256_loadu_ps(x.scale.as_ptr().add(8 * b));
                    let sc8 = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(scale(2 * b)), bytes8(qb)), xs8);
                    let sc16 = _mm512_castps256_ps512(sc8);
                    for (k, pick) in picks.iter().enumerate() {
                        let v = _mm256_loadu_si256(qb.add(16 + 32 * k) as *const __m256i);
                        let quants = nibbles32(v);
                        acc = _mm512_fmadd_ps(products(quants, xp.add(64 * (4 * b + k))), _mm512_permutexvar_ps(*pick, sc16), acc);
                    }
                    let m8 = _mm256_mul_ps(_mm256_set1_ps(scale(2 * b + 1)), bytes8(qb.add(8)));
                    mins = _mm256_fmadd_ps(m8, _mm256_loadu_ps(x.run_sum.as_ptr().add(8 * b)), mins);
                }
                offset -= hsum8(mins);
            }
            BlockEncoding::Q6_K => {
                // Top bits of a pair: qwords [A, A, B, B, A, A, B, B] shifted by these.
                let shifts = _mm512_set_epi64(6, 4, 6, 4, 2, 0, 2, 0);
                let dup = _mm512_set_epi64(1, 1, 0, 0, 1, 1, 0, 0);
                let three = _mm512_set1_epi8(3);
                // Scale g (of 16 per super-block) covers run g / 2: its dx is lane g / 2 of eight.
                let spread = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
                // A pair's lane groups are A 0..16, B 0..16, A 16..32, B 16..32: scales
                // 4k, 4k + 2, 4k + 1 and 4k + 3.
                let picks: [__m512i; 4] = std::array::from_fn(|k| {
                    let g = 4 * k as i32;
                    _mm512_set_epi32(g + 3, g + 3, g + 3, g + 3, g + 1, g + 1, g + 1, g + 1, g + 2, g + 2, g + 2, g + 2, g, g, g, g)
                });
                let mut sixteens = _mm512_setzero_ps();
                for b in 0..pairs / 4 {
                    let qb = qp.add(208 * b);
                    ahead(qb, 208);
                    let sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(qb as *const __m128i)));
                    let xs16 = _mm512_permutexvar_ps(spread, _mm512_castps256_ps512(_mm256_loadu_ps(x.scale.as_ptr().add(8 * b))));
                    let sd = _mm512_mul_ps(_mm512_set1_ps(scale(b)), sc);
                    let sdx = _mm512_mul_ps(sd, xs16);
                    for (k, pick) in picks.iter().enumerate() {
                        // The pair's 32 nibble bytes, then its 16 top-bit bytes (A's 8, B's 8).
                        let pair = qb.add(16 + 48 * k);
                        let top = _mm512_permutexvar_epi64(dup, _mm512_castsi128_si512(_mm_loadu_si128(pair.add(32) as *const __m128i)));
                        let top = _mm512_and_si512(_mm512_srlv_epi64(top, shifts), three);
                        let nibbles = nibbles32(_mm256_loadu_si256(pair as *const __m256i));
                        let quants = _mm512_or_si512(nibbles, _mm512_slli_epi16(top, 4));
                        acc = _mm512_fmadd_ps(products(quants, xp.add(64 * (4 * b + k))), _mm512_permutexvar_ps(*pick, sdx), acc);
                    }
                    sixteens = _mm512_fmadd_ps(sd, _mm512_loadu_ps(x.half_sum.as_ptr().add(16 * b)), sixteens);
                }
                offset -= 32.0 * _mm512_reduce_add_ps(sixteens);
            }
            BlockEncoding::Q5_0 => {
                for p in 0..pairs {
                    let (ra, rb) = (2 * p, 2 * p + 1);
                    let (a, b) = (qp.add(20 * ra), qp.add(20 * rb));
                    let (ha, hb) = (u64::from((a as *const u32).read_unaligned()), u64::from((b as *const u32).read_unaligned()));
                    // Fifth bits in the kernels' order: A 0..16, B 0..16, A 16..32, B 16..32.
                    let bits = (ha & 0xffff) | (hb & 0xffff) << 16 | (ha >> 16) << 32 | (hb >> 16) << 48;
                    let quants = _mm512_or_si512(nibble_pair(a.add(4), b.add(4)), _mm512_maskz_mov_epi8(bits, _mm512_set1_epi8(0x10)));
                    let (da, db) = (scale(ra), scale(rb));
                    acc = _mm512_fmadd_ps(products(quants, xp.add(64 * p)), pair_scale(da * xs(ra), db * xs(rb)), acc);
                    offset -= 16.0 * (da * *x.run_sum.get_unchecked(ra) + db * *x.run_sum.get_unchecked(rb));
                }
            }
            BlockEncoding::Q8_0 => {
                // Signed quants made unsigned (+128) and put in the kernels' order: qwords of A
                // 0..16, B 0..16, A 16..32, B 16..32.
                let order = _mm512_set_epi64(7, 6, 3, 2, 5, 4, 1, 0);
                let flip = _mm512_set1_epi8(-128);
                for p in 0..pairs {
                    let (ra, rb) = (2 * p, 2 * p + 1);
                    let raw = _mm512_loadu_si512(qp.add(64 * p) as *const __m512i);
                    let quants = _mm512_xor_si512(_mm512_permutexvar_epi64(order, raw), flip);
                    let (da, db) = (scale(ra), scale(rb));
                    acc = _mm512_fmadd_ps(products(quants, xp.add(64 * p)), pair_scale(da * xs(ra), db * xs(rb)), acc);
                    offset -= 128.0 * (da * *x.run_sum.get_unchecked(ra) + db * *x.run_sum.get_unchecked(rb));
                }
            }
            BlockEncoding::Q4_0 | BlockEncoding::Q4_1 => {
                let with_min = encoding == BlockEncoding::Q4_1;
                let (ns, step) = if with_min { (2, 1) } else { (1, 0) };
                for p in 0..pairs {
                    let (ra, rb) = (2 * p, 2 * p + 1);
                    let quants = nibble_pair(qp.add(16 * ra), qp.add(16 * rb));
                    let (da, db) = (scale(ns * ra), scale(ns * rb));
                    acc = _mm512_fmadd_ps(products(quants, xp.add(64 * p)), pair_scale(da * xs(ra), db * xs(rb)), acc);
                    let (sa, sb) = (*x.run_sum.get_unchecked(ra), *x.run_sum.get_unchecked(rb));
                    offset += if with_min { scale(ns * ra + step) * sa + scale(ns * rb + step) * sb } else { -8.0 * (da * sa + db * sb) };
                }
            }
        }
        _mm512_reduce_add_ps(acc) + offset
    }
}
