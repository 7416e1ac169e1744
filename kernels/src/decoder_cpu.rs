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
    // One task per key/value head and block of query rows, the group's query heads stacked
    // into one product: the keys and values are packed once for all of them, not once a head.
    let tasks: Vec<(usize, usize)> = (0..kv_heads).flat_map(|g| (0..new).step_by(ROW_CHUNK).map(move |r| (g, r))).collect();
    tasks.par_iter().for_each_init(PromptScratch::default, |scratch, &(kv_head, first)| {
        let rows = ROW_CHUNK.min(new - first);
        let stacked = group * rows;
        // The block's last query sees this many tokens; later columns are never needed.
        let seen = past + first + rows;
        let kv_offset = kv_head * d;
        let PromptScratch { queries, scores, context } = scratch;
        queries.clear();
        for h in 0..group {
            let head = kv_head * group + h;
            for i in first..first + rows {
                queries.extend_from_slice(&q[i * q_stride + head * d..][..d]);
            }
        }
        scores.resize(stacked * seen, 0.0);
        context.resize(stacked * d, 0.0);
        // SAFETY: queries is stacked × d; the key rows 0..seen of this group lie inside keys
        // (checked above); scores is stacked × seen.
        unsafe {
            gemm(
                stacked,
                seen,
                d,
                scores.as_mut_ptr(),
                1,
                seen as isize,
                false,
                queries.as_ptr(),
                1,
                d as isize,
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
        for (r, row) in scores.chunks_exact_mut(seen).enumerate() {
            let (visible, future) = row.split_at_mut(past + first + r % rows + 1);
            softmax_in_place(visible);
            future.fill(0.0);
        }
        // SAFETY: context is stacked × d; the value rows 0..seen lie inside values.
        unsafe {
            gemm(
                stacked,
                d,
                seen,
                context.as_mut_ptr(),
                1,
                d as isize,
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
        for (r, row) in context.chunks_exact(d).enumerate() {
            let (head, i) = (kv_head * group + r / rows, first + r % rows);
            // SAFETY: each task writes only its own group's heads in its own block of rows, so
            // no two tasks touch the same value of `out`, whose rows are `new` × width.
            unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), out_ptr.at(i * width + head * d), d) };
        }
    });
}

/// A prompt-pass attention task's buffers, kept per thread across tasks.
#[derive(Default)]
struct PromptScratch {
    /// The group's query rows, head after head.
    queries: Vec<f32>,
    /// Their scores over the keys they may see, then the softmax weights.
    scores: Vec<f32>,
    /// Their weighted sums of values, before they go to their places in `out`.
    context: Vec<f32>,
}

/// Multiply-adds below which a decoding step's attention stays on this thread.
const ONE_QUERY_SERIAL_MACS: usize = 1 << 20;

/// Cached tokens per task of a decoding step's attention: enough that a task outweighs its
/// hand-off, few enough that both cores share a cache of a few thousand tokens.
const ONE_QUERY_SPAN: usize = 512;

/// One task's share of a decoding step's attention: for each query head of one key/value
/// group, over one span of cached tokens, the largest score, Σ exp(score − max) and
/// Σ exp(score − max) · v (flash decoding's partial softmax).
struct SpanPartial {
    max: Vec<f32>,
    sum: Vec<f32>,
    weighted: Vec<f32>,
}

/// A decoding step's attention (one query row over every cached token). Each task reads the
/// keys and values of one group once for all of its query heads (reading them once a head
/// made the step memory-bound at a few thousand tokens), over one span of tokens; the spans'
/// partial softmaxes are then merged.
fn attend_one(q: &[f32], keys: &[f32], values: &[f32], shape: GroupedShape, scale: f32, out: &mut [f32]) {
    let GroupedShape { heads, kv_heads, head_dim: d } = shape;
    let total = keys.len() / (kv_heads * d);
    let group = heads / kv_heads;
    let spans = total.div_ceil(ONE_QUERY_SPAN);
    let tasks: Vec<(usize, usize)> = (0..kv_heads).flat_map(|g| (0..spans).map(move |s| (g, s))).collect();
    let run = |&(g, s): &(usize, usize)| attend_span(q, keys, values, shape, scale, g, s * ONE_QUERY_SPAN..total.min((s + 1) * ONE_QUERY_SPAN));
    let partials: Vec<SpanPartial> =
        if heads * total * d * 2 < ONE_QUERY_SERIAL_MACS { tasks.iter().map(run).collect() } else { tasks.par_iter().map(run).collect() };
    for (g, parts) in partials.chunks_exact(spans).enumerate() {
        for h in 0..group {
            let max = parts.iter().fold(f32::NEG_INFINITY, |m, p| m.max(p.max[h]));
            let o = &mut out[(g * group + h) * d..][..d];
            o.fill(0.0);
            let mut sum = 0.0;
            for p in parts {
                let w = (p.max[h] - max).exp();
                sum += w * p.sum[h];
                o.iter_mut().zip(&p.weighted[h * d..(h + 1) * d]).for_each(|(o, v)| *o += w * v);
            }
            o.iter_mut().for_each(|o| *o /= sum);
        }
    }
}

/// [`SpanPartial`] of key/value group `g` over the cached tokens in `span`, on the widest
/// vectors this CPU has.
fn attend_span(q: &[f32], keys: &[f32], values: &[f32], shape: GroupedShape, scale: f32, g: usize, span: Range<usize>) -> SpanPartial {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the features the function is compiled for were just detected.
        return unsafe { attend_span_avx2(q, keys, values, shape, scale, g, span) };
    }
    attend_span_portable(q, keys, values, shape, scale, g, span)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn attend_span_avx2(q: &[f32], keys: &[f32], values: &[f32], shape: GroupedShape, scale: f32, g: usize, span: Range<usize>) -> SpanPartial {
    attend_span_portable(q, keys, values, shape, scale, g, span)
}

#[inline(always)]
fn attend_span_portable<'a>(q: &[f32], keys: &'a [f32], values: &'a [f32], shape: GroupedShape, scale: f32, g: usize, span: Range<usize>) -> SpanPartial {
    let GroupedShape { heads, kv_heads, head_dim: d } = shape;
    let (kv_width, group, n) = (kv_heads * d, heads / kv_heads, span.len());
    let rows = |m: &'a [f32]| m[span.start * kv_width..span.end * kv_width].chunks_exact(kv_width).map(move |row| &row[g * d..(g + 1) * d]);
    let queries = &q[g * group * d..(g + 1) * group * d];
    let mut scores = vec![0.0f32; group * n];
    for (t, k) in rows(keys).enumerate() {
        for (h, qh) in queries.chunks_exact(d).enumerate() {
            scores[h * n + t] = dot(k, qh) * scale;
        }
    }
    let (mut max, mut sum) = (vec![0.0f32; group], vec![0.0f32; group]);
    for (h, row) in scores.chunks_exact_mut(n).enumerate() {
        max[h] = row.iter().fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
        row.iter_mut().for_each(|v| *v = exp(*v - max[h]));
        sum[h] = row.iter().sum();
    }
    let mut weighted = vec![0.0f32; group * d];
    for (t, v) in rows(values).enumerate() {
        for (h, acc) in weighted.chunks_exact_mut(d).enumerate() {
            let p = scores[h * n + t];
            acc.iter_mut().zip(v).for_each(|(a, v)| *a += p * v);
        }
    }
    SpanPartial { max, sum, weighted }
}

/// Σ a·b in sixteen separate sums, so the compiler vectorises it (one running sum must keep
/// the order of additions and cannot).
#[inline(always)]
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
