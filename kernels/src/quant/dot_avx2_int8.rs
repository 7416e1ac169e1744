//! AVX2 integer kernels for Q4_K and Q6_K rows, for CPUs without AVX-512: the input vector is
//! rounded to 8-bit integers once per product with one scale per 256 values (llama.cpp's Q8_K),
//! each pair of runs meets it in byte products (`vpmaddubsw`: 32 a instruction, summed in
//! pairs), the runs' integer scales are applied by `vpmaddwd`, and a super-block is converted
//! to f32 once. Widening every weight to f32 instead took about four times the instructions,
//! and decoding steps on an AVX2-only box ran at a sixth of llama.cpp's speed.
//!
//! The input is stored per 64 values in the order the nibbles of two neighbouring runs A and B
//! come out of one 256-bit load: [A 0..16, B 0..16, A 16..32, B 16..32] (the VNNI kernels' order).
//!
//! Q5_0 and Q8_0 rows (runs of 32) meet the input rounded per run instead, in its own order, as
//! llama.cpp's Q8_0 (`RunInput`): one conversion per run, since each run has its own scale.
//! Q4_0 and Q4_1 rows keep the float kernels: rounding the input for SmolLM2's Q4_1 rows put
//! its logits 0.53 (root mean square) from an exact f32 pass, against 0.06 with them in floats.

use std::arch::x86_64::*;

use super::{BlockEncoding, ahead, pair_order};

/// Values per input scale: a K-quant super-block.
pub const GROUP: usize = 256;

/// The input vector rounded to 8-bit integers, one scale per 256 values.
pub struct Q8kInput {
    /// The integers, each pair of runs in the kernels' order (see the module's doc).
    q: Vec<i8>,
    /// Per 256 values: the scale (x ≈ scale · q).
    scale: Vec<f32>,
    /// Per run of 32: scale · Σ q.
    run_sum: Vec<f32>,
    /// Per 16 values: scale · Σ q (Q6_K's scales cover 16 weights).
    half_sum: Vec<f32>,
}

impl Q8kInput {
    /// Rounds `x` (a multiple of 256 long) to integers, per 256 values; ties to even, as the
    /// vector conversion rounds.
    pub fn new(x: &[f32]) -> Q8kInput {
        // SAFETY: these inputs are only built on the AVX2 path, where AVX2 and FMA were detected.
        unsafe { Self::build(x) }
    }

    /// [`Q8kInput::new`] compiled for AVX2, where the rounding is one instruction for eight
    /// values (baseline x86-64 calls the C library's `rintf` for each: a tenth of a long
    /// prompt's pass went there).
    #[target_feature(enable = "avx2,fma")]
    fn build(x: &[f32]) -> Q8kInput {
        let mut input =
            Q8kInput { q: vec![0; x.len()], scale: vec![0.0; x.len() / GROUP], run_sum: vec![0.0; x.len() / 32], half_sum: vec![0.0; x.len() / 16] };
        for (b, values) in x.chunks_exact(GROUP).enumerate() {
            let (q, half_sum) = (&mut input.q[GROUP * b..GROUP * (b + 1)], &mut input.half_sum[GROUP * b / 16..GROUP * (b + 1) / 16]);
            // SAFETY: AVX2 and FMA were detected (see `new`); values and q are GROUP long,
            // half_sum GROUP / 16.
            input.scale[b] = unsafe { round_group_paired(values, q, half_sum) };
        }
        for (r, s) in input.run_sum.iter_mut().enumerate() {
            *s = input.half_sum[2 * r] + input.half_sum[2 * r + 1];
        }
        input
    }

    /// The values as the kernels see them (scale · q, in the vector's own order), for tests.
    pub fn dequantized(&self) -> Vec<f32> {
        (0..self.q.len()).map(|i| self.scale[i / GROUP] * f32::from(self.q[pair_order(i)])).collect()
    }
}

/// The input vector rounded to 8-bit integers, one scale per run of 32, in its own order.
pub struct RunInput {
    q: Vec<i8>,
    /// Per run: the scale (x ≈ scale · q).
    scale: Vec<f32>,
    /// Per run: scale · Σ q.
    run_sum: Vec<f32>,
}

