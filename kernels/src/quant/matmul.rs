//! Block-encoded weights times many rows (a prompt pass): `out[m × rows] = x[m × cols] · Wᵀ`.
//!
//! Each weight row is decoded once per product and then meets every input row, so decoding
//! costs little beside the arithmetic once there are a few dozen rows. Three ways:
//! - `RowByRow`: one matrix-vector product per input row, reading the blocks directly (best
//!   for a handful of rows, where decoding a panel would cost more than it saves);
//! - `F32Panels`: panels of 64 decoded weight rows through the `gemm` crate;
//! - `Int8Rows`: each input row rounded to 8-bit integers once, then met by a few weight rows
//!   at a time in AVX2's integer kernels (`dot_avx2_int8`; Q4_0 and Q4_1 rows take the float
//!   kernels): on a CPU without AVX-512, four byte products per float one;
//! - `Bf16`: panels of 12 decoded rows rounded to bfloat16 and multiplied with AVX-512 BF16's
//!   pairwise dot products (twice the f32 rate; products and sums stay f32);
//! - `Amx`: the same rounding on AMX tiles (`matmul_amx`), where the CPU and kernel allow them.

use std::sync::atomic::{AtomicU8, Ordering};

use gemm::{Parallelism, gemm};
use rayon::prelude::*;

use super::{CpuPath, QuantMatrix};
use crate::dense_cpu::SharedOut;

/// How a many-row product runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatmulPath {
    RowByRow,
    F32Panels,
    Int8Rows,
    Bf16,
    Amx,
}

/// The path `MatmulPath::prefer` chose: 0 for none, else its index in `ALL` plus one.
static PREFERRED: AtomicU8 = AtomicU8::new(0);

/// Below this many input rows, products go row by row.
const ROW_BY_ROW_BELOW: usize = 8;

impl MatmulPath {
    /// Every path this CPU runs.
    pub fn available() -> Vec<MatmulPath> {
        let mut paths = vec![MatmulPath::RowByRow, MatmulPath::F32Panels];
        if CpuPath::available().contains(&CpuPath::Avx2) {
            paths.push(MatmulPath::Int8Rows);
        }
        #[cfg(target_arch = "x86_64")]
        if CpuPath::available().contains(&CpuPath::Avx512) && is_x86_feature_detected!("avx512bf16") {
            paths.push(MatmulPath::Bf16);
            if super::matmul_amx::available() {
                paths.push(MatmulPath::Amx);
            }
        }
        paths
    }

    /// The path for a product with `m` input rows: the fastest this CPU has, unless
    /// `prefer` chose another.
    pub fn for_rows(m: usize) -> MatmulPath {
        static BEST: std::sync::OnceLock<MatmulPath> = std::sync::OnceLock::new();
        if m < ROW_BY_ROW_BELOW {
            return MatmulPath::RowByRow;
        }
        let best = *BEST.get_or_init(|| *MatmulPath::available().last().unwrap_or(&MatmulPath::F32Panels));
        match PREFERRED.load(Ordering::Relaxed) {
            0 => best,
            n => MatmulPath::ALL.get(usize::from(n) - 1).copied().unwrap_or(best),
        }
    }

    /// Makes every later many-row product in this process take `path` (None: the fastest), so
    /// that `bench generate` can measure each path side by side; a path the CPU lacks runs as
    /// f32 panels.
    pub fn prefer(path: Option<MatmulPath>) {
        let n = path.and_then(|p| MatmulPath::ALL.iter().position(|&q| q == p)).map_or(0, |i| i as u8 + 1);
        PREFERRED.store(n, Ordering::Relaxed);
    }

    /// Every path, in declaration order.
    const ALL: [MatmulPath; 5] = [MatmulPath::RowByRow, MatmulPath::F32Panels, MatmulPath::Int8Rows, MatmulPath::Bf16, MatmulPath::Amx];
}

