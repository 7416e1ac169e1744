//! Weight matrices kept in llama.cpp's block encodings (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K), and
//! their products: one vector at a time for a decoding step, many rows for a prompt pass.
//!
//! Decoding one token reads every weight once, so on a CPU its speed is set by the bytes the
//! weights take: Q4_K is under a seventh of f32. Blocks are repacked at load into f32 scales and
//! packed quants (`blocks`), so the hot loops convert no f16. A prompt pass multiplies each
//! weight by many rows, so it decodes a few weight rows at a time and runs them as a matrix
//! product (`matmul`); nothing keeps an f32 copy of the model.

mod blocks;
mod dot;
mod matmul;
#[cfg(target_arch = "x86_64")]
mod matmul_amx;

pub use blocks::{BlockEncoding, dequantize_gguf, dequantize_reference};
pub use dot::rounded_input;
pub use matmul::MatmulPath;

use rayon::prelude::*;

/// Which instruction set a product runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuPath {
    Portable,
    Avx2,
    Avx512,
    /// AVX-512 with VNNI: the input rounded to 8-bit integers, integer dot products.
    Avx512Vnni,
}

/// Asks for the cache line at `p` ahead of its use (a hint: nothing where the CPU has none).
#[inline(always)]
fn prefetch(p: *const u8) {
    // SAFETY: SSE is part of every x86-64 CPU; a prefetch never faults, wherever it points.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

impl CpuPath {
    /// The fastest path this CPU supports.
    pub fn best() -> CpuPath {
        static BEST: std::sync::OnceLock<CpuPath> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| *CpuPath::available().last().unwrap_or(&CpuPath::Portable))
    }

    /// Every path this CPU supports, slowest first.
    pub fn available() -> Vec<CpuPath> {
        let mut paths = vec![CpuPath::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                paths.push(CpuPath::Avx2);
            }
            if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") {
                paths.push(CpuPath::Avx512);
                if is_x86_feature_detected!("avx512vnni") {
                    paths.push(CpuPath::Avx512Vnni);
                }
            }
        }
        paths
    }

    /// `self` if this CPU has it, else the portable path.
    pub(crate) fn or_portable(self) -> CpuPath {
        if self == CpuPath::Portable || CpuPath::available().contains(&self) { self } else { CpuPath::Portable }
    }
}

enum Storage {
    F32(Vec<f32>),
    Blocks {
        encoding: BlockEncoding,
        /// Per block, `encoding.scales_per_block()` f32 values.
        scales: Vec<f32>,
        /// Per block, `encoding.packed_bytes()` bytes.
        quants: Vec<u8>,
    },
}

/// Consecutive rows in one storage.
struct Part {
    rows: usize,
    storage: Storage,
}

/// A `[rows, cols]` weight matrix, row-major, made of parts that may each use their own
/// encoding (a stacked query/key/value matrix mixes Q4_K and Q6_K rows in llama.cpp's files).
pub struct QuantMatrix {
    rows: usize,
    cols: usize,
    parts: Vec<Part>,
}

/// Rows per parallel task: enough work to pay for handing it to another thread.
const ROWS_PER_TASK: usize = 64;

impl Part {
    /// Row `r`'s scales and bytes (block storage only).
    fn row_blocks(&self, r: usize, cols: usize) -> Option<(BlockEncoding, &[f32], &[u8])> {
        match &self.storage {
            Storage::F32(_) => None,
            Storage::Blocks { encoding, scales, quants } => {
                let blocks = cols / encoding.block_weights();
                let (ns, qb) = (encoding.scales_per_block(), encoding.packed_bytes());
                Some((*encoding, &scales[r * blocks * ns..(r + 1) * blocks * ns], &quants[r * blocks * qb..(r + 1) * blocks * qb]))
            }
        }
    }

    fn row_into(&self, r: usize, cols: usize, out: &mut [f32], path: CpuPath) {
        match (&self.storage, self.row_blocks(r, cols)) {
            (Storage::F32(v), _) => out.copy_from_slice(&v[r * cols..(r + 1) * cols]),
            (_, Some((encoding, scales, quants))) => dot::dequantize_row(path, encoding, scales, quants, out),
            (_, None) => unreachable!("block storage has row blocks"),
        }
    }

    /// Rows `first..first + n` times each input: `out[r · k + i]` is row first + r times
    /// input i, for k inputs.
    fn dot_rows(&self, first: usize, cols: usize, inputs: &[dot::Input<'_>], path: CpuPath, out: &mut [f32]) {
        let n = out.len() / inputs.len();
        match &self.storage {
            Storage::F32(v) => {
                for (r, o) in out.chunks_exact_mut(inputs.len()).enumerate() {
                    let row = &v[(first + r) * cols..(first + r + 1) * cols];
                    o.iter_mut().zip(inputs).for_each(|(o, x)| *o = dot::dot_f32(path, row, x.values));
                }
            }
            Storage::Blocks { encoding, scales, quants } => {
                let blocks = cols / encoding.block_weights();
                let (ns, qb) = (blocks * encoding.scales_per_block(), blocks * encoding.packed_bytes());
                dot::dot_rows(path, *encoding, &scales[first * ns..(first + n) * ns], &quants[first * qb..(first + n) * qb], inputs, out);
            }
        }
    }
}

impl QuantMatrix {
    /// A matrix of f32 values (row-major).
    pub fn from_f32(rows: usize, cols: usize, values: Vec<f32>) -> Result<QuantMatrix, String> {
        if values.len() != rows * cols {
            return Err(format!("{} values for a {rows}x{cols} matrix", values.len()));
        }
        Ok(QuantMatrix { rows, cols, parts: vec![Part { rows, storage: Storage::F32(values) }] })
    }