/// A group of 256 `values` rounded as [`round_group`] rounds them (a NaN to 0), eight at a
/// time, stored 16 at a time in the kernels' pair order into `q`, with each 16 values'
/// scale · Σ q in `half_sum`; returns the scale. Rounding value by value and storing each byte
/// at its place took about 3 % of a long prompt's pass.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn round_group_paired(values: &[f32], q: &mut [i8], half_sum: &mut [f32]) -> f32 {
    debug_assert!(values.len() == GROUP && q.len() == GROUP && half_sum.len() == GROUP / 16);
    unsafe {
        let p = values.as_ptr();
        let sign = _mm256_set1_ps(-0.0);
        let mut m = _mm256_setzero_ps();
        for i in (0..GROUP).step_by(8) {
            // A NaN lane keeps the maximum so far (`max_ps` returns its second operand).
            m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(p.add(i))), m);
        }
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let d = _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1))) / 127.0;
        let inv = _mm256_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
        let (low, high) = (_mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
        let round = |at: usize| {
            let v = _mm256_mul_ps(_mm256_loadu_ps(p.add(at)), inv);
            // NaN (a NaN input, or an infinite one times 0) becomes 0, as `as i8` makes it.
            let v = _mm256_and_ps(v, _mm256_cmp_ps::<_CMP_ORD_Q>(v, v));
            // Ties to even: the conversion's rounding mode (MXCSR's default).
            _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, low), high))
        };
        for c in 0..GROUP / 16 {
            let (a, b) = (round(16 * c), round(16 * c + 8));
            // 16 values as 16 bytes in order: packing works within 128-bit lanes, so the
            // middle quarters are swapped back before the last step.
            let words = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(a, b));
            let bytes = _mm_packs_epi16(_mm256_castsi256_si128(words), _mm256_extracti128_si256::<1>(words));
            // Chunk c is A 0..16, A 16..32, B 0..16 or B 16..32 of its pair (c % 4), which
            // the kernels' order puts at 0, 32, 16 and 48.
            let at = 64 * (c / 4) + [0, 32, 16, 48][c % 4];
            _mm_storeu_si128(q.as_mut_ptr().add(at) as *mut __m128i, bytes);
            let s = _mm256_add_epi32(a, b);
            let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
            half_sum[c] = d * _mm_cvtsi128_si32(s) as f32;
        }
        d
    }
}

/// `values` rounded to integers of at most 127 in magnitude with one scale, ties to even, into
/// `q`; returns the scale.
#[inline(always)]
fn round_group(values: &[f32], q: &mut [i8]) -> f32 {
    let d = values.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
    let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
    for (q, v) in q.iter_mut().zip(values) {
        // A NaN input becomes 0 (`as` saturates); |q| ≤ 127 keeps byte products in range.
        *q = (v * inv).round_ties_even().clamp(-127.0, 127.0) as i8;
    }
    d
}

impl RunInput {
    /// Rounds `x` (a multiple of 32 long) to integers, per run of 32.
    pub fn new(x: &[f32]) -> RunInput {
        // SAFETY: as for Q8kInput::new.
        unsafe { Self::build(x) }
    }

    /// [`RunInput::new`] compiled for AVX2 (see [`Q8kInput::build`]).
    #[target_feature(enable = "avx2,fma")]
    fn build(x: &[f32]) -> RunInput {
        let mut q = vec![0i8; x.len()];
        let (mut scale, mut run_sum) = (Vec::with_capacity(x.len() / 32), Vec::with_capacity(x.len() / 32));
        for (values, q) in x.chunks_exact(32).zip(q.chunks_exact_mut(32)) {
            let d = round_group(values, q);
            scale.push(d);
            run_sum.push(d * q.iter().map(|&v| f32::from(v)).sum::<f32>());
        }
        RunInput { q, scale, run_sum }
    }

    /// The values as the kernels see them, for tests.
    pub fn dequantized(&self) -> Vec<f32> {
        self.q.iter().enumerate().map(|(i, &q)| self.scale[i / 32] * f32::from(q)).collect()
    }
}

