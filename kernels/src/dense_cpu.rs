//! Dense building blocks of a transformer encoder on the CPU: a linear layer with its bias and
//! residual folded into the matrix product, layer normalisation, and multi-head attention over
//! sequences packed back to back (no padding, so no work on padding).
//!
//! Matrix products go through the `gemm` crate (AVX-512 or AVX2 micro-kernels chosen at run
//! time, both cores); the rest is written so the compiler vectorises it.

use gemm::{Parallelism, gemm};
use rayon::prelude::*;

/// Rows per thread task in the row-wise passes.
const ROW_CHUNK: usize = 64;

/// A weight matrix as PyTorch stores it: `out` rows of `inp` values.
#[derive(Debug, Clone, Copy)]
pub struct Weight<'a> {
    pub values: &'a [f32],
    pub inp: usize,
    pub out: usize,
}

/// `out[rows × w.out] = x[rows × w.inp] · wᵀ + bias`, plus `out`'s previous contents when
/// `accumulate` (how a residual connection is added without another pass).
pub fn linear(x: &[f32], rows: usize, w: Weight<'_>, bias: &[f32], out: &mut [f32], accumulate: bool) {
    assert_eq!(x.len(), rows * w.inp, "input is rows × inp");
    assert_eq!(w.values.len(), w.inp * w.out, "weight is out × inp");
    assert_eq!(bias.len(), w.out, "one bias per output");
    assert_eq!(out.len(), rows * w.out, "output is rows × out");
    out.par_chunks_mut(ROW_CHUNK * w.out).for_each(|chunk| {
        for row in chunk.chunks_exact_mut(w.out) {
            if accumulate {
                row.iter_mut().zip(bias).for_each(|(o, b)| *o += b);
            } else {
                row.copy_from_slice(bias);
            }
        }
    });
    if rows == 0 {
        return;
    }
    // SAFETY: the strides describe x (rows × inp, row-major), wᵀ (inp × out, read from the
    // out × inp storage) and out (rows × out, row-major); the lengths were checked above.
    unsafe {
        gemm(
            rows,
            w.out,
            w.inp,
            out.as_mut_ptr(),
            1,
            w.out as isize,
            true,
            x.as_ptr(),
            1,
            w.inp as isize,
            w.values.as_ptr(),
            w.inp as isize,
            1,
            1.0,
            1.0,
            false,
            false,
            false,
            Parallelism::Rayon(0),
        );
    }
}

/// Normalises each row of `x` (`width` values) to zero mean and unit variance, then scales by
/// `gamma` and shifts by `beta`.
pub fn layer_norm(x: &mut [f32], width: usize, gamma: &[f32], beta: &[f32], eps: f32) {
    assert_eq!(gamma.len(), width);
    assert_eq!(beta.len(), width);
    x.par_chunks_mut(ROW_CHUNK * width).for_each(|chunk| {
        for row in chunk.chunks_exact_mut(width) {
            let mean = row.iter().sum::<f32>() / width as f32;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / width as f32;
            let inv = 1.0 / (var + eps).sqrt();
            for ((v, g), b) in row.iter_mut().zip(gamma).zip(beta) {
                *v = (*v - mean) * inv * g + b;
            }
        }
    });
}

/// Where one sequence sits among the packed rows.
#[derive(Debug, Clone, Copy)]
pub struct SequenceSpan {
    pub start: usize,
    pub len: usize,
}

/// Shape of the packed query, key and value rows: each row holds `3 × heads × head_dim`
/// values, queries first, then keys, then values (one fused projection's output).
#[derive(Debug, Clone, Copy)]
pub struct AttentionShape {
    pub heads: usize,
    pub head_dim: usize,
}

