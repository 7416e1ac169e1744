//! A linear layer in 8-bit integers for the encoder on the CPU: weights rounded once per output
//! (symmetric, one scale each), inputs rounded per row at each product, and the products summed
//! exactly in 32-bit integers by AVX-512 VNNI (`vpdpbusd`: 64 byte products an instruction, four
//! times the multiply-adds of an f32 FMA). What the rounding costs in accuracy is the caller's
//! to measure; the integer sums here are exact, so the kernel equals its plain reference.
//!
//! `vpdpbusd` multiplies unsigned bytes by signed ones, so each rounded input q (|q| ≤ 127) is
//! stored as q + 128, and 128 · Σₖ w is taken off the sum afterwards (kept per output).

use rayon::prelude::*;

/// Outputs per packed panel: four 512-bit registers of 16 sums.
const PANEL: usize = 64;
/// Rows per micro-tile: 6 rows × 4 registers of sums, 4 of weights and one of input fit the 32
/// registers.
const TILE_ROWS: usize = 6;
/// Rows per thread task (whole tiles), so that a panel of weights is reused across them.
const TASK_ROWS: usize = 8 * TILE_ROWS;

/// A weight matrix (`out` rows of `inp` values, as PyTorch stores it) rounded to 8-bit integers
/// and packed for the integer product: per panel of 64 outputs, per group of 4 inputs, the 4
/// weights of each output side by side.
pub struct Int8Weight {
    inp: usize,
    out: usize,
    /// Groups of 4 inputs (`inp` rounded up).
    groups: usize,
    /// `[panel][group][output in panel][4]`, zero where `inp` or `out` was padded.
    packed: Vec<i8>,
    /// Per output: w ≈ scale · q.
    scale: Vec<f32>,
    /// Per output: 128 · Σ q, what the inputs' offset adds to its sum.
    offset_sum: Vec<i32>,
}

impl Int8Weight {
    /// Rounds `values` (`out` × `inp`, row-major) to integers, one scale per output row.
    pub fn new(values: &[f32], inp: usize, out: usize) -> Int8Weight {
        assert_eq!(values.len(), inp * out, "weight is out × inp");
        let groups = inp.div_ceil(4);
        let panels = out.div_ceil(PANEL);
        let mut packed = vec![0i8; panels * groups * PANEL * 4];
        let mut scale = vec![0.0f32; out];
        let mut offset_sum = vec![0i32; out];
        for o in 0..out {
            let row = &values[o * inp..(o + 1) * inp];
            let (q, s) = round_row(row);
            scale[o] = s;
            offset_sum[o] = 128 * q.iter().map(|&v| i32::from(v)).sum::<i32>();
            let (panel, lane) = (o / PANEL, o % PANEL);
            for (i, &v) in q.iter().enumerate() {
                packed[((panel * groups + i / 4) * PANEL + lane) * 4 + i % 4] = v;
            }
        }
        Int8Weight { inp, out, groups, packed, scale, offset_sum }
    }

    /// [`Int8Weight::new`] of the transpose of `values` (`inp` × `out`, row-major: column `o`
    /// holds output `o`'s weights), rounded identically without building the transpose. A 1x1
    /// convolution's input (channels × pixels) is packed this way, each pixel an output.
    pub fn from_columns(values: &[f32], inp: usize, out: usize) -> Int8Weight {
        Int8Weight::from_scaled_columns(values, inp, out, &vec![1.0; inp])
    }