/// Whether these kernels take rows in `encoding` against an input rounded per 256 values.
pub fn takes(encoding: BlockEncoding) -> bool {
    matches!(encoding, BlockEncoding::Q4_K | BlockEncoding::Q6_K)
}

/// Whether these kernels take rows in `encoding` against an input rounded per run of 32.
pub fn takes_runs(encoding: BlockEncoding) -> bool {
    matches!(encoding, BlockEncoding::Q5_0 | BlockEncoding::Q8_0)
}

#[inline]
#[target_feature(enable = "avx2,fma")]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}

/// Eight bytes at `p` (unsigned, or signed when `signed`) as eight f32.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn bytes8(p: *const u8, signed: bool) -> __m256 {
    unsafe {
        let v = _mm_loadl_epi64(p as *const __m128i);
        _mm256_cvtepi32_ps(if signed { _mm256_cvtepi8_epi32(v) } else { _mm256_cvtepu8_epi32(v) })
    }
}

/// A byte shuffle that fills the low 128 bits with 16-bit lane `a` of each half and the high
/// 128 bits with lane `b`.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn spread(a: i16, b: i16) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(((2 * b + 1) << 8) | (2 * b)), _mm_set1_epi16(((2 * a + 1) << 8) | (2 * a)))
}

/// Σ w·x for consecutive rows (`scales`, `quants` in the repacked layout, an encoding `takes`
/// accepts) against each of the `N` inputs: `out[r · N + i]` is row r times input i. Several
/// inputs at once (a prompt pass's rows) decode each weight once for all of them.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_rows<const N: usize>(encoding: BlockEncoding, scales: &[f32], quants: &[u8], xs: [&Q8kInput; N], out: &mut [f32]) {
    let blocks = xs[0].scale.len();
    let (ns, qb) = (blocks * encoding.scales_per_block(), blocks * encoding.packed_bytes());
    for (r, o) in out.chunks_exact_mut(N).enumerate() {
        // SAFETY: the caller passes `out.len() / N` whole rows of scales and quants, and
        // inputs of the rows' width.
        let dots = unsafe {
            let (s, q) = (scales.get_unchecked(r * ns..(r + 1) * ns), quants.get_unchecked(r * qb..(r + 1) * qb));
            match encoding {
                BlockEncoding::Q4_K => q4k(s, q, xs),
                _ => q6k(s, q, xs),
            }
        };
        o.copy_from_slice(&dots);
    }
}

/// One Q4_K row against each input: w = d·sc·q − dmin·m per run, q in 0..16.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q4k<const N: usize>(s: &[f32], q: &[u8], xs: [&Q8kInput; N]) -> [f32; N] {
    unsafe {
        let mask = _mm256_set1_epi8(0x0f);
        // Pair k's scales, runs 2k and 2k + 1, out of the eight widened to 16 bits.
        let picks: [__m256i; 4] = std::array::from_fn(|k| spread(2 * k as i16, 2 * k as i16 + 1));
        let (mut acc, mut mins) = ([_mm256_setzero_ps(); N], [_mm256_setzero_ps(); N]);
        for b in 0..xs[0].scale.len() {
            let qb = q.as_ptr().add(144 * b);
            ahead(qb, 144);
            let scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64(qb as *const __m128i)));
            let mut sum = [_mm256_setzero_si256(); N];
            for (k, pick) in picks.iter().enumerate() {
                // Runs 2k and 2k + 1: their 32 nibble bytes side by side.
                let v = _mm256_loadu_si256(qb.add(16 + 32 * k) as *const __m256i);
                let lo = _mm256_and_si256(v, mask);
                let hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), mask);
                let sc = _mm256_shuffle_epi8(scales, *pick);
                for (x, sum) in xs.iter().zip(&mut sum) {
                    let xb = x.q.as_ptr().add(GROUP * b + 64 * k);
                    let xl = _mm256_loadu_si256(xb as *const __m256i);
                    let xh = _mm256_loadu_si256(xb.add(32) as *const __m256i);
                    // At most 2 · 2 · 15 · 127 per 16-bit lane: no saturation.
                    let p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xl), _mm256_maddubs_epi16(hi, xh));
                    *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(p, sc));
                }
            }
            let m8 = _mm256_mul_ps(_mm256_set1_ps(*s.get_unchecked(2 * b + 1)), bytes8(qb.add(8), false));
            for i in 0..N {
                let x = xs[i];
                let d = *s.get_unchecked(2 * b) * *x.scale.get_unchecked(b);
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sum[i]), acc[i]);
                mins[i] = _mm256_fmadd_ps(m8, _mm256_loadu_ps(x.run_sum.as_ptr().add(8 * b)), mins[i]);
            }
        }
        std::array::from_fn(|i| hsum(acc[i]) - hsum(mins[i]))
    }
}

