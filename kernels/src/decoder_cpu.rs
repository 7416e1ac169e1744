//! Building blocks of a Llama-style decoder's prompt pass on the CPU: RMS normalisation, rotary
//! position embedding, the SiLU-gated feed-forward's activation, and grouped-query causal
//! attention of new tokens over the keys and values of every token so far.
//!
//! Matrix products go through the `gemm` crate, as in the encoder (`dense_cpu`).

use std::ops::Range;

use gemm::{Parallelism, gemm};
use rayon::prelude::*;

use crate::dense_cpu::{SharedOut, exp, softmax_in_place};

/// Rows per thread task in the row-wise passes and in attention.
const ROW_CHUNK: usize = 64;

/// Scales each row of `x` (`weight.len()` values) to unit root mean square, then by `weight`,
/// into the same row of `out`.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f64, out: &mut [f32]) {
    let width = weight.len();
    assert_eq!(x.len(), out.len(), "x and out have the same rows");
    assert!(width > 0 && x.len().is_multiple_of(width), "rows are weight.len() wide");
    by_row_chunks(out, width, x, width, |out, x| {
        for (o, x) in out.chunks_exact_mut(width).zip(x.chunks_exact(width)) {
            let mean = x.iter().map(|v| f64::from(*v) * f64::from(*v)).sum::<f64>() / width as f64;
            let scale = (1.0 / (mean + eps).sqrt()) as f32;
            for ((o, v), w) in o.iter_mut().zip(x).zip(weight) {
                *o = v * scale * w;
            }
        }
    });
}

/// Runs `rows` over matching chunks of `ROW_CHUNK` rows of `out` and `input` on the thread
/// pool, or right here when there is only one chunk: a decoding step's single row costs less
/// than handing it to the pool, and a step makes dozens of these calls.
fn by_row_chunks(out: &mut [f32], out_width: usize, input: &[f32], in_width: usize, rows: impl Fn(&mut [f32], &[f32]) + Sync + Send) {
    if out.len() <= ROW_CHUNK * out_width {
        rows(out, input);
    } else {
        out.par_chunks_mut(ROW_CHUNK * out_width).zip(input.par_chunks(ROW_CHUNK * in_width)).for_each(|(out, input)| rows(out, input));
    }
}

/// Cosines and sines of the rotary angles for each position in `positions`, `head_dim / 2` per
/// position: angle i of position p is p · base^(−2i / head_dim).
pub fn rotary_angles(positions: Range<usize>, head_dim: usize, base: f64) -> (Vec<f32>, Vec<f32>) {
    let half = head_dim / 2;
    let inv_freq: Vec<f64> = (0..half).map(|i| base.powf(-2.0 * i as f64 / head_dim as f64)).collect();
    positions.flat_map(|p| inv_freq.iter().map(move |f| p as f64 * f)).map(|a| (a.cos() as f32, a.sin() as f32)).unzip()
}

/// Which values of a head rotate together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeLayout {
    /// Values 2i and 2i + 1 (llama.cpp's layout for Llama models, whose query and key weights
    /// its converter permutes to match).
    AdjacentPairs,
    /// Values i and i + head_dim / 2 (llama.cpp's NEOX layout, as Qwen2 uses): with the wrong
    /// one the model writes fluent nonsense.
    Halves,
}

/// Rotates the first `width` values of each row of `x` (rows `stride` apart), in heads of
/// `head_dim` with pairs in `layout`, by the angles of that row's position (`cos` and `sin`
/// from [`rotary_angles`], one position per row).
pub fn rotate(x: &mut [f32], stride: usize, width: usize, head_dim: usize, layout: RopeLayout, cos: &[f32], sin: &[f32]) {
    let half = head_dim / 2;
    assert!(width <= stride && width.is_multiple_of(head_dim) && head_dim.is_multiple_of(2), "whole heads of pairs");
    assert!(x.len().is_multiple_of(stride), "whole rows");
    assert_eq!(cos.len(), x.len() / stride * half, "one position's angles per row");
    assert_eq!(sin.len(), cos.len());
    let turn = |a: &mut f32, b: &mut f32, c: f32, s: f32| {
        let (x, y) = (*a, *b);
        *a = x * c - y * s;
        *b = x * s + y * c;
    };
    let rotate = |(row, (cos, sin)): (&mut [f32], (&[f32], &[f32]))| {
        for head in row[..width].chunks_exact_mut(head_dim) {
            match layout {
                RopeLayout::AdjacentPairs => {
                    for ((pair, &c), &s) in head.chunks_exact_mut(2).zip(cos).zip(sin) {
                        let (a, b) = pair.split_at_mut(1);
                        turn(&mut a[0], &mut b[0], c, s);
                    }
                }
                RopeLayout::Halves => {
                    let (first, second) = head.split_at_mut(half);
                    for (((a, b), &c), &s) in first.iter_mut().zip(second).zip(cos).zip(sin) {
                        turn(a, b, c, s);
                    }
                }
            }
        }
    };
    // One row (a decoding step) is done here rather than handed to the thread pool.
    if x.len() <= stride {
        x.chunks_mut(stride).zip(cos.chunks(half).zip(sin.chunks(half))).for_each(rotate);
    } else {
        x.par_chunks_mut(stride).zip(cos.par_chunks(half).zip(sin.par_chunks(half))).for_each(rotate);
    }
}