    /// [`Int8Weight::from_columns`] of `values` with row `i` multiplied by `row_scale[i]`
    /// (each value's product rounded to f32 as a separate multiplication would be).
    pub fn from_scaled_columns(values: &[f32], inp: usize, out: usize, row_scale: &[f32]) -> Int8Weight {
        assert_eq!(values.len(), inp * out, "values are inp × out");
        assert_eq!(row_scale.len(), inp, "one scale per row");
        let groups = inp.div_ceil(4);
        let panels = out.div_ceil(PANEL);
        // Each output's largest magnitude, taken in bands of outputs so the cores share it.
        let mut amax = vec![0.0f32; out];
        let wide = wide_vectors();
        amax.par_chunks_mut(PANEL * 16).enumerate().for_each(|(band, m)| {
            #[cfg(target_arch = "x86_64")]
            if wide {
                // SAFETY: the features the function is compiled for were detected.
                return unsafe { column_maxima_avx512(values, out, row_scale, band * PANEL * 16, m) };
            }
            column_maxima(values, out, row_scale, band * PANEL * 16, m)
        });
        // The same arithmetic as `round_row`, so that both constructors give the same integers.
        let scale: Vec<f32> = amax.iter().map(|m| m / 127.0).collect();
        let inv: Vec<f32> = scale.iter().map(|&s| if s > 0.0 { 1.0 / s } else { 0.0 }).collect();
        let mut packed = vec![0i8; panels * groups * PANEL * 4];
        let mut offset_sum = vec![0i32; out];
        if groups == 0 {
            return Int8Weight { inp, out, groups, packed, scale, offset_sum };
        }
        packed.par_chunks_mut(groups * PANEL * 4).zip(offset_sum.par_chunks_mut(PANEL)).enumerate().for_each(|(panel, (chunk, sums))| {
            #[cfg(target_arch = "x86_64")]
            if wide {
                // SAFETY: as above.
                return unsafe { vnni::pack_panel(values, inp, out, row_scale, &inv, panel * PANEL, chunk, sums) };
            }
            pack_panel(values, inp, out, row_scale, &inv, panel * PANEL, chunk, sums)
        });
        Int8Weight { inp, out, groups, packed, scale, offset_sum }
    }

    /// The integer of output `o`, input `i`.
    fn q(&self, o: usize, i: usize) -> i8 {
        self.packed[(((o / PANEL) * self.groups + i / 4) * PANEL + o % PANEL) * 4 + i % 4]
    }
}

/// `row` rounded to nearest (ties to even) on a symmetric scale: v ≈ scale · q, |q| ≤ 127.
fn round_row(row: &[f32]) -> (Vec<i8>, f32) {
    let amax = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let scale = amax / 127.0;
    let inv = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    (row.iter().map(|v| (v * inv).round_ties_even().clamp(-127.0, 127.0) as i8).collect(), scale)
}

/// Whether the packing loops below can run compiled for AVX-512 (F and BW), where they
/// vectorise four times as wide as in the baseline build.
fn wide_vectors() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bw")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
fn column_maxima_avx512(values: &[f32], out: usize, row_scale: &[f32], first: usize, m: &mut [f32]) {
    column_maxima(values, out, row_scale, first, m);
}

/// `m[j]` = the largest |values[i][first + j] · row_scale[i]| over rows `i` (`values` has rows
/// of `out`).
#[inline(always)]
fn column_maxima(values: &[f32], out: usize, row_scale: &[f32], first: usize, m: &mut [f32]) {
    let width = m.len();
    for (row, &r) in values.chunks(out.max(1)).zip(row_scale) {
        for (m, v) in m.iter_mut().zip(&row[first..first + width]) {
            let a = (v * r).abs();
            *m = if a > *m { a } else { *m };
        }
    }
}

/// Packs outputs `first..` (one panel) of `values` (rows of `out`) scaled by `row_scale`, each
/// output rounded with its `inv` scale, into `chunk`, and their offset sums into `sums`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn pack_panel(values: &[f32], inp: usize, out: usize, row_scale: &[f32], inv: &[f32], first: usize, chunk: &mut [i8], sums: &mut [i32]) {
    let lanes = sums.len();
    let inv = &inv[first..first + lanes];
    for (g, dst) in chunk.chunks_exact_mut(PANEL * 4).enumerate() {
        // Each of the group's four inputs rounded for every output of the panel (contiguous,
        // so it vectorises), then interleaved: four inputs of each output side by side, as the
        // kernel reads them.
        let mut q = [[0i8; PANEL]; 4];
        for (j, q) in q.iter_mut().enumerate().take(4.min(inp - 4 * g)) {
            let i = 4 * g + j;
            let r = row_scale[i];
            let row = &values[i * out + first..i * out + first + lanes];
            for ((q, &v), &s) in q.iter_mut().zip(row).zip(inv) {
                *q = round_even((v * r) * s) as i8;
            }
        }
        for (l, (d, sum)) in dst.chunks_exact_mut(4).zip(sums.iter_mut()).enumerate() {
            let four = [q[0][l], q[1][l], q[2][l], q[3][l]];
            d.copy_from_slice(&four);
            *sum += 128 * four.iter().map(|&v| i32::from(v)).sum::<i32>();
        }
    }
}

