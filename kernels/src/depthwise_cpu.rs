//! Depthwise convolutions (one filter per channel) on the CPU.
//!
//! Each plane is first copied into a padded scratch, split by column phase when the stride
//! skips columns, so that every filter tap reads a contiguous run of the scratch whatever the
//! padding, stride or dilation. Each output row is then summed sixteen columns at a time with
//! every tap accumulated in registers: the recogniser's planes are a few rows of some hundred
//! columns, where summing row slice by row slice spent its time starting short loops and
//! writing partial sums back.

use rayon::prelude::*;

use crate::conv_cpu::{ConvShape, PlaneEpilogue};

/// Output columns summed together: four AVX-512 registers (eight AVX2 ones), whose sums over
/// the taps run side by side; one register's sum alone waits on each addition in turn.
const BLOCK: usize = 64;
/// The narrower block that finishes a row.
// Products and sums stay separate (no fused multiply-add): without the FMA feature
// `mul_add` is a call into a software routine.
const TAIL_BLOCK: usize = 16;

/// `out` (`n`·`c` planes of `oh` × `ow`) = each input plane (`h` × `w` of `x`) convolved with
/// its channel's filter (`weight`, `c` × `kh` × `kw`), then `epilogue` on the plane.
#[allow(clippy::too_many_arguments)]
pub(crate) fn depthwise(x: &[f32], h: usize, w: usize, weight: &[f32], s: &ConvShape, (oh, ow): (usize, usize), out: &mut [f32], epilogue: PlaneEpilogue<'_>) {
    let taps = s.kh * s.kw;
    let geometry = Scratch::new(h, w, s);
    let offsets: Vec<usize> = (0..taps).map(|t| geometry.tap_offset(t / s.kw, t % s.kw, s)).collect();
    out.par_chunks_mut(oh * ow).enumerate().for_each_init(Vec::new, |scratch, (i, dst)| {
        let c = i % s.c_out;
        geometry.fill(&x[i * h * w..(i + 1) * h * w], h, w, s, scratch);
        let filter = &weight[c * taps..(c + 1) * taps];
        sum_rows(dst, ow, scratch, s.stride.0 * geometry.phase_width, &offsets, filter);
        epilogue(c, dst);
    });
}

/// Where a plane's values sit once padded and split into `phases` planes of `rows` ×
/// `phase_width` (column `j` of the padded plane is column `j / phases` of phase `j % phases`).
#[derive(Clone, Copy)]
struct Scratch {
    rows: usize,
    phases: usize,
    phase_width: usize,
}

impl Scratch {
    fn new(h: usize, w: usize, s: &ConvShape) -> Scratch {
        let phases = s.stride.1.max(1);
        let padded_width = w + s.pad_begin.1 + s.pad_end.1;
        Scratch { rows: h + s.pad_begin.0 + s.pad_end.0, phases, phase_width: padded_width.div_ceil(phases) }
    }

    /// Where tap (`ky`, `kx`) reads for output (0, 0); output (oy, ox) adds oy·stride rows and ox.
    fn tap_offset(&self, ky: usize, kx: usize, s: &ConvShape) -> usize {
        let column = kx * s.dilation.1;
        let phase = column % self.phases;
        (phase * self.rows + ky * s.dilation.0) * self.phase_width + column / self.phases
    }

    /// Copies `plane` (`h` × `w`) into `scratch`, zeros around it and a tail block's worth of
    /// zeros after it, so that a row's last block may read past the row's end.
    fn fill(&self, plane: &[f32], h: usize, w: usize, s: &ConvShape, scratch: &mut Vec<f32>) {
        scratch.clear();
        scratch.resize(self.phases * self.rows * self.phase_width + TAIL_BLOCK, 0.0);
        for (iy, src) in plane.chunks_exact(w.max(1)).take(h).enumerate() {
            let row = iy + s.pad_begin.0;
            if self.phases == 1 {
                let at = row * self.phase_width + s.pad_begin.1;
                scratch[at..at + w].copy_from_slice(src);
                continue;
            }
            for phase in 0..self.phases {
                // Padded columns phase, phase + phases, ...: input columns from the first of them
                // at or past the padding.
                let first = s.pad_begin.1.saturating_sub(phase).div_ceil(self.phases);
                let Some(ix0) = (first * self.phases + phase).checked_sub(s.pad_begin.1) else { continue };
                let line = &mut scratch[(phase * self.rows + row) * self.phase_width..][..self.phase_width];
                for (d, &v) in line[first..].iter_mut().zip(src.iter().skip(ix0).step_by(self.phases)) {
                    *d = v;
                }
            }
        }
    }
}

/// Each row `oy` of `dst` (rows of `ow`): `dst[oy][ox]` = Σ over taps of `filter[t]` ·
/// `scratch[oy·row_step + offsets[t] + ox]`.
fn sum_rows(dst: &mut [f32], ow: usize, scratch: &[f32], row_step: usize, offsets: &[usize], filter: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the feature the function is compiled for was just detected.
            unsafe { sum_rows_avx512(dst, ow, scratch, row_step, offsets, filter) };
            return;
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: as above.
            unsafe { sum_rows_avx2(dst, ow, scratch, row_step, offsets, filter) };
            return;
        }
    }
    sum_rows_portable(dst, ow, scratch, row_step, offsets, filter);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn sum_rows_avx512(dst: &mut [f32], ow: usize, scratch: &[f32], row_step: usize, offsets: &[usize], filter: &[f32]) {
    sum_rows_portable(dst, ow, scratch, row_step, offsets, filter);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn sum_rows_avx2(dst: &mut [f32], ow: usize, scratch: &[f32], row_step: usize, offsets: &[usize], filter: &[f32]) {
    sum_rows_portable(dst, ow, scratch, row_step, offsets, filter);
}

#[inline(always)]
fn sum_rows_portable(dst: &mut [f32], ow: usize, scratch: &[f32], row_step: usize, offsets: &[usize], filter: &[f32]) {
    for (oy, line) in dst.chunks_exact_mut(ow).enumerate() {
        let row_start = oy * row_step;
        let mut x0 = 0;
        while x0 + BLOCK <= ow {
            let acc = sum_block::<BLOCK>(scratch, row_start + x0, offsets, filter);
            line[x0..x0 + BLOCK].copy_from_slice(&acc);
            x0 += BLOCK;
        }
        while x0 < ow {
            // The last block of a row may sum columns past its end; they are dropped.
            let acc = sum_block::<TAIL_BLOCK>(scratch, row_start + x0, offsets, filter);
            let kept = TAIL_BLOCK.min(ow - x0);
            line[x0..x0 + kept].copy_from_slice(&acc[..kept]);
            x0 += TAIL_BLOCK;
        }
    }
}

/// `N` outputs from `start`: Σ over taps of `filter[t]` · `scratch[start + offsets[t] ..][..N]`.
#[inline(always)]
fn sum_block<const N: usize>(scratch: &[f32], start: usize, offsets: &[usize], filter: &[f32]) -> [f32; N] {
    let mut acc = [0.0f32; N];
    for (&offset, &tap) in offsets.iter().zip(filter) {
        let src: &[f32; N] = scratch[start + offset..start + offset + N].try_into().expect("the scratch has a block past every row");
        for (a, &v) in acc.iter_mut().zip(src) {
            *a += tap * v;
        }
    }
    acc
}