impl QuantMatrix {
    /// `out[m × rows] = x[m × cols] · Wᵀ`, plus `out`'s previous contents when `accumulate`
    /// (a residual connection added without another pass), on the best path for `m` rows.
    pub fn matmul(&self, x: &[f32], m: usize, out: &mut [f32], accumulate: bool) {
        let mut path = MatmulPath::for_rows(m);
        // The integer rows pay off only where the integer kernels read the blocks (f32 rows
        // go in panels).
        if path == MatmulPath::Int8Rows
            && !self.parts.iter().any(|p| matches!(p.storage, super::Storage::Blocks { encoding, .. } if super::dot::int8_rows(encoding, self.cols)))
        {
            path = MatmulPath::F32Panels;
        }
        self.matmul_on(path, x, m, out, accumulate);
    }

    /// The same on a chosen path (tests compare them); a path the CPU lacks, or a bfloat16 path
    /// given an odd width, runs as f32 panels.
    pub fn matmul_on(&self, path: MatmulPath, x: &[f32], m: usize, out: &mut [f32], accumulate: bool) {
        assert_eq!(x.len(), m * self.cols, "x is m × cols");
        assert_eq!(out.len(), m * self.rows, "out is m × rows");
        if m == 0 || self.rows == 0 {
            return;
        }
        let path = if MatmulPath::available().contains(&path) && (!matches!(path, MatmulPath::Bf16 | MatmulPath::Amx) || self.cols.is_multiple_of(2)) {
            path
        } else {
            MatmulPath::F32Panels
        };
        match path {
            MatmulPath::RowByRow => {
                let mut row = vec![0.0; self.rows];
                for (x, out) in x.chunks_exact(self.cols).zip(out.chunks_exact_mut(self.rows)) {
                    self.matvec(x, &mut row);
                    if accumulate {
                        out.iter_mut().zip(&row).for_each(|(o, r)| *o += r);
                    } else {
                        out.copy_from_slice(&row);
                    }
                }
            }
            MatmulPath::F32Panels => self.matmul_f32(x, m, out, accumulate),
            MatmulPath::Int8Rows => self.matmul_rows(CpuPath::Avx2, x, out, accumulate),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: AVX-512 F/BW/BF16 were detected (`available`); cols is even.
            MatmulPath::Bf16 => unsafe { bf16::matmul(self, x, m, out, accumulate) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: AMX tiles and AVX-512 BF16 were detected and granted (`available`).
            MatmulPath::Amx => unsafe { super::matmul_amx::matmul(self, x, m, out, accumulate) },
            #[cfg(not(target_arch = "x86_64"))]
            MatmulPath::Bf16 | MatmulPath::Amx => self.matmul_f32(x, m, out, accumulate),
        }
    }

    /// Rows `first..first + n` decoded into `panel`, row j at `j · stride`; rows past the
    /// matrix's end are zero, and each row's values past `cols` are left as they are.
    pub(super) fn decode_panel(&self, first: usize, n: usize, stride: usize, panel: &mut [f32]) {
        let cols = self.cols;
        for (j, row) in panel.chunks_mut(stride).take(n).enumerate() {
            let row = &mut row[..cols];
            if first + j < self.rows {
                let (part, r) = self.locate(first + j);
                part.row_into(r, cols, row, CpuPath::best());
            } else {
                row.fill(0.0);
            }
        }
    }

    /// Every input row against groups of weight rows on the matrix-vector kernels of `path`,
    /// each input prepared (summed, rounded) once for all rows.
    fn matmul_rows(&self, path: CpuPath, x: &[f32], out: &mut [f32], accumulate: bool) {
        // A task's weight rows (16 of 1,536 Q4_K weights: 14 KiB) stay in the core's cache
        // while every input row meets them.
        const ROWS_PER_TASK: usize = 16;
        let (rows, cols) = (self.rows, self.cols);
        let inputs: Vec<super::dot::Input<'_>> = x.par_chunks(cols).map(|row| super::dot::Input::new(row, path)).collect();
        let out_ptr = SharedOut(out.as_mut_ptr());
        (0..rows.div_ceil(ROWS_PER_TASK)).into_par_iter().for_each_init(Vec::new, |dots: &mut Vec<f32>, task| {
            let first = task * ROWS_PER_TASK;
            let n = ROWS_PER_TASK.min(rows - first);
            // Four input rows at a time (then 2, 1): each weight is decoded once for all of
            // them. Eight at a time measured no faster (the accumulators no longer fit the
            // sixteen registers).
            let mut start = 0;
            while start < inputs.len() {
                let k = [4, 2, 1].into_iter().find(|&k| k <= inputs.len() - start).unwrap_or(1);
                // Each output row's n columns are one cache line of a large output, seldom
                // still cached: fetched while the products run, then written row by row
                // (written as they came, input by input across the rows, the stores waited on
                // memory: a twentieth of a long prompt's pass).
                for i in 0..k {
                    // SAFETY: input row start + i < m and column first < rows lie in out.
                    super::prefetch(unsafe { out_ptr.at((start + i) * rows + first) }.cast());
                }
                dots.resize(n * k, 0.0);
                self.dot_range(first, &inputs[start..start + k], path, dots);
                for i in 0..k {
                    // SAFETY: columns first..first + n of input row start + i lie in out
                    // (m × rows), and no other task writes these columns.
                    let row = unsafe { std::slice::from_raw_parts_mut(out_ptr.at((start + i) * rows + first), n) };
                    for (j, o) in row.iter_mut().enumerate() {
                        let v = dots[j * k + i];
                        *o = if accumulate { *o + v } else { v };
                    }
                }
                start += k;
            }
        });
    }

    fn matmul_f32(&self, x: &[f32], m: usize, out: &mut [f32], accumulate: bool) {
        const PANEL: usize = 64;
        let (rows, cols) = (self.rows, self.cols);
        let out_ptr = SharedOut(out.as_mut_ptr());
        (0..rows.div_ceil(PANEL)).into_par_iter().for_each_init(Vec::new, |panel: &mut Vec<f32>, p| {
            let first = p * PANEL;
            let n = PANEL.min(rows - first);
            panel.resize(n * cols, 0.0);
            self.decode_panel(first, n, cols, panel);
            // SAFETY: x is m × cols and the panel n × cols (row-major, read transposed); each
            // task writes only columns first..first + n of out (m × rows), so tasks are disjoint.
            unsafe {
                gemm(
                    m,
                    n,
                    cols,
                    out_ptr.at(first),
                    1,
                    rows as isize,
                    accumulate,
                    x.as_ptr(),
                    1,
                    cols as isize,
                    panel.as_ptr(),
                    cols as isize,
                    1,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    Parallelism::None,
                );
            }
        });
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod bf16 {
    use std::arch::x86_64::*;

    use rayon::prelude::*;

    use super::QuantMatrix;
    use crate::dense_cpu::SharedOut;

    /// Weight rows per panel and input rows per block: 12 × 2 accumulators of 16 lanes.
    const W_ROWS: usize = 12;
    const X_ROWS: usize = 32;

    /// `values` (a multiple of 32 long) rounded to bfloat16, two per u32 (the lower index in
    /// the lower half), into `out`.
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub(in crate::quant) unsafe fn to_bf16_pairs(values: &[f32], out: &mut [u32]) {
        unsafe {
            let (vp, op) = (values.as_ptr(), out.as_mut_ptr());
            for i in 0..values.len() / 32 {
                let lo = _mm512_loadu_ps(vp.add(32 * i));
                let hi = _mm512_loadu_ps(vp.add(32 * i + 16));
                let packed: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
                _mm512_storeu_si512(op.add(16 * i) as *mut __m512i, packed);
            }
        }
    }

    /// `x`'s rows rounded to bfloat16 and laid out for the kernel: per block of 32 rows, per
    /// pair of columns, the 32 rows' pairs side by side (rows past m are zero).
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    unsafe fn pack_inputs(x: &[f32], m: usize, cols: usize) -> Vec<u32> {
        let pairs = cols / 2;
        let padded = cols.div_ceil(32) * 32;
        let mut packed = vec![0u32; m.div_ceil(X_ROWS) * pairs * X_ROWS];
        packed.par_chunks_mut(pairs * X_ROWS).enumerate().for_each_init(
            || (vec![0.0f32; padded], vec![0u32; padded / 2]),
            |(row, words), (block, dst)| {
                for lane in 0..X_ROWS.min(m - block * X_ROWS) {
                    let r = block * X_ROWS + lane;
                    row[..cols].copy_from_slice(&x[r * cols..(r + 1) * cols]);
                    // SAFETY: the caller checked the features; row is a multiple of 32 long.
                    unsafe { to_bf16_pairs(row, words) };
                    for (p, &w) in words[..pairs].iter().enumerate() {
                        dst[p * X_ROWS + lane] = w;
                    }
                }
            },
        );
        packed
    }

    /// Σ over `pairs` pairs of W_ROWS weight rows (`w`, row-major, rows `stride` apart) times
    /// one block of 32 packed input rows: `acc[j][h]` lane i is weight row j · input row 16h + i.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    unsafe fn block(w: *const u32, xb: *const u32, pairs: usize, stride: usize) -> [[__m512; 2]; W_ROWS] {
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); 2]; W_ROWS];
            for p in 0..pairs {
                let xa: __m512bh = std::mem::transmute(_mm512_loadu_si512(xb.add(p * X_ROWS) as *const __m512i));
                let xc: __m512bh = std::mem::transmute(_mm512_loadu_si512(xb.add(p * X_ROWS + 16) as *const __m512i));
                for (j, acc) in acc.iter_mut().enumerate() {
                    let wj: __m512bh = std::mem::transmute(_mm512_set1_epi32(*w.add(j * stride + p) as i32));
                    acc[0] = _mm512_dpbf16_ps(acc[0], wj, xa);
                    acc[1] = _mm512_dpbf16_ps(acc[1], wj, xc);
                }
            }
            acc
        }
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
    pub unsafe fn matmul(w: &QuantMatrix, x: &[f32], m: usize, out: &mut [f32], accumulate: bool) {
        let (rows, cols) = (w.rows, w.cols);
        let pairs = cols / 2;
        let padded = cols.div_ceil(32) * 32;
        // SAFETY: same features as this function.
        let inputs = unsafe { pack_inputs(x, m, cols) };
        let out_ptr = SharedOut(out.as_mut_ptr());
        (0..rows.div_ceil(W_ROWS)).into_par_iter().for_each_init(
            || (vec![0.0f32; padded * W_ROWS], vec![0u32; padded / 2 * W_ROWS]),
            |(decoded, words), panel| {
                let first = panel * W_ROWS;
                let n = W_ROWS.min(rows - first);
                w.decode_panel(first, W_ROWS, padded, decoded);
                // SAFETY: features as above; decoded and words hold W_ROWS rows of `padded`
                // values (the tail of each row past cols stays zero).
                unsafe { to_bf16_pairs(decoded, words) };
                for (b, xb) in inputs.chunks_exact(pairs * X_ROWS).enumerate() {
                    // SAFETY: words holds W_ROWS rows of `pairs` pairs, xb one block of inputs.
                    let acc = unsafe { block(words.as_ptr(), xb.as_ptr(), pairs, padded / 2) };
                    let live = X_ROWS.min(m - b * X_ROWS);
                    for (j, acc) in acc.iter().enumerate().take(n) {
                        let mut lanes = [0.0f32; X_ROWS];
                        // SAFETY: lanes holds 32 f32.
                        unsafe {
                            _mm512_storeu_ps(lanes.as_mut_ptr(), acc[0]);
                            _mm512_storeu_ps(lanes.as_mut_ptr().add(16), acc[1]);
                        }
                        for (i, v) in lanes.iter().enumerate().take(live) {
                            // SAFETY: row b·32 + i < m and column first + j < rows lie in out;
                            // each panel task writes only its own columns.
                            unsafe {
                                let o = out_ptr.at((b * X_ROWS + i) * rows + first + j);
                                *o = if accumulate { *o + v } else { *v };
                            }
                        }
                    }
                }
            },
        );
    }
}