/// `v` clamped to ±127 and rounded to the nearest integer, ties to even: what
/// `round_ties_even` gives, but by adding and taking off 1.5 · 2²³ (exact for |v| < 2²²), which
/// vectorises where the library call would not.
#[inline(always)]
fn round_even(v: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0;
    (v.clamp(-127.0, 127.0) + SHIFT) - SHIFT
}

/// Inputs rounded per row and offset to unsigned bytes, each row padded to whole groups of 4.
struct Int8Rows {
    bytes: Vec<u8>,
    scale: Vec<f32>,
    stride: usize,
}

impl Int8Rows {
    fn new(x: &[f32], rows: usize, inp: usize) -> Int8Rows {
        // At least one group, so that rows of no inputs still have a (zero) place.
        let stride = inp.div_ceil(4).max(1) * 4;
        let mut bytes = vec![128u8; rows * stride];
        let mut scale = vec![0.0f32; rows];
        #[cfg(target_arch = "x86_64")]
        let fast = int8_linear_available();
        bytes.par_chunks_mut(stride).zip(scale.par_iter_mut()).zip(x.par_chunks(inp.max(1))).for_each(|((dst, s), row)| {
            #[cfg(target_arch = "x86_64")]
            if fast {
                // SAFETY: AVX-512 F/BW were detected; `dst` holds at least `row.len()` bytes.
                *s = unsafe { vnni::round_row_offset(row, dst) };
                return;
            }
            let (q, rs) = round_row(row);
            *s = rs;
            for (d, v) in dst.iter_mut().zip(q) {
                *d = (i16::from(v) + 128) as u8;
            }
        });
        Int8Rows { bytes, scale, stride }
    }
}

/// Whether this CPU runs [`linear_int8`] with AVX-512 VNNI; elsewhere it runs the plain
/// reference loop, correct but many times slower than the f32 [`crate::linear`].
pub fn int8_linear_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bw") && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `out[rows × w.out] = round(x) · round(w)ᵀ + bias`, plus `out`'s previous contents when
/// `accumulate`: [`crate::linear`] with both operands rounded to 8-bit integers.
pub fn linear_int8(x: &[f32], rows: usize, w: &Int8Weight, bias: &[f32], out: &mut [f32], accumulate: bool) {
    assert_eq!(x.len(), rows * w.inp, "input is rows × inp");
    assert_eq!(bias.len(), w.out, "one bias per output");
    assert_eq!(out.len(), rows * w.out, "output is rows × out");
    if rows == 0 || w.out == 0 {
        return;
    }
    let a = Int8Rows::new(x, rows, w.inp);
    #[cfg(target_arch = "x86_64")]
    if int8_linear_available() {
        out.par_chunks_mut(TASK_ROWS * w.out).enumerate().for_each(|(task, chunk)| {
            // SAFETY: VNNI was detected; `chunk` is whole rows of `out` starting at row
            // task · TASK_ROWS, whose inputs are in `a`.
            unsafe { vnni::rows(&a, task * TASK_ROWS, w, bias, chunk, accumulate) }
        });
        return;
    }
    out.par_chunks_mut(w.out).enumerate().for_each(|(r, row)| {
        for (o, v) in row.iter_mut().enumerate() {
            let dot = (0..w.inp).map(|i| i32::from(a.bytes[r * a.stride + i]) * i32::from(w.q(o, i))).sum::<i32>() - w.offset_sum[o];
            let prior = if accumulate { *v } else { 0.0 };
            *v = dot as f32 * (a.scale[r] * w.scale[o]) + bias[o] + prior;
        }
    });
}

