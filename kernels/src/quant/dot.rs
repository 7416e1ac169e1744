//! One weight row against a vector, and one row decoded: the portable path, and the AVX2 and
//! AVX-512 ones (`dot_avx2`, `dot_avx512`) chosen at run time.
//!
//! The block kernels keep each run's sum of q·x apart from its scale and offset: for runs of
//! 32 with `w = s·q + m`, Σ w·x = s·Σ q·x + m·Σ x, and Σ x per run (`sums`) is computed once
//! per vector, not once per row.

use super::CpuPath;
use super::blocks::{BlockEncoding, dequantize_packed};

#[cfg(target_arch = "x86_64")]
#[path = "dot_avx2.rs"]
mod avx2;
#[cfg(target_arch = "x86_64")]
#[path = "dot_avx512.rs"]
mod avx512;
#[cfg(target_arch = "x86_64")]
#[path = "dot_vnni.rs"]
mod vnni;

/// A product's input vector, with what the kernels derive from it once per product.
pub(super) struct Input<'a> {
    pub values: &'a [f32],
    /// Σ x over each run of 32.
    sums: Vec<f32>,
    /// The vector as 8-bit integers, for the VNNI path (None elsewhere, or when its length
    /// is not whole pairs of runs: those rows take the float kernels).
    #[cfg(target_arch = "x86_64")]
    quantized: Option<vnni::QuantizedInput>,
}

impl Input<'_> {
    pub fn new(values: &[f32], path: CpuPath) -> Input<'_> {
        Input {
            values,
            sums: values.chunks(32).map(|c| c.iter().sum()).collect(),
            #[cfg(target_arch = "x86_64")]
            quantized: (path == CpuPath::Avx512Vnni && values.len().is_multiple_of(64)).then(|| vnni::QuantizedInput::new(values)),
        }
    }
}

/// `x` as the VNNI kernels see it (rounded per run to 8-bit integers), for tests; None where
/// the CPU has no VNNI or `x` is not whole pairs of runs.
pub fn vnni_rounded(x: &[f32]) -> Option<Vec<f32>> {
    #[cfg(target_arch = "x86_64")]
    if CpuPath::available().contains(&CpuPath::Avx512Vnni) && x.len().is_multiple_of(64) {
        return Some(vnni::QuantizedInput::new(x).dequantized());
    }
    let _ = x;
    None
}

/// Σ w·x for one f32 row.
pub(super) fn dot_f32(path: CpuPath, w: &[f32], x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if path != CpuPath::Portable {
        // SAFETY: AVX2 and FMA were detected (every path above portable has them); equal lengths.
        return unsafe { avx2::dot_f32(w, x) };
    }
    let _ = path;
    w.iter().zip(x).map(|(a, b)| a * b).sum()
}

/// Σ w·x for consecutive rows of blocks (`scales`, `quants` in the repacked layout) and the
/// input, one per value of `out`.
pub(super) fn dot_rows(path: CpuPath, encoding: BlockEncoding, scales: &[f32], quants: &[u8], input: &Input<'_>, out: &mut [f32]) {
    let (x, sums) = (input.values, &input.sums);
    let blocks = x.len() / encoding.block_weights();
    let (ns, qb) = (blocks * encoding.scales_per_block(), blocks * encoding.packed_bytes());
    assert_eq!((scales.len(), quants.len()), (out.len() * ns, out.len() * qb), "whole rows");
    #[cfg(target_arch = "x86_64")]
    if let (CpuPath::Avx512Vnni, Some(q)) = (path, &input.quantized) {
        // SAFETY: the features were detected; the slices are out.len() whole rows.
        return unsafe { vnni::dot_rows(encoding, scales, quants, q, out) };
    }
    for (r, o) in out.iter_mut().enumerate() {
        let (s, q) = (&scales[r * ns..(r + 1) * ns], &quants[r * qb..(r + 1) * qb]);
        *o = match path {
            // SAFETY: the feature was detected; the slices cover the row's whole blocks.
            #[cfg(target_arch = "x86_64")]
            CpuPath::Avx512 | CpuPath::Avx512Vnni => unsafe { avx512::dot_blocks(encoding, s, q, x, sums) },
            #[cfg(target_arch = "x86_64")]
            CpuPath::Avx2 => unsafe { avx2::dot_blocks(encoding, s, q, x, sums) },
            _ => dot_portable(encoding, s, q, x),
        };
    }
}

fn dot_portable(encoding: BlockEncoding, scales: &[f32], quants: &[u8], x: &[f32]) -> f32 {
    let per = encoding.block_weights();
    let mut w = [0.0f32; 256];
    let (ns, qb) = (encoding.scales_per_block(), encoding.packed_bytes());
    let mut total = 0.0;
    for ((s, q), x) in scales.chunks_exact(ns).zip(quants.chunks_exact(qb)).zip(x.chunks_exact(per)) {
        dequantize_packed(encoding, s, q, &mut w[..per]);
        total += w[..per].iter().zip(x).map(|(w, x)| w * x).sum::<f32>();
    }
    total
}

/// One row of blocks decoded into `out`.
pub(super) fn dequantize_row(path: CpuPath, encoding: BlockEncoding, scales: &[f32], quants: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if matches!(path, CpuPath::Avx512 | CpuPath::Avx512Vnni) {
        // SAFETY: AVX-512 was detected; the slices cover the row's whole blocks.
        return unsafe { avx512::dequantize_row(encoding, scales, quants, out) };
    }
    let _ = path;
    dequantize_packed(encoding, scales, quants, out);
}