/// Bidirectional multi-head attention within each sequence: `out` (rows × heads·head_dim)
/// receives softmax(q kᵀ / √head_dim) v for every head, from the fused rows `qkv`.
pub fn attention(qkv: &[f32], spans: &[SequenceSpan], shape: AttentionShape, out: &mut [f32]) {
    let width = shape.heads * shape.head_dim;
    let rows = spans.iter().map(|s| s.start + s.len).max().unwrap_or(0);
    assert!(qkv.len() >= rows * 3 * width, "qkv holds every row");
    assert!(out.len() >= rows * width, "out holds every row");
    let out_ptr = SharedOut(out.as_mut_ptr());
    let scale = 1.0 / (shape.head_dim as f32).sqrt();
    let tasks: Vec<(SequenceSpan, usize)> = spans.iter().filter(|s| s.len > 0).flat_map(|&s| (0..shape.heads).map(move |h| (s, h))).collect();
    tasks.par_iter().for_each_init(Vec::new, |scores: &mut Vec<f32>, &(span, head)| {
        let (len, d) = (span.len, shape.head_dim);
        scores.resize(len * len, 0.0);
        let base = span.start * 3 * width + head * d;
        let stride = (3 * width) as isize;
        // SAFETY: q, k and v of this head are read with the row stride of qkv inside the rows
        // of this span (checked above); scores is len × len.
        unsafe {
            gemm(
                len,
                len,
                d,
                scores.as_mut_ptr(),
                1,
                len as isize,
                false,
                qkv.as_ptr().add(base),
                1,
                stride,
                qkv.as_ptr().add(base + width),
                stride,
                1,
                0.0,
                scale,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
        for row in scores.chunks_exact_mut(len) {
            softmax_in_place(row);
        }
        // SAFETY: each task writes only its own head's columns of its own span's rows, so no
        // two tasks touch the same value of `out`.
        unsafe {
            gemm(
                len,
                d,
                len,
                out_ptr.at(span.start * width + head * d),
                1,
                width as isize,
                false,
                scores.as_ptr(),
                1,
                len as isize,
                qkv.as_ptr().add(base + 2 * width),
                1,
                stride,
                0.0,
                1.0,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
    });
}

/// The output pointer, shared by tasks that write disjoint parts of it.
#[derive(Clone, Copy)]
pub(crate) struct SharedOut(pub(crate) *mut f32);
// SAFETY: tasks write disjoint elements (see `attention`).
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

impl SharedOut {
    /// # Safety
    /// `offset` lies inside the buffer.
    pub(crate) unsafe fn at(self, offset: usize) -> *mut f32 {
        unsafe { self.0.add(offset) }
    }
}

pub(crate) fn softmax_in_place(row: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the features the function is compiled for were just detected.
        unsafe { softmax_avx2(row) };
        return;
    }
    softmax_portable(row);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn softmax_avx2(row: &mut [f32]) {
    softmax_portable(row);
}

/// Lanes of the running maxima and sums: independent accumulators the compiler can keep in
/// vector registers (a single running sum would force one addition after another).
const LANES: usize = 16;

#[inline(always)]
fn softmax_portable(row: &mut [f32]) {
    let mut maxima = [f32::NEG_INFINITY; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (m, &v) in maxima.iter_mut().zip(chunk) {
            *m = if v > *m { v } else { *m };
        }
    }
    let max = chunks.remainder().iter().chain(&maxima).fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    row.iter_mut().for_each(|v| *v = exp(*v - max));
    let mut sums = [0.0f32; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (s, &v) in sums.iter_mut().zip(chunk) {
            *s += v;
        }
    }
    let sum: f32 = chunks.remainder().iter().chain(&sums).sum();
    let inv = 1.0 / sum;
    row.iter_mut().for_each(|v| *v *= inv);
}

/// eˣ for x ≤ 0 (softmax's range) as Cephes computes it: x = n·ln 2 + r, a degree-6 polynomial
/// in r, and 2ⁿ put straight into the exponent bits; relative error about 2e-7. The integer n
/// is read from the bits of a float (adding 1.5·2²³ rounds it into the low mantissa bits),
/// because a float-to-int cast would stop the loop from being vectorised.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const ROUNDER: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 0.0);
    let t = x * std::f32::consts::LOG2_E + ROUNDER;
    let n = t - ROUNDER;
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 5e-1;
    let y = p * r * r + r + 1.0;
    let biased = t.to_bits().wrapping_sub(ROUNDER.to_bits()).wrapping_add(127);
    y * f32::from_bits(biased << 23)
}

/// The plain reference for [`attention`]: softmax(q kᵀ / √d) v per sequence and head of a
/// packed q|k|v buffer, in f64.
pub fn packed_attention_reference(qkv: &[f32], spans: &[SequenceSpan], heads: usize, d: usize) -> Vec<f64> {
    let width = heads * d;
    let rows = spans.iter().map(|s| s.start + s.len).max().unwrap_or(0);
    let at = |row: usize, part: usize, head: usize, i: usize| f64::from(qkv[row * 3 * width + part * width + head * d + i]);
    let mut out = vec![0.0f64; rows * width];
    for span in spans {
        for h in 0..heads {
            for qi in span.start..span.start + span.len {
                let scores: Vec<f64> =
                    (span.start..span.start + span.len).map(|ki| (0..d).map(|i| at(qi, 0, h, i) * at(ki, 1, h, i)).sum::<f64>() / (d as f64).sqrt()).collect();
                let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let sum: f64 = exps.iter().sum();
                for i in 0..d {
                    out[qi * width + h * d + i] = exps.iter().enumerate().map(|(j, e)| e / sum * at(span.start + j, 2, h, i)).sum();
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_close_to_the_exact_function_on_softmax_range() {
        let mut worst = 0.0f64;
        for i in 0..=870_000 {
            let x = -(i as f32) * 1e-4;
            let want = f64::from(x).exp();
            worst = worst.max((f64::from(exp(x)) - want).abs() / want);
        }
        assert!(worst < 1e-6, "worst relative error {worst}");
    }
}
