//! Element-wise passes on the CPU for the OCR networks' native path: the chain of per-channel
//! affines and activations that follows a convolution, applied to one channel's plane while it
//! is still in cache, and row-wise softmax.

use rayon::prelude::*;

use crate::dense_cpu::{exp, softmax_in_place};

/// An element-wise operation on a value of channel `c`; a constant vector holds one value per
/// channel, or one for all.
#[derive(Debug, Clone, PartialEq)]
pub enum PointwiseOp {
    /// `x + v[c]`.
    Add(Vec<f32>),
    /// `x · v[c]`.
    Mul(Vec<f32>),
    Relu,
    Sigmoid,
    Sqrt,
    /// `clamp(alpha·x + beta, 0, 1)`.
    HardSigmoid {
        alpha: f32,
        beta: f32,
    },
    /// `x · clamp(alpha·x + beta, 0, 1)`.
    HardSwish {
        alpha: f32,
        beta: f32,
    },
}

impl PointwiseOp {
    /// The operation on one value, written plainly (the reference for [`apply_pointwise`]).
    pub fn reference(&self, c: usize, x: f32) -> f64 {
        let x = f64::from(x);
        let per_channel = |v: &[f32]| f64::from(if v.len() == 1 { v[0] } else { v[c] });
        match self {
            PointwiseOp::Add(v) => x + per_channel(v),
            PointwiseOp::Mul(v) => x * per_channel(v),
            PointwiseOp::Relu => x.max(0.0),
            PointwiseOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            PointwiseOp::Sqrt => x.sqrt(),
            PointwiseOp::HardSigmoid { alpha, beta } => (f64::from(*alpha) * x + f64::from(*beta)).clamp(0.0, 1.0),
            PointwiseOp::HardSwish { alpha, beta } => x * (f64::from(*alpha) * x + f64::from(*beta)).clamp(0.0, 1.0),
        }
    }

    /// Whether the operation can apply to `channels` channels (its constants fit).
    pub fn fits(&self, channels: usize) -> bool {
        match self {
            PointwiseOp::Add(v) | PointwiseOp::Mul(v) => v.len() == 1 || v.len() == channels,
            _ => true,
        }
    }
}

/// Applies `ops` in order to `plane`, the values of channel `c`.
pub fn apply_pointwise(plane: &mut [f32], c: usize, ops: &[PointwiseOp]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the feature the function is compiled for was just detected.
            unsafe { apply_avx512(plane, c, ops) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: as above.
            unsafe { apply_avx2(plane, c, ops) };
            return;
        }
    }
    apply_portable(plane, c, ops);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn apply_avx512(plane: &mut [f32], c: usize, ops: &[PointwiseOp]) {
    apply_portable(plane, c, ops);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn apply_avx2(plane: &mut [f32], c: usize, ops: &[PointwiseOp]) {
    apply_portable(plane, c, ops);
}

#[inline(always)]
fn apply_portable(plane: &mut [f32], c: usize, ops: &[PointwiseOp]) {
    let pick = |v: &[f32]| if v.len() == 1 { v[0] } else { v[c] };
    let mut i = 0;
    while i < ops.len() {
        // A run of adds and multiplies (batch norm, then a learnable affine: four in a row in
        // the recogniser) is one affine, applied in one pass.
        let (mut scale, mut shift, mut end) = (1.0f32, 0.0f32, i);
        while let Some(op @ (PointwiseOp::Add(_) | PointwiseOp::Mul(_))) = ops.get(end) {
            match op {
                PointwiseOp::Add(v) => shift += pick(v),
                PointwiseOp::Mul(v) => {
                    let m = pick(v);
                    scale *= m;
                    shift *= m;
                }
                _ => unreachable!("the loop matches adds and multiplies only"),
            }
            end += 1;
        }
        if end > i {
            plane.iter_mut().for_each(|x| *x = *x * scale + shift);
            i = end;
            continue;
        }
        match &ops[i] {
            PointwiseOp::Add(_) | PointwiseOp::Mul(_) => unreachable!("folded above"),
            PointwiseOp::Relu => plane.iter_mut().for_each(|x| *x = x.max(0.0)),
            // exp of a non-positive argument only (the vectorised exp's range), on either side.
            PointwiseOp::Sigmoid => plane.iter_mut().for_each(|x| {
                let e = exp(-x.abs());
                *x = if *x >= 0.0 { 1.0 / (1.0 + e) } else { e / (1.0 + e) };
            }),
            PointwiseOp::Sqrt => plane.iter_mut().for_each(|x| *x = x.sqrt()),
            PointwiseOp::HardSigmoid { alpha, beta } => plane.iter_mut().for_each(|x| *x = (alpha * *x + beta).clamp(0.0, 1.0)),
            PointwiseOp::HardSwish { alpha, beta } => plane.iter_mut().for_each(|x| *x *= (alpha * *x + beta).clamp(0.0, 1.0)),
        }
        i += 1;
    }
}

/// Softmax over each row of `row` values, rows in parallel.
pub fn softmax_rows(data: &mut [f32], row: usize) {
    if row == 0 {
        return;
    }
    data.par_chunks_mut(row).for_each(softmax_in_place);
}

/// `x[i] += y[i]` (a residual connection), in parallel chunks.
pub fn add_assign(x: &mut [f32], y: &[f32]) {
    assert_eq!(x.len(), y.len(), "a residual adds tensors of one shape");
    x.par_chunks_mut(1 << 14).zip(y.par_chunks(1 << 14)).for_each(|(a, b)| a.iter_mut().zip(b).for_each(|(a, b)| *a += b));
}
