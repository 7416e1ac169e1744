//! Matrix-vector products with weights kept in llama.cpp's block encodings (Q4_0, Q4_1, Q8_0).
//!
//! Decoding one token reads every weight once, so on a CPU its speed is set by the bytes the
//! weights take: Q4_1 is a sixth of f32. Blocks are repacked at load into scales (f32) and
//! packed quants, so the hot loop converts no f16. Each row's dot product equals the dequantised
//! row times `x` up to float rounding (the tests hold it to 1e-4 relative).

use half::f16;
use rayon::prelude::*;

/// A block encoding: 32 weights per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockEncoding {
    /// Scale d, 16 bytes of nibbles: w = (q - 8) d.
    Q4_0,
    /// Scale d and minimum m, 16 bytes of nibbles: w = q d + m.
    Q4_1,
    /// Scale d, 32 signed bytes: w = q d.
    Q8_0,
}

impl BlockEncoding {
    /// Bytes of one block in the GGUF layout.
    pub fn gguf_block_bytes(self) -> usize {
        match self {
            BlockEncoding::Q4_0 => 18,
            BlockEncoding::Q4_1 => 20,
            BlockEncoding::Q8_0 => 34,
        }
    }

    fn quant_bytes(self) -> usize {
        match self {
            BlockEncoding::Q4_0 | BlockEncoding::Q4_1 => 16,
            BlockEncoding::Q8_0 => 32,
        }
    }
}

enum Storage {
    F32(Vec<f32>),
    Blocks {
        encoding: BlockEncoding,
        /// Per block: d (and m for Q4_1, interleaved).
        scales: Vec<f32>,
        quants: Vec<u8>,
    },
}

/// A `[rows, cols]` weight matrix, row-major, in f32 or a block encoding.
pub struct QuantMatrix {
    rows: usize,
    cols: usize,
    storage: Storage,
}

/// Which instruction set a product runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuPath {
    Portable,
    Avx2,
    Avx512,
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
            if is_x86_feature_detected!("avx512f") {
                paths.push(CpuPath::Avx512);
            }
        }
        paths
    }
}

/// Rows per parallel task: enough work to pay for handing it to another thread.
const ROWS_PER_TASK: usize = 64;

impl QuantMatrix {
    /// A matrix of f32 values (row-major).
    pub fn from_f32(rows: usize, cols: usize, values: Vec<f32>) -> Result<QuantMatrix, String> {
        if values.len() != rows * cols {
            return Err(format!("{} values for a {rows}x{cols} matrix", values.len()));
        }
        Ok(QuantMatrix { rows, cols, storage: Storage::F32(values) })
    }

    /// A matrix from GGUF blocks (rows of `cols / 32` blocks each).
    pub fn from_gguf_blocks(encoding: BlockEncoding, rows: usize, cols: usize, raw: &[u8]) -> Result<QuantMatrix, String> {
        if !cols.is_multiple_of(32) || raw.len() != rows * cols / 32 * encoding.gguf_block_bytes() {
            return Err(format!("{} bytes are not {rows} rows of {cols} {encoding:?} weights", raw.len()));
        }
        let f = |b: &[u8], i: usize| f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
        let blocks = rows * cols / 32;
        let mut scales = Vec::with_capacity(blocks * if encoding == BlockEncoding::Q4_1 { 2 } else { 1 });
        let mut quants = Vec::with_capacity(blocks * encoding.quant_bytes());
        for b in raw.chunks_exact(encoding.gguf_block_bytes()) {
            scales.push(f(b, 0));
            let at = if encoding == BlockEncoding::Q4_1 {
                scales.push(f(b, 2));
                4
            } else {
                2
            };
            quants.extend_from_slice(&b[at..]);
        }
        Ok(QuantMatrix { rows, cols, storage: Storage::Blocks { encoding, scales, quants } })
    }

