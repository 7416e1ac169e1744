//! One weight row against a vector, and one row decoded: the portable path, and the AVX2 and
//! AVX-512 ones (`dot_avx2`, `dot_avx512`) chosen at run time.
//!
//! The block kernels keep each run's sum of q·x apart from its scale and offset: for runs of
//! 32 with `w = s·q + m`, Σ w·x = s·Σ q·x + m·Σ x, and Σ x per run (`sums`) is computed once
//! per vector, not once per row.

#[cfg(target_arch = "x86_64")]
use std::sync::OnceLock;

use super::CpuPath;
use super::blocks::{BlockEncoding, dequantize_packed};

#[cfg(target_arch = "x86_64")]
#[path = "dot_avx2.rs"]
mod avx2;
#[cfg(target_arch = "x86_64")]
#[path = "dot_avx2_int8.rs"]
mod avx2_int8;
#[cfg(target_arch = "x86_64")]
#[path = "dot_avx512.rs"]
mod avx512;
#[cfg(target_arch = "x86_64")]
#[path = "dot_vnni.rs"]
mod vnni;

/// Position in the integer kernels' order of value `i` of a vector: each pair of runs A and B
/// (64 values) as the nibbles of one load come out, [A 0..16, B 0..16, A 16..32, B 16..32].
#[cfg(target_arch = "x86_64")]
fn pair_order(i: usize) -> usize {
    let (pair, at) = (i / 64, i % 64);
    let (run, j) = (at / 32, at % 32);
    pair * 64 + (j / 16) * 32 + run * 16 + j % 16
}

/// How far ahead of the block being read the integer kernels fetch: the hardware prefetcher
/// alone left a third of the memory bandwidth unused (55 against 80 GB/s on a 196 MB matrix, a
/// 2-core box).
#[cfg(target_arch = "x86_64")]
const PREFETCH_BYTES: usize = 16384;

/// Asks for the cache lines of the block `PREFETCH_BYTES` ahead of the `bytes` at `p`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn ahead(p: *const u8, bytes: usize) {
    for at in (0..bytes).step_by(64) {
        // Past the end of an allocation too: a prefetch is a hint, never a fault.
        super::prefetch(p.wrapping_add(PREFETCH_BYTES + at));
    }
}

/// A product's input vector, with what the kernels derive from it once per product.
pub(super) struct Input<'a> {
    pub values: &'a [f32],
    /// Σ x over each run of 32.
    sums: Vec<f32>,
    /// The vector as 8-bit integers, for the VNNI path (None elsewhere, or when its length
    /// is not whole pairs of runs: those rows take the float kernels).
    #[cfg(target_arch = "x86_64")]
    quantized: Option<vnni::QuantizedInput>,
    /// The vector as 8-bit integers per 256 values, for the AVX2 path's Q4_K and Q6_K rows
    /// (None elsewhere, or when its length is not whole super-blocks). Rounded when a row
    /// first needs it: a product's rows are often all of one kind.
    #[cfg(target_arch = "x86_64")]
    q8k: OnceLock<Option<avx2_int8::Q8kInput>>,
    /// The vector as 8-bit integers per run of 32, for the AVX2 path's Q5_0 and Q8_0 rows;
    /// rounded when first needed.
    #[cfg(target_arch = "x86_64")]
    runs: OnceLock<Option<avx2_int8::RunInput>>,
    #[cfg(target_arch = "x86_64")]
    path: CpuPath,
}

impl Input<'_> {
    pub fn new(values: &[f32], path: CpuPath) -> Input<'_> {
        Input {
            values,
            sums: values.chunks(32).map(|c| c.iter().sum()).collect(),
            #[cfg(target_arch = "x86_64")]
            quantized: (path == CpuPath::Avx512Vnni && values.len().is_multiple_of(64)).then(|| vnni::QuantizedInput::new(values)),
            #[cfg(target_arch = "x86_64")]
            q8k: OnceLock::new(),
            #[cfg(target_arch = "x86_64")]
            runs: OnceLock::new(),
            #[cfg(target_arch = "x86_64")]
            path,
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn q8k(&self) -> Option<&avx2_int8::Q8kInput> {
        let values = self.values;
        let rounds = self.path == CpuPath::Avx2 && values.len().is_multiple_of(avx2_int8::GROUP);
        self.q8k.get_or_init(|| rounds.then(|| avx2_int8::Q8kInput::new(values))).as_ref()
    }

    #[cfg(target_arch = "x86_64")]
    fn runs(&self) -> Option<&avx2_int8::RunInput> {
        let values = self.values;
        let rounds = self.path == CpuPath::Avx2 && values.len().is_multiple_of(32);
        self.runs.get_or_init(|| rounds.then(|| avx2_int8::RunInput::new(values))).as_ref()
    }
}