/// What [`linear_int8`] computes, in plain loops: each input row and weight row rounded as
/// [`Int8Weight`] does, the integer dot products, then scaled. The kernels' tests compare
/// against it.
pub fn linear_int8_reference(x: &[f32], rows: usize, w: &[f32], inp: usize, bias: &[f32], out: &mut [f32], accumulate: bool) {
    let outs = bias.len();
    let weights: Vec<(Vec<i8>, f32)> = (0..outs).map(|o| round_row(&w[o * inp..(o + 1) * inp])).collect();
    for r in 0..rows {
        let (xq, xs) = round_row(&x[r * inp..(r + 1) * inp]);
        for (o, (wq, ws)) in weights.iter().enumerate() {
            let dot: i32 = xq.iter().zip(wq).map(|(&a, &b)| i32::from(a) * i32::from(b)).sum();
            let prior = if accumulate { out[r * outs + o] } else { 0.0 };
            out[r * outs + o] = dot as f32 * (xs * ws) + bias[o] + prior;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    use super::{Int8Rows, Int8Weight, PANEL, TILE_ROWS};

    /// [`super::round_row`] of `row` with each integer offset by 128 into `dst`; returns the
    /// scale. The same scale and the same products as the plain version, so the same bytes.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn round_row_offset(row: &[f32], dst: &mut [u8]) -> f32 {
        assert!(dst.len() >= row.len());
        let n = row.len();
        let lanes = |at: usize| -> __mmask16 { if n - at >= 16 { 0xffff } else { (1u16 << (n - at)) - 1 } };
        // SAFETY: every load and store is masked to the lanes before `n`, from a pointer at an
        // index below `n` (dst holds at least n bytes).
        unsafe {
            let mut amax = _mm512_setzero_ps();
            for at in (0..n).step_by(16) {
                amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_maskz_loadu_ps(lanes(at), row.as_ptr().add(at))));
            }
            let scale = _mm512_reduce_max_ps(amax) / 127.0;
            let inv = _mm512_set1_ps(if scale > 0.0 { 1.0 / scale } else { 0.0 });
            let (lo, hi, offset) = (_mm512_set1_ps(-127.0), _mm512_set1_ps(127.0), _mm512_set1_epi32(128));
            for at in (0..n).step_by(16) {
                let m = lanes(at);
                let v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row.as_ptr().add(at)), inv);
                // Rounded to nearest, ties to even (the default rounding mode), as round_ties_even.
                let q = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_roundscale_ps::<0x08>(v), lo), hi));
                _mm_mask_storeu_epi8(dst.as_mut_ptr().add(at).cast(), m, _mm512_cvtepi32_epi8(_mm512_add_epi32(q, offset)));
            }
            scale
        }
    }

    /// [`super::pack_panel`]: the same integers, sixteen outputs at a time, the four inputs of
    /// a group joined into each output's 32-bit lane.
    #[target_feature(enable = "avx512f,avx512bw")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn pack_panel(values: &[f32], inp: usize, out: usize, row_scale: &[f32], inv: &[f32], first: usize, chunk: &mut [i8], sums: &mut [i32]) {
        let lanes = sums.len();
        assert!(first + lanes <= out && inv.len() >= first + lanes && values.len() == inp * out && row_scale.len() == inp);
        assert!(chunk.len() == inp.div_ceil(4) * PANEL * 4 && lanes <= PANEL);
        let (lo, hi, byte) = (_mm512_set1_ps(-127.0), _mm512_set1_ps(127.0), _mm512_set1_epi32(0xff));
        // SAFETY: loads are masked to the panel's `lanes` outputs of rows below `inp` (checked
        // above); each store writes 64 bytes of `chunk` (a group's 256 bytes hold four such) or
        // the masked lanes of `sums`.
        unsafe {
            for at in (0..lanes).step_by(16) {
                let m: __mmask16 = if lanes - at >= 16 { 0xffff } else { (1u16 << (lanes - at)) - 1 };
                let s = _mm512_maskz_loadu_ps(m, inv.as_ptr().add(first + at));
                let mut sum = _mm512_setzero_si512();
                for g in 0..inp.div_ceil(4) {
                    let mut joined = _mm512_setzero_si512();
                    for j in 0..4.min(inp - 4 * g) {
                        let i = 4 * g + j;
                        let v = _mm512_maskz_loadu_ps(m, values.as_ptr().add(i * out + first + at));
                        let scaled = _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(row_scale[i])), s);
                        // Rounded to nearest, ties to even, then clamped: as round_even.
                        let q = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_roundscale_ps::<0x08>(scaled), lo), hi));
                        sum = _mm512_add_epi32(sum, q);
                        joined = _mm512_or_si512(joined, _mm512_sllv_epi32(_mm512_and_si512(q, byte), _mm512_set1_epi32(8 * j as i32)));
                    }
                    _mm512_storeu_si512(chunk.as_mut_ptr().add((g * PANEL + at) * 4).cast(), joined);
                }
                let total = _mm512_add_epi32(_mm512_maskz_loadu_epi32(m, sums.as_ptr().add(at)), _mm512_slli_epi32::<7>(sum));
                _mm512_mask_storeu_epi32(sums.as_mut_ptr().add(at), m, total);
            }
        }
    }

    /// Output rows `first..` (as many as `out` holds) of the product.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn rows(a: &Int8Rows, first: usize, w: &Int8Weight, bias: &[f32], out: &mut [f32], accumulate: bool) {
        let rows = out.len() / w.out;
        let panels = w.out.div_ceil(PANEL);
        for panel in 0..panels {
            let cols = (w.out - panel * PANEL).min(PANEL);
            let b = &w.packed[panel * w.groups * PANEL * 4..(panel + 1) * w.groups * PANEL * 4];
            let mut r = 0;
            while r < rows {
                let m = (rows - r).min(TILE_ROWS);
                let tile = Tile { a, row: first + r, w, b, panel, cols, bias };
                let dst = &mut out[r * w.out..(r + m) * w.out];
                // SAFETY: the caller detected VNNI; the tile's rows and columns are inside
                // `a`, `b` and `dst` (checked by the slicing above).
                unsafe {
                    match m {
                        6 => tile.run::<6>(dst, accumulate),
                        5 => tile.run::<5>(dst, accumulate),
                        4 => tile.run::<4>(dst, accumulate),
                        3 => tile.run::<3>(dst, accumulate),
                        2 => tile.run::<2>(dst, accumulate),
                        _ => tile.run::<1>(dst, accumulate),
                    }
                }
                r += m;
            }
        }
    }

    /// Up to `TILE_ROWS` rows by one panel of outputs.
    struct Tile<'a> {
        a: &'a Int8Rows,
        row: usize,
        w: &'a Int8Weight,
        /// The panel's packed weights.
        b: &'a [i8],
        panel: usize,
        cols: usize,
        bias: &'a [f32],
    }

    impl Tile<'_> {
        #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
        unsafe fn run<const M: usize>(&self, dst: &mut [f32], accumulate: bool) {
            let mut acc = [[_mm512_setzero_si512(); 4]; M];
            let a = self.a.bytes[self.row * self.a.stride..(self.row + M) * self.a.stride].as_ptr();
            let b = self.b.as_ptr();
            // SAFETY: group g of row m is a's bytes 4g..4g+4 of that row (g < groups, the
            // stride is 4 · groups); the panel holds groups × 256 weight bytes.
            unsafe {
                for g in 0..self.w.groups {
                    let bg = b.add(g * PANEL * 4);
                    let b0 = _mm512_loadu_si512(bg.cast());
                    let b1 = _mm512_loadu_si512(bg.add(64).cast());
                    let b2 = _mm512_loadu_si512(bg.add(128).cast());
                    let b3 = _mm512_loadu_si512(bg.add(192).cast());
                    for (m, sums) in acc.iter_mut().enumerate() {
                        let x = _mm512_set1_epi32(a.add(m * self.a.stride + 4 * g).cast::<i32>().read_unaligned());
                        sums[0] = _mm512_dpbusd_epi32(sums[0], x, b0);
                        sums[1] = _mm512_dpbusd_epi32(sums[1], x, b1);
                        sums[2] = _mm512_dpbusd_epi32(sums[2], x, b2);
                        sums[3] = _mm512_dpbusd_epi32(sums[3], x, b3);
                    }
                }
            }
            let out = self.w.out;
            let col0 = self.panel * PANEL;
            for (m, sums) in acc.iter().enumerate() {
                let row_scale = _mm512_set1_ps(self.a.scale[self.row + m]);
                for (j, sum) in sums.iter().enumerate() {
                    let start = 16 * j;
                    if start >= self.cols {
                        break;
                    }
                    let lanes: __mmask16 = if self.cols - start >= 16 { 0xffff } else { (1u16 << (self.cols - start)) - 1 };
                    let o = col0 + start;
                    // SAFETY: o < w.out, so each pointer is inside its slice, and the mask keeps
                    // the loads and stores to the `cols - start` outputs that exist.
                    unsafe {
                        let dot = _mm512_sub_epi32(*sum, _mm512_maskz_loadu_epi32(lanes, self.w.offset_sum.as_ptr().add(o)));
                        let scale = _mm512_mul_ps(row_scale, _mm512_maskz_loadu_ps(lanes, self.w.scale.as_ptr().add(o)));
                        let mut v = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(dot), scale), _mm512_maskz_loadu_ps(lanes, self.bias.as_ptr().add(o)));
                        let at = dst.as_mut_ptr().add(m * out + o);
                        if accumulate {
                            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(lanes, at));
                        }
                        _mm512_mask_storeu_ps(at, lanes, v);
                    }
                }
            }
        }
    }
}
