//! Many-row products on Intel's AMX tiles (Sapphire Rapids and later Xeons), in bfloat16.
//!
//! The same arithmetic as the AVX-512 BF16 path (inputs and decoded weights rounded to bfloat16,
//! products and sums in f32), but one `tdpbf16ps` multiplies a 16 × 32 block by a 32 × 16 one:
//! 8,192 multiply-adds against AVX-512's 32 per instruction. Four accumulator tiles hold 32 input
//! rows by 32 weight rows; each step along the columns loads two input tiles and two weight tiles.
//! The intrinsics are unstable in Rust, so the instructions are written as inline assembly, and
//! Linux hands a process the tiles' register state only when asked (`arch_prctl`).

use std::arch::asm;
use std::arch::x86_64::__cpuid_count;
use std::sync::OnceLock;

use rayon::prelude::*;

use super::QuantMatrix;
use super::matmul::bf16::to_bf16_pairs;
use crate::dense_cpu::SharedOut;

/// Rows and pairs of columns in one tile (16 rows of 64 bytes).
const TILE: usize = 16;
/// Input rows per block: two tiles' worth.
const X_ROWS: usize = 2 * TILE;
/// Decoded weight rows a task aims to keep (as bfloat16), so that its panel sits in the
/// cache while every block of inputs passes it.
const PANEL_BYTES: usize = 1 << 20;

/// Whether this CPU has AMX tiles with bfloat16 products and the kernel lets this process use
/// them (asked once; the permission holds for every thread of the process).
pub(super) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        if !is_x86_feature_detected!("avx512bf16") {
            return false;
        }
        // Leaf 7 exists on every CPU with AVX-512 (checked above).
        let leaf = __cpuid_count(7, 0);
        let (amx_bf16, amx_tile) = (leaf.edx & (1 << 22) != 0, leaf.edx & (1 << 24) != 0);
        amx_bf16 && amx_tile && request_tile_state()
    })
}

/// Asks Linux for the tile data state (`ARCH_REQ_XCOMP_PERM`, `XFEATURE_XTILEDATA`); without it
/// the first tile instruction faults.
#[cfg(target_os = "linux")]
fn request_tile_state() -> bool {
    const SYS_ARCH_PRCTL: i64 = 158;
    const ARCH_REQ_XCOMP_PERM: i64 = 0x1023;
    const XFEATURE_XTILEDATA: i64 = 18;
    let ret: i64;
    // SAFETY: arch_prctl with this request only changes which register state the kernel saves
    // for this process; it reads and writes no memory of ours.
    unsafe {
        asm!("syscall", inlateout("rax") SYS_ARCH_PRCTL => ret, in("rdi") ARCH_REQ_XCOMP_PERM, in("rsi") XFEATURE_XTILEDATA,
            lateout("rcx") _, lateout("r11") _, options(nostack));
    }
    if ret != 0 {
        tracing::debug!(ret, "the kernel refused AMX tile state; prompt passes use AVX-512");
    }
    ret == 0
}

#[cfg(not(target_os = "linux"))]
fn request_tile_state() -> bool {
    false
}

/// The tile configuration: palette 1, eight tiles of 16 rows × 64 bytes.
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

impl TileConfig {
    fn full() -> TileConfig {
        let mut c = [0u8; 64];
        c[0] = 1;
        for t in 0..8 {
            c[16 + 2 * t..18 + 2 * t].copy_from_slice(&64u16.to_le_bytes());
            c[48 + t] = TILE as u8;
        }
        TileConfig(c)
    }
}

/// `x`'s rows rounded to bfloat16 pairs, `pairs` words a row (zero past the row's end), and
/// zero rows up to a multiple of 32.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pack_inputs(x: &[f32], m: usize, cols: usize, pairs: usize) -> Vec<u32> {
    let mut packed = vec![0u32; m.div_ceil(X_ROWS) * X_ROWS * pairs];
    packed.par_chunks_mut(pairs).take(m).enumerate().for_each_init(
        || vec![0.0f32; 2 * pairs],
        |row, (r, dst)| {
            row[..cols].copy_from_slice(&x[r * cols..(r + 1) * cols]);
            // SAFETY: the caller checked the features; row is 2 · pairs long, a multiple of 32.
            unsafe { to_bf16_pairs(row, dst) };
        },
    );
    packed
}

/// The tile step: `C[i][j] += A[i] · B[·][j]` over 16 pairs, for the four accumulators.
/// A tiles (tmm4, tmm5) are 16 input rows each, B tiles (tmm6, tmm7) 16 weight rows each.
///
/// # Safety
/// The tile configuration is loaded; `a` and `b` point at readable tiles: 16 rows `a_stride`
/// bytes apart (input tiles: the second 16 rows further on), weight tiles of 1,024 bytes.
#[inline(always)]
unsafe fn step(a0: *const u32, a1: *const u32, a_stride: usize, b0: *const u32, b1: *const u32) {
    const B_STRIDE: usize = 64;
    // SAFETY: the caller's promise; tiles are registers Rust does not allocate.
    unsafe {
        asm!(
            "tileloadd tmm4, [{a0} + {sa}*1]",
            "tileloadd tmm5, [{a1} + {sa}*1]",
            "tileloadd tmm6, [{b0} + {sb}*1]",
            "tileloadd tmm7, [{b1} + {sb}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            a0 = in(reg) a0,
            a1 = in(reg) a1,
            b0 = in(reg) b0,
            b1 = in(reg) b1,
            sa = in(reg) a_stride,
            sb = in(reg) B_STRIDE,
            options(nostack, readonly),
        );
    }
}