/// One Q6_K row against each input: w = d·sc·(q − 32) per 16 weights, q in 0..64.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q6k<const N: usize>(s: &[f32], q: &[u8], xs: [&Q8kInput; N]) -> [f32; N] {
    unsafe {
        let mask = _mm256_set1_epi8(0x0f);
        let three = _mm256_set1_epi8(3);
        // A pair's top-bit qwords [A, A, B, B] shifted so that each byte's low two bits are
        // those of the weights in the same place of the low (or high) nibbles.
        let (shift_lo, shift_hi) = (_mm256_set_epi64x(2, 0, 2, 0), _mm256_set_epi64x(6, 4, 6, 4));
        // Scales per 16 weights, for pair k: A 0..16 is 4k, B 0..16 is 4k + 2, A 16..32 is
        // 4k + 1, B 16..32 is 4k + 3. The sixteen widened to 16 bits, seen as eight 32-bit
        // lanes (4k, 4k + 1) and (4k + 2, 4k + 3) put in the low and high halves, then the first
        // or the second of each 32-bit lane spread over its half.
        let halves: [__m256i; 4] = std::array::from_fn(|k| {
            let e = 2 * k as i32;
            _mm256_set_epi32(e + 1, e + 1, e + 1, e + 1, e, e, e, e)
        });
        let (first, second) = (spread(0, 0), spread(1, 1));
        let (mut acc, mut sixteens) = ([_mm256_setzero_ps(); N], [_mm256_setzero_ps(); N]);
        for b in 0..xs[0].scale.len() {
            let qb = q.as_ptr().add(208 * b);
            ahead(qb, 208);
            let scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(qb as *const __m128i));
            let mut sum = [_mm256_setzero_si256(); N];
            for (k, half) in halves.iter().enumerate() {
                // The pair's 32 nibble bytes, then its 16 top-bit bytes (A's 8, B's 8).
                let pair = qb.add(16 + 48 * k);
                let v = _mm256_loadu_si256(pair as *const __m256i);
                let t = _mm_loadu_si128(pair.add(32) as *const __m128i);
                let top = _mm256_set_m128i(_mm_unpackhi_epi64(t, t), _mm_unpacklo_epi64(t, t));
                let top_lo = _mm256_and_si256(_mm256_srlv_epi64(top, shift_lo), three);
                let top_hi = _mm256_and_si256(_mm256_srlv_epi64(top, shift_hi), three);
                let lo = _mm256_or_si256(_mm256_and_si256(v, mask), _mm256_slli_epi16(top_lo, 4));
                let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), mask), _mm256_slli_epi16(top_hi, 4));
                let pair_scales = _mm256_permutevar8x32_epi32(scales, *half);
                let (sc_lo, sc_hi) = (_mm256_shuffle_epi8(pair_scales, first), _mm256_shuffle_epi8(pair_scales, second));
                for (x, sum) in xs.iter().zip(&mut sum) {
                    let xb = x.q.as_ptr().add(GROUP * b + 64 * k);
                    let xl = _mm256_loadu_si256(xb as *const __m256i);
                    let xh = _mm256_loadu_si256(xb.add(32) as *const __m256i);
                    // At most 2 · 63 · 127 per 16-bit lane.
                    let pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, xl), sc_lo);
                    let ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xh), sc_hi);
                    *sum = _mm256_add_epi32(*sum, _mm256_add_epi32(pl, ph));
                }
            }
            let d = *s.get_unchecked(b);
            let (sd_a, sd_b) = (_mm256_mul_ps(_mm256_set1_ps(d), bytes8(qb, true)), _mm256_mul_ps(_mm256_set1_ps(d), bytes8(qb.add(8), true)));
            for i in 0..N {
                let x = xs[i];
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * *x.scale.get_unchecked(b)), _mm256_cvtepi32_ps(sum[i]), acc[i]);
                // What the quants' offset of 32 takes away: d · Σ sc_g · (scale · Σ q over group g).
                let hs = x.half_sum.as_ptr().add(16 * b);
                sixteens[i] = _mm256_fmadd_ps(sd_a, _mm256_loadu_ps(hs), sixteens[i]);
                sixteens[i] = _mm256_fmadd_ps(sd_b, _mm256_loadu_ps(hs.add(8)), sixteens[i]);
            }
        }
        std::array::from_fn(|i| hsum(acc[i]) - 32.0 * hsum(sixteens[i]))
    }
}