/// The gated feed-forward's activation: each row of `gate_up` holds `width` gate values and
/// then `width` up values; the same row of `out` gets silu(gate) · up.
pub fn silu_gate(gate_up: &[f32], width: usize, out: &mut [f32]) {
    assert_eq!(gate_up.len(), 2 * out.len(), "gate_up rows are twice as wide as out's");
    assert!(width > 0 && out.len().is_multiple_of(width), "rows are width wide");
    by_row_chunks(out, width, gate_up, 2 * width, |out, gate_up| {
        for (o, gu) in out.chunks_exact_mut(width).zip(gate_up.chunks_exact(2 * width)) {
            let (gate, up) = gu.split_at(width);
            for ((o, &g), &u) in o.iter_mut().zip(gate).zip(up) {
                // e^(−|g|) stays in exp's range (x ≤ 0) on both sides of zero.
                let e = exp(-g.abs());
                let sigmoid = if g >= 0.0 { 1.0 / (1.0 + e) } else { e / (1.0 + e) };
                *o = g * sigmoid * u;
            }
        }
    });
}

/// Grouped-query attention: `heads` query heads share `kv_heads` key and value heads.
#[derive(Debug, Clone, Copy)]
pub struct GroupedShape {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

/// Causal attention of the newest tokens over every token so far. `keys` and `values` hold one
/// row of `kv_heads · head_dim` per token (t rows); the queries are the last `new` of those
/// tokens, row i of them at `q[i · q_stride..]`, `heads · head_dim` wide. Query i attends
/// tokens 0 ..= t − new + i; `out` (new rows of `heads · head_dim`) receives
/// softmax(q kᵀ / √head_dim) v for every head.
pub fn causal_attention(q: &[f32], q_stride: usize, keys: &[f32], values: &[f32], shape: GroupedShape, out: &mut [f32]) {
    let GroupedShape { heads, kv_heads, head_dim: d } = shape;
    assert!(heads > 0 && kv_heads > 0 && heads.is_multiple_of(kv_heads) && d > 0, "query heads come in whole groups");
    let (width, kv_width) = (heads * d, kv_heads * d);
    assert!(out.len().is_multiple_of(width), "out is new rows of heads · head_dim");
    let new = out.len() / width;
    assert_eq!(keys.len(), values.len(), "a value row per key row");
    assert!(keys.len().is_multiple_of(kv_width), "keys are rows of kv_heads · head_dim");
    let total = keys.len() / kv_width;
    assert!(new <= total, "the queries are among the cached tokens");
    if new == 0 {
        return;
    }
    assert!(q_stride >= width && q.len() >= (new - 1) * q_stride + width, "q holds every query row");
    let group = heads / kv_heads;
    let scale = 1.0 / (d as f32).sqrt();
    if new == 1 {
        return attend_one(&q[..width], keys, values, shape, scale, out);
    }
    let past = total - new;
    let out_ptr = SharedOut(out.as_mut_ptr());
    let tasks: Vec<(usize, usize)> = (0..heads).flat_map(|h| (0..new).step_by(ROW_CHUNK).map(move |r| (h, r))).collect();
    tasks.par_iter().for_each_init(Vec::new, |scores: &mut Vec<f32>, &(head, first)| {
        let rows = ROW_CHUNK.min(new - first);
        // The block's last query sees this many tokens; later columns are never needed.
        let seen = past + first + rows;
        let kv_offset = (head / group) * d;
        scores.resize(rows * seen, 0.0);
        // SAFETY: the query rows first..first+rows, and the key rows 0..seen of this head's
        // group, lie inside q and keys (checked above); scores is rows × seen.
        unsafe {
            gemm(
                rows,
                seen,
                d,
                scores.as_mut_ptr(),
                1,
                seen as isize,
                false,
                q.as_ptr().add(first * q_stride + head * d),
                1,
                q_stride as isize,
                keys.as_ptr().add(kv_offset),
                kv_width as isize,
                1,
                0.0,
                scale,
                false,
                false,
                false,
                Parallelism::None,
            );
        }
        for (i, row) in scores.chunks_exact_mut(seen).enumerate() {
            let (visible, future) = row.split_at_mut(past + first + i + 1);
            softmax_in_place(visible);
            future.fill(0.0);
        }
        // SAFETY: each task writes only its own head's columns of its own block of rows, so no
        // two tasks touch the same value of `out`; the value rows 0..seen lie inside values.
        unsafe {
            gemm(
                rows,
                d,
                seen,
                out_ptr.at(first * width + head * d),
                1,
                width as isize,
                false,
                scores.as_ptr(),
                1,
                seen as isize,
                values.as_ptr().add(kv_offset),
                1,
                kv_width as isize,
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

/// Multiply-adds below which a decoding step's attention stays on this thread.
const ONE_QUERY_SERIAL_MACS: usize = 1 << 20;

/// A decoding step's attention (one query row over every cached token): plain loops per head,
/// where a matrix product of one row would cost more to set up than to run.
fn attend_one(q: &[f32], keys: &[f32], values: &[f32], shape: GroupedShape, scale: f32, out: &mut [f32]) {
    let GroupedShape { heads, kv_heads, head_dim: d } = shape;
    let kv_width = kv_heads * d;
    let total = keys.len() / kv_width;
    let group = heads / kv_heads;
    let head = |h: usize, out: &mut [f32], scores: &mut Vec<f32>| {
        let (qh, kv) = (&q[h * d..(h + 1) * d], (h / group) * d);
        scores.clear();
        scores.extend(keys.chunks_exact(kv_width).map(|k| dot(&k[kv..kv + d], qh) * scale));
        softmax_in_place(scores);
        out.fill(0.0);
        for (p, v) in scores.iter().zip(values.chunks_exact(kv_width)) {
            out.iter_mut().zip(&v[kv..kv + d]).for_each(|(o, v)| *o += p * v);
        }
    };
    if heads * total * d * 2 < ONE_QUERY_SERIAL_MACS {
        let mut scores = Vec::with_capacity(total);
        out.chunks_exact_mut(d).enumerate().for_each(|(h, o)| head(h, o, &mut scores));
    } else {
        out.par_chunks_exact_mut(d).enumerate().for_each_init(Vec::new, |scores, (h, o)| head(h, o, scores));
    }
}

/// Σ a·b in sixteen separate sums, so the compiler vectorises it (one running sum must keep
/// the order of additions and cannot).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            lanes[i] += x[i] * y[i];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The plain reference for [`causal_attention`]: causal grouped-query attention in f64, each of
/// the `new` queries at its own position among the cache's tokens.
pub fn causal_attention_reference(q: &[f32], q_stride: usize, keys: &[f32], values: &[f32], shape: GroupedShape, new: usize) -> Vec<f64> {
    let GroupedShape { heads, kv_heads, head_dim: d } = shape;
    let (width, kv_width) = (heads * d, kv_heads * d);
    let total = keys.len() / kv_width;
    let mut out = vec![0.0f64; new * width];
    for i in 0..new {
        let position = total - new + i;
        for h in 0..heads {
            let g = h / (heads / kv_heads);
            let scores: Vec<f64> = (0..=position)
                .map(|j| (0..d).map(|x| f64::from(q[i * q_stride + h * d + x]) * f64::from(keys[j * kv_width + g * d + x])).sum::<f64>() / (d as f64).sqrt())
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let sum: f64 = exps.iter().sum();
            for x in 0..d {
                out[i * width + h * d + x] = exps.iter().enumerate().map(|(j, e)| e / sum * f64::from(values[j * kv_width + g * d + x])).sum();
            }
        }
    }
    out
}