    /// The rows of `parts`, one after another (one product instead of several that share an
    /// input, e.g. query, key and value). Parts in different encodings are stacked as f32.
    pub fn stack(parts: &[QuantMatrix]) -> Result<QuantMatrix, String> {
        let cols = parts.first().map_or(0, |p| p.cols);
        if parts.iter().any(|p| p.cols != cols) {
            return Err("stacked matrices must have the same number of columns".into());
        }
        let rows = parts.iter().map(|p| p.rows).sum();
        let first = parts.first().and_then(|p| match &p.storage {
            Storage::Blocks { encoding, .. } => Some(*encoding),
            Storage::F32(_) => None,
        });
        let same = |p: &QuantMatrix| matches!(&p.storage, Storage::Blocks { encoding, .. } if Some(*encoding) == first);
        if let (Some(encoding), true) = (first, parts.iter().all(same)) {
            let (mut scales, mut quants) = (Vec::new(), Vec::new());
            for p in parts {
                if let Storage::Blocks { scales: s, quants: q, .. } = &p.storage {
                    scales.extend_from_slice(s);
                    quants.extend_from_slice(q);
                }
            }
            return Ok(QuantMatrix { rows, cols, storage: Storage::Blocks { encoding, scales, quants } });
        }
        let values = parts.iter().flat_map(|p| (0..p.rows).flat_map(move |r| p.row(r))).collect();
        QuantMatrix::from_f32(rows, cols, values)
    }