/// A run's 16 nibble bytes as its 32 quants in order (low nibbles, then high).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn nibble_run(p: *const u8) -> __m256i {
    unsafe {
        let v = _mm_loadu_si128(p as *const __m128i);
        let mask = _mm_set1_epi8(0x0f);
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), mask), _mm_and_si128(v, mask))
    }
}

/// Σ over a run of quant · input integer, in eight lanes of 32 bits.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn run_products(quants: __m256i, x: __m256i) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(quants, x), _mm256_set1_epi16(1)))
}

/// Σ w·x for consecutive rows in an encoding `takes_runs` accepts (the repacked layout) against
/// each of the `N` inputs: `out[r · N + i]` is row r times input i.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_run_rows<const N: usize>(encoding: BlockEncoding, scales: &[f32], quants: &[u8], xs: [&RunInput; N], out: &mut [f32]) {
    let runs = xs[0].scale.len();
    let (ns, qb) = (runs * encoding.scales_per_block(), runs * encoding.packed_bytes());
    // Byte j of a Q5_0 run takes bit j of its 32 fifth bits: byte j / 8 of them, bit j % 8.
    let spread_bits = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    for (r, o) in out.chunks_exact_mut(N).enumerate() {
        // SAFETY: the caller passes `out.len() / N` whole rows, and inputs of their width.
        unsafe {
            let (s, q) = (scales.get_unchecked(r * ns..(r + 1) * ns).as_ptr(), quants.get_unchecked(r * qb..(r + 1) * qb).as_ptr());
            let mut acc = [_mm256_setzero_ps(); N];
            let mut offset = [0.0f32; N];
            for j in 0..runs {
                // The run's quants as unsigned bytes, and what to take from (or add to) Σ w·x
                // per unit of the input run's sum.
                let (quants, d, per_sum) = match encoding {
                    BlockEncoding::Q5_0 => {
                        let p = q.add(20 * j);
                        let bits = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((p as *const i32).read_unaligned()), spread_bits), bit);
                        let fifth = _mm256_and_si256(_mm256_cmpeq_epi8(bits, bit), _mm256_set1_epi8(0x10));
                        (_mm256_or_si256(nibble_run(p.add(4)), fifth), *s.add(j), -16.0 * *s.add(j))
                    }
                    // Signed quants: their magnitudes against the input with their signs.
                    _ => (_mm256_loadu_si256(q.add(32 * j) as *const __m256i), *s.add(j), 0.0),
                };
                for (i, x) in xs.iter().enumerate() {
                    let xv = _mm256_loadu_si256(x.q.as_ptr().add(32 * j) as *const __m256i);
                    let products = if encoding == BlockEncoding::Q8_0 {
                        run_products(_mm256_sign_epi8(quants, quants), _mm256_sign_epi8(xv, quants))
                    } else {
                        run_products(quants, xv)
                    };
                    acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(d * *x.scale.get_unchecked(j)), products, acc[i]);
                    offset[i] += per_sum * *x.run_sum.get_unchecked(j);
                }
            }
            for i in 0..N {
                o[i] = hsum(acc[i]) + offset[i];
            }
        }
    }
}