/// Weight rows of one panel as bfloat16 pairs in the tiles' layout: per group of 16 rows, per
/// pair of columns, the 16 rows' words side by side (rows past the matrix are zero).
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn decode_weights(w: &QuantMatrix, first: usize, groups: usize, padded: usize, decoded: &mut [f32], words: &mut [u32], tiled: &mut [u32]) {
    let pairs = padded / 2;
    for g in 0..groups {
        w.decode_panel(first + g * TILE, TILE, padded, decoded);
        // SAFETY: the caller checked the features; decoded holds 16 rows of `padded` values.
        unsafe { to_bf16_pairs(decoded, words) };
        let group = &mut tiled[g * pairs * TILE..(g + 1) * pairs * TILE];
        for (row, src) in words.chunks_exact(pairs).enumerate() {
            for (p, &word) in src.iter().enumerate() {
                group[p * TILE + row] = word;
            }
        }
    }
}

/// `out[m × rows] = x[m × cols] · Wᵀ` (plus `out` when `accumulate`) on AMX tiles.
///
/// # Safety
/// `available()` returned true; `x` is m × cols and `out` m × rows.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn matmul(w: &QuantMatrix, x: &[f32], m: usize, out: &mut [f32], accumulate: bool) {
    let (rows, cols) = (w.rows, w.cols);
    let padded = cols.div_ceil(32) * 32;
    let pairs = padded / 2;
    // Pairs of 16-row groups: 128 to 256 rows a panel, as many as fit PANEL_BYTES (fewer panels
    // mean fewer passes over the inputs, which a long prompt's wide products feel).
    let groups = (PANEL_BYTES / (2 * TILE * padded * 2)).clamp(4, 8) * 2;
    // SAFETY: same features as this function.
    let inputs = unsafe { pack_inputs(x, m, cols, pairs) };
    let out_ptr = SharedOut(out.as_mut_ptr());
    let a_stride = pairs * 4;
    (0..rows.div_ceil(groups * TILE)).into_par_iter().for_each_init(
        || (vec![0.0f32; TILE * padded], vec![0u32; TILE * pairs], vec![0u32; groups * TILE * pairs]),
        |(decoded, words, tiled), panel| {
            let first = panel * groups * TILE;
            let live_rows = (groups * TILE).min(rows - first);
            let live_groups = live_rows.div_ceil(TILE).next_multiple_of(2);
            // SAFETY: features as above; the buffers hold 16 rows and `groups` groups.
            unsafe { decode_weights(w, first, live_groups, padded, decoded, words, tiled) };
            let config = TileConfig::full();
            let mut acc = [0.0f32; 4 * TILE * TILE];
            // SAFETY: the configuration is 64 aligned bytes of palette 1.
            unsafe { asm!("ldtilecfg [{}]", in(reg) config.0.as_ptr(), options(nostack, readonly)) };
            for (b, block) in inputs.chunks_exact(X_ROWS * pairs).enumerate() {
                for g in (0..live_groups).step_by(2) {
                    let w0 = tiled[g * pairs * TILE..].as_ptr();
                    let w1 = tiled[(g + 1) * pairs * TILE..].as_ptr();
                    // SAFETY: tiles are configured; each step reads 16 pairs of 16 input rows
                    // (of 32 in the block) and of 16 weight rows (of a group), inside the buffers.
                    unsafe {
                        asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
                        for s in (0..pairs).step_by(TILE) {
                            let a0 = block.as_ptr().add(s);
                            step(a0, a0.add(TILE * pairs), a_stride, w0.add(s * TILE), w1.add(s * TILE));
                        }
                        let c = acc.as_mut_ptr();
                        asm!(
                            "tilestored [{c0} + {s}*1], tmm0",
                            "tilestored [{c1} + {s}*1], tmm1",
                            "tilestored [{c2} + {s}*1], tmm2",
                            "tilestored [{c3} + {s}*1], tmm3",
                            c0 = in(reg) c,
                            c1 = in(reg) c.add(TILE * TILE),
                            c2 = in(reg) c.add(2 * TILE * TILE),
                            c3 = in(reg) c.add(3 * TILE * TILE),
                            s = in(reg) TILE * 4,
                            options(nostack),
                        );
                    }
                    // Accumulator t holds input half t / 2 by weight group g + t % 2.
                    for (t, tile) in acc.chunks_exact(TILE * TILE).enumerate() {
                        let col0 = first + (g + t % 2) * TILE;
                        let live_cols = TILE.min((first + live_rows).saturating_sub(col0));
                        for (i, lanes) in tile.chunks_exact(TILE).enumerate() {
                            let row = b * X_ROWS + (t / 2) * TILE + i;
                            if row >= m {
                                break;
                            }
                            for (j, v) in lanes.iter().enumerate().take(live_cols) {
                                // SAFETY: row < m and col0 + j < rows lie in out; each task
                                // writes only its own panel's columns.
                                unsafe {
                                    let o = out_ptr.at(row * rows + col0 + j);
                                    *o = if accumulate { *o + v } else { *v };
                                }
                            }
                        }
                    }
                }
            }
            // SAFETY: releases this thread's tile state.
            unsafe { asm!("tilerelease", options(nostack, nomem)) };
        },
    );
}