    /// A matrix from GGUF blocks (rows of `cols / encoding.block_weights()` blocks each).
    pub fn from_gguf_blocks(encoding: BlockEncoding, rows: usize, cols: usize, raw: &[u8]) -> Result<QuantMatrix, String> {
        let per = encoding.block_weights();
        if !cols.is_multiple_of(per) || raw.len() != rows * cols / per * encoding.gguf_block_bytes() {
            return Err(format!("{} bytes are not {rows} rows of {cols} {encoding:?} weights", raw.len()));
        }
        let blocks = rows * cols / per;
        let mut scales = Vec::with_capacity(blocks * encoding.scales_per_block());
        let mut quants = Vec::with_capacity(blocks * encoding.packed_bytes());
        blocks::repack_gguf(encoding, raw, &mut scales, &mut quants);
        Ok(QuantMatrix { rows, cols, parts: vec![Part { rows, storage: Storage::Blocks { encoding, scales, quants } }] })
    }

    /// The rows of `parts`, one after another (one product instead of several that share an
    /// input, e.g. query, key and value). Neighbouring parts in one encoding are joined.
    pub fn stack(parts: Vec<QuantMatrix>) -> Result<QuantMatrix, String> {
        let cols = parts.first().map_or(0, |p| p.cols);
        if parts.iter().any(|p| p.cols != cols) {
            return Err("stacked matrices must have the same number of columns".into());
        }
        let rows = parts.iter().map(|p| p.rows).sum();
        let mut joined: Vec<Part> = Vec::new();
        for part in parts.into_iter().flat_map(|m| m.parts) {
            match (joined.last_mut(), part) {
                (Some(Part { rows, storage: Storage::F32(a) }), Part { rows: more, storage: Storage::F32(b) }) => {
                    a.extend_from_slice(&b);
                    *rows += more;
                }
                (
                    Some(Part { rows, storage: Storage::Blocks { encoding, scales, quants } }),
                    Part { rows: more, storage: Storage::Blocks { encoding: e, scales: s, quants: q } },
                ) if *encoding == e => {
                    scales.extend_from_slice(&s);
                    quants.extend_from_slice(&q);
                    *rows += more;
                }
                (_, part) => joined.push(part),
            }
        }
        Ok(QuantMatrix { rows, cols, parts: joined })
    }

    /// Number of rows (outputs).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns (inputs).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes the weights take in memory.
    pub fn bytes(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match &p.storage {
                Storage::F32(v) => v.len() * 4,
                Storage::Blocks { scales, quants, .. } => scales.len() * 4 + quants.len(),
            })
            .sum()
    }

    /// The part holding row `r`, and `r`'s index inside it.
    fn locate(&self, mut r: usize) -> (&Part, usize) {
        for part in &self.parts {
            if r < part.rows {
                return (part, r);
            }
            r -= part.rows;
        }
        panic!("row {r} past the end of a {}-row matrix", self.rows);
    }

    /// Row `r`, dequantised (an embedding lookup, and the reference for tests).
    pub fn row(&self, r: usize) -> Vec<f32> {
        let mut out = vec![0.0; self.cols];
        self.row_into(r, &mut out);
        out
    }

    /// Row `r`, dequantised into `out` (`cols` values).
    pub fn row_into(&self, r: usize, out: &mut [f32]) {
        assert_eq!(out.len(), self.cols, "output length");
        let (part, r) = self.locate(r);
        part.row_into(r, self.cols, out, CpuPath::best());
    }

    /// Rows `first..` times each input, across parts: `out[r · k + i]` is row first + r times
    /// input i, for k inputs.
    fn dot_range(&self, mut first: usize, inputs: &[dot::Input<'_>], path: CpuPath, out: &mut [f32]) {
        let k = inputs.len();
        let mut done = 0;
        for part in &self.parts {
            if done == out.len() {
                break;
            }
            if first >= part.rows {
                first -= part.rows;
                continue;
            }
            let n = (part.rows - first).min((out.len() - done) / k);
            part.dot_rows(first, self.cols, inputs, path, &mut out[done..done + n * k]);
            done += n * k;
            first = 0;
        }
    }

    /// `out = W x`, split over the CPU's threads, on the fastest path the CPU has.
    pub fn matvec(&self, x: &[f32], out: &mut [f32]) {
        self.matvec_on(CpuPath::best(), x, out);
    }

    /// `out = W x` on a chosen path (tests compare them); a path the CPU lacks runs portably.
    pub fn matvec_on(&self, path: CpuPath, x: &[f32], out: &mut [f32]) {
        assert_eq!(x.len(), self.cols, "input length");
        assert_eq!(out.len(), self.rows, "output length");
        let path = path.or_portable();
        let input = dot::Input::new(x, path);
        let mut rest = out;
        for part in &self.parts {
            let (mine, later) = rest.split_at_mut(part.rows);
            rest = later;
            mine.par_chunks_mut(ROWS_PER_TASK).enumerate().for_each(|(task, chunk)| {
                part.dot_rows(task * ROWS_PER_TASK, self.cols, std::slice::from_ref(&input), path, chunk);
            });
        }
    }
}