/// `x` as the matrix-vector product on `path` reads it for rows in `encoding` (rounded to
/// 8-bit integers on the VNNI path per run of 32, and on the AVX2 path per 256 values for
/// K-quant rows and per run of 32 for Q5_0 and Q8_0 rows), for tests; None where that product
/// reads `x` as it is.
pub fn rounded_input(path: CpuPath, encoding: BlockEncoding, x: &[f32]) -> Option<Vec<f32>> {
    #[cfg(target_arch = "x86_64")]
    match path.or_portable() {
        CpuPath::Avx512Vnni if x.len().is_multiple_of(64) => return Some(vnni::QuantizedInput::new(x).dequantized()),
        CpuPath::Avx2 if avx2_int8::takes(encoding) && x.len().is_multiple_of(avx2_int8::GROUP) => {
            return Some(avx2_int8::Q8kInput::new(x).dequantized());
        }
        CpuPath::Avx2 if avx2_int8::takes_runs(encoding) && x.len().is_multiple_of(32) => return Some(avx2_int8::RunInput::new(x).dequantized()),
        _ => {}
    }
    let _ = (path, encoding, x);
    None
}

/// Whether the AVX2 path reads rows in `encoding`, `cols` wide, with its integer kernels.
pub(super) fn int8_rows(encoding: BlockEncoding, cols: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    return avx2_int8::takes_runs(encoding) || (avx2_int8::takes(encoding) && cols.is_multiple_of(avx2_int8::GROUP));
    #[cfg(not(target_arch = "x86_64"))]
    return {
        let _ = (encoding, cols);
        false
    };
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

/// Σ w·x for consecutive rows of blocks (`scales`, `quants` in the repacked layout) and each
/// input: `out[r · k + i]` is row r times input i, for k inputs of the rows' width.
pub(super) fn dot_rows(path: CpuPath, encoding: BlockEncoding, scales: &[f32], quants: &[u8], inputs: &[Input<'_>], out: &mut [f32]) {
    let (k, cols) = (inputs.len(), inputs.first().map_or(0, |x| x.values.len()));
    let blocks = cols / encoding.block_weights();
    let (ns, qb) = (blocks * encoding.scales_per_block(), blocks * encoding.packed_bytes());
    assert!(k > 0 && inputs.iter().all(|x| x.values.len() == cols), "inputs of one width");
    assert_eq!((scales.len(), quants.len()), (out.len() / k * ns, out.len() / k * qb), "whole rows");
    #[cfg(target_arch = "x86_64")]
    if path == CpuPath::Avx2 && avx2_int8::takes(encoding) {
        let rounded: Option<Vec<&avx2_int8::Q8kInput>> = inputs.iter().map(Input::q8k).collect();
        // SAFETY: AVX2 and FMA were detected (the path); the slices are whole rows of inputs'
        // width, out.len() / k of them.
        match rounded.as_deref() {
            Some(&[a]) => return unsafe { avx2_int8::dot_rows(encoding, scales, quants, [a], out) },
            Some(&[a, b]) => return unsafe { avx2_int8::dot_rows(encoding, scales, quants, [a, b], out) },
            Some(&[a, b, c, d]) => return unsafe { avx2_int8::dot_rows(encoding, scales, quants, [a, b, c, d], out) },
            _ => {}
        }
    }
    #[cfg(target_arch = "x86_64")]
    if path == CpuPath::Avx2 && avx2_int8::takes_runs(encoding) {
        let rounded: Option<Vec<&avx2_int8::RunInput>> = inputs.iter().map(Input::runs).collect();
        // SAFETY: as above.
        match rounded.as_deref() {
            Some(&[a]) => return unsafe { avx2_int8::dot_run_rows(encoding, scales, quants, [a], out) },
            Some(&[a, b]) => return unsafe { avx2_int8::dot_run_rows(encoding, scales, quants, [a, b], out) },
            Some(&[a, b, c, d]) => return unsafe { avx2_int8::dot_run_rows(encoding, scales, quants, [a, b, c, d], out) },
            _ => {}
        }
    }
    for (r, o) in out.chunks_exact_mut(k).enumerate() {
        let (s, q) = (&scales[r * ns..(r + 1) * ns], &quants[r * qb..(r + 1) * qb]);
        for (o, input) in o.iter_mut().zip(inputs) {
            let x = input.values;
            *o = match path {
                // SAFETY (each arm): the feature was detected; the slices cover the row's whole
                // blocks and the input is the row's width.
                #[cfg(target_arch = "x86_64")]
                CpuPath::Avx512Vnni if input.quantized.is_some() => {
                    let mut v = 0.0;
                    if let Some(qx) = &input.quantized {
                        unsafe { vnni::dot_rows(encoding, s, q, qx, std::slice::from_mut(&mut v)) };
                    }
                    v
                }
                #[cfg(target_arch = "x86_64")]
                CpuPath::Avx512 | CpuPath::Avx512Vnni => unsafe { avx512::dot_blocks(encoding, s, q, x, &input.sums) },
                #[cfg(target_arch = "x86_64")]
                CpuPath::Avx2 => unsafe { avx2::dot_blocks(encoding, s, q, x, &input.sums) },
                _ => dot_portable(encoding, s, q, x),
            };
        }
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