    /// Number of rows (outputs).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns (inputs).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Row `r`, dequantised (an embedding lookup, and the reference for tests).
    pub fn row(&self, r: usize) -> Vec<f32> {
        let cols = self.cols;
        match &self.storage {
            Storage::F32(v) => v[r * cols..(r + 1) * cols].to_vec(),
            Storage::Blocks { encoding, scales, quants } => {
                let per_row = cols / 32;
                let mut out = Vec::with_capacity(cols);
                for blk in r * per_row..(r + 1) * per_row {
                    let q = &quants[blk * encoding.quant_bytes()..(blk + 1) * encoding.quant_bytes()];
                    match encoding {
                        BlockEncoding::Q8_0 => out.extend(q.iter().map(|&v| f32::from(v as i8) * scales[blk])),
                        BlockEncoding::Q4_0 | BlockEncoding::Q4_1 => {
                            let (d, m) = if *encoding == BlockEncoding::Q4_1 {
                                (scales[2 * blk], scales[2 * blk + 1])
                            } else {
                                (scales[blk], -8.0 * scales[blk])
                            };
                            out.extend(q.iter().map(|&v| f32::from(v & 0x0f) * d + m));
                            out.extend(q.iter().map(|&v| f32::from(v >> 4) * d + m));
                        }
                    }
                }
                out
            }
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
        let sums: Vec<f32> = x.chunks(32).map(|c| c.iter().sum()).collect();
        let simd = if path == CpuPath::best() || CpuPath::available().contains(&path) { path } else { CpuPath::Portable };
        out.par_chunks_mut(ROWS_PER_TASK).enumerate().for_each(|(task, chunk)| {
            for (i, o) in chunk.iter_mut().enumerate() {
                *o = self.dot_row(task * ROWS_PER_TASK + i, x, &sums, simd);
            }
        });
    }

    fn dot_row(&self, r: usize, x: &[f32], sums: &[f32], simd: CpuPath) -> f32 {
        let cols = self.cols;
        match &self.storage {
            Storage::F32(v) => {
                let w = &v[r * cols..(r + 1) * cols];
                #[cfg(target_arch = "x86_64")]
                if simd != CpuPath::Portable {
                    // SAFETY: AVX2 and FMA were detected; w and x have the same length.
                    return unsafe { avx2::dot_f32(w, x) };
                }
                w.iter().zip(x).map(|(a, b)| a * b).sum()
            }
            Storage::Blocks { encoding, scales, quants } => {
                let per_row = cols / 32;
                let qb = encoding.quant_bytes();
                let q = &quants[r * per_row * qb..(r + 1) * per_row * qb];
                let s = match encoding {
                    BlockEncoding::Q4_1 => &scales[2 * r * per_row..2 * (r + 1) * per_row],
                    _ => &scales[r * per_row..(r + 1) * per_row],
                };
                #[cfg(target_arch = "x86_64")]
                match simd {
                    // SAFETY: the feature was detected; q, s, x and sums cover whole blocks.
                    CpuPath::Avx512 => return unsafe { avx512::dot_blocks(*encoding, q, s, x, sums) },
                    CpuPath::Avx2 => return unsafe { avx2::dot_blocks(*encoding, q, s, x, sums) },
                    CpuPath::Portable => {}
                }
                dot_blocks_portable(*encoding, q, s, x, sums)
            }
        }
    }
}

fn dot_blocks_portable(encoding: BlockEncoding, q: &[u8], s: &[f32], x: &[f32], sums: &[f32]) -> f32 {
    let mut total = 0.0;
    let qb = encoding.quant_bytes();
    for (i, (qs, xs)) in q.chunks_exact(qb).zip(x.chunks_exact(32)).enumerate() {
        total += match encoding {
            BlockEncoding::Q8_0 => s[i] * qs.iter().zip(xs).map(|(&q, x)| f32::from(q as i8) * x).sum::<f32>(),
            BlockEncoding::Q4_0 | BlockEncoding::Q4_1 => {
                let dot: f32 = qs.iter().zip(xs).map(|(&q, x)| f32::from(q & 0x0f) * x).sum::<f32>()
                    + qs.iter().zip(&xs[16..]).map(|(&q, x)| f32::from(q >> 4) * x).sum::<f32>();
                if encoding == BlockEncoding::Q4_1 { s[2 * i] * dot + s[2 * i + 1] * sums[i] } else { s[i] * (dot - 8.0 * sums[i]) }
            }
        };
    }
    total
}

/// 512-bit registers take a whole half-block (16 weights) per instruction: half the work of AVX2.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::BlockEncoding;

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn widen(v: __m128i) -> __m512 {
        _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v))
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn widen_signed(v: __m128i) -> __m512 {
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v))
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn dot_blocks(encoding: BlockEncoding, q: &[u8], s: &[f32], x: &[f32], sums: &[f32]) -> f32 {
        unsafe {
            let blocks = x.len() / 32;
            let (qp, xp) = (q.as_ptr(), x.as_ptr());
            let mut acc = _mm512_setzero_ps();
            let mut offset = 0.0f32;
            let mask = _mm_set1_epi8(0x0f);
            match encoding {
                BlockEncoding::Q4_0 | BlockEncoding::Q4_1 => {
                    let with_min = encoding == BlockEncoding::Q4_1;
                    for i in 0..blocks {
                        let v = _mm_loadu_si128(qp.add(i * 16) as *const __m128i);
                        let lo = _mm_and_si128(v, mask);
                        let hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
                        let xb = xp.add(i * 32);
                        let dot = _mm512_fmadd_ps(widen(hi), _mm512_loadu_ps(xb.add(16)), _mm512_mul_ps(widen(lo), _mm512_loadu_ps(xb)));
                        if with_min {
                            acc = _mm512_fmadd_ps(_mm512_set1_ps(*s.get_unchecked(2 * i)), dot, acc);
                            offset += *s.get_unchecked(2 * i + 1) * *sums.get_unchecked(i);
                        } else {
                            let d = *s.get_unchecked(i);
                            acc = _mm512_fmadd_ps(_mm512_set1_ps(d), dot, acc);
                            offset -= 8.0 * d * *sums.get_unchecked(i);
                        }
                    }
                }
                BlockEncoding::Q8_0 => {
                    for i in 0..blocks {
                        let (qb, xb) = (qp.add(i * 32), xp.add(i * 32));
                        let lo = _mm_loadu_si128(qb as *const __m128i);
                        let hi = _mm_loadu_si128(qb.add(16) as *const __m128i);
                        let dot = _mm512_fmadd_ps(widen_signed(hi), _mm512_loadu_ps(xb.add(16)), _mm512_mul_ps(widen_signed(lo), _mm512_loadu_ps(xb)));
                        acc = _mm512_fmadd_ps(_mm512_set1_ps(*s.get_unchecked(i)), dot, acc);
                    }
                }
            }
            _mm512_reduce_add_ps(acc) + offset
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::BlockEncoding;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn widen(v: __m128i) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn widen_signed(v: __m128i) -> __m256 {
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
    }

    /// Σ q·x over one block of 32 nibbles (low halves are elements 0..16, high halves 16..32).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn nibbles_dot(qs: *const u8, x: *const f32) -> __m256 {
        unsafe {
            let q = _mm_loadu_si128(qs as *const __m128i);
            let mask = _mm_set1_epi8(0x0f);
            let lo = _mm_and_si128(q, mask);
            let hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
            let mut s = _mm256_mul_ps(widen(lo), _mm256_loadu_ps(x));
            s = _mm256_fmadd_ps(widen(_mm_srli_si128(lo, 8)), _mm256_loadu_ps(x.add(8)), s);
            s = _mm256_fmadd_ps(widen(hi), _mm256_loadu_ps(x.add(16)), s);
            _mm256_fmadd_ps(widen(_mm_srli_si128(hi, 8)), _mm256_loadu_ps(x.add(24)), s)
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_blocks(encoding: BlockEncoding, q: &[u8], s: &[f32], x: &[f32], sums: &[f32]) -> f32 {
        unsafe {
            let blocks = x.len() / 32;
            let (qp, xp) = (q.as_ptr(), x.as_ptr());
            let mut acc = _mm256_setzero_ps();
            let mut offset = 0.0f32;
            match encoding {
                BlockEncoding::Q4_1 => {
                    for i in 0..blocks {
                        let dot = nibbles_dot(qp.add(i * 16), xp.add(i * 32));
                        acc = _mm256_fmadd_ps(_mm256_set1_ps(*s.get_unchecked(2 * i)), dot, acc);
                        offset += *s.get_unchecked(2 * i + 1) * *sums.get_unchecked(i);
                    }
                }
                BlockEncoding::Q4_0 => {
                    for i in 0..blocks {
                        let d = *s.get_unchecked(i);
                        let dot = nibbles_dot(qp.add(i * 16), xp.add(i * 32));
                        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), dot, acc);
                        offset -= 8.0 * d * *sums.get_unchecked(i);
                    }
                }
                BlockEncoding::Q8_0 => {
                    for i in 0..blocks {
                        let (qb, xb) = (qp.add(i * 32), xp.add(i * 32));
                        let lo = _mm_loadu_si128(qb as *const __m128i);
                        let hi = _mm_loadu_si128(qb.add(16) as *const __m128i);
                        let mut dot = _mm256_mul_ps(widen_signed(lo), _mm256_loadu_ps(xb));
                        dot = _mm256_fmadd_ps(widen_signed(_mm_srli_si128(lo, 8)), _mm256_loadu_ps(xb.add(8)), dot);
                        dot = _mm256_fmadd_ps(widen_signed(hi), _mm256_loadu_ps(xb.add(16)), dot);
                        dot = _mm256_fmadd_ps(widen_signed(_mm_srli_si128(hi, 8)), _mm256_loadu_ps(xb.add(24)), dot);
                        acc = _mm256_fmadd_ps(_mm256_set1_ps(*s.get_unchecked(i)), dot, acc);
                    }
                }
            }
            hsum(acc) + offset
        }
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_f32(w: &[f32], x: &[f32]) -> f32 {
        unsafe {
            let n = x.len();
            let (wp, xp) = (w.as_ptr(), x.as_ptr());
            let mut acc = _mm256_setzero_ps();
            let mut i = 0;
            while i + 8 <= n {
                acc = _mm256_fmadd_ps(_mm256_loadu_ps(wp.add(i)), _mm256_loadu_ps(xp.add(i)), acc);
                i += 8;
            }
            let mut tail = 0.0;
            while i < n {
                tail += w[i] * x[i];
                i += 1;
            }
            hsum(acc) + tail
        }
    }
}
