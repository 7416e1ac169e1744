//! llama.cpp's block encodings as GGUF stores them, and their repacking into the layouts the
//! matrix kernels read.
//!
//! Every encoding here decodes, per run of 32 weights (a "sub-block"), to `w = s · q + m` or
//! `w = s · q` with small integer q. The repacked layouts keep that structure, with the f16
//! scales widened to f32 once at load and the bits of each sub-block laid out so that 16
//! consecutive weights come from 16 consecutive bytes (or nibbles): what one 512-bit register
//! takes.

use half::f16;

/// A block encoding of weights (ggml's types).
// ggml's own names (Q4_K, Q6_K), as every GGUF tool spells them.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockEncoding {
    /// 32 weights: scale d, 16 bytes of nibbles; w = (q − 8) d.
    Q4_0,
    /// 32 weights: scale d and minimum m, 16 bytes of nibbles; w = q d + m.
    Q4_1,
    /// 32 weights: scale d, 32 fifth bits, 16 bytes of nibbles; w = (q − 16) d.
    Q5_0,
    /// 32 weights: scale d, 32 signed bytes; w = q d.
    Q8_0,
    /// 256 weights: scales d and dmin, eight 6-bit (scale, min) pairs, 128 bytes of nibbles;
    /// w = d·sc q − dmin·m per run of 32.
    Q4_K,
    /// 256 weights: scale d, sixteen signed 8-bit scales, 6-bit quants in two planes;
    /// w = d·sc (q − 32) per run of 16.
    Q6_K,
}

impl BlockEncoding {
    /// Every encoding, for tests and error messages.
    pub const ALL: [BlockEncoding; 6] =
        [BlockEncoding::Q4_0, BlockEncoding::Q4_1, BlockEncoding::Q5_0, BlockEncoding::Q8_0, BlockEncoding::Q4_K, BlockEncoding::Q6_K];

    /// Weights per block in the GGUF layout.
    pub fn block_weights(self) -> usize {
        match self {
            BlockEncoding::Q4_K | BlockEncoding::Q6_K => 256,
            _ => 32,
        }
    }

    /// Bytes of one block in the GGUF layout.
    pub fn gguf_block_bytes(self) -> usize {
        match self {
            BlockEncoding::Q4_0 => 18,
            BlockEncoding::Q4_1 => 20,
            BlockEncoding::Q5_0 => 22,
            BlockEncoding::Q8_0 => 34,
            BlockEncoding::Q4_K => 144,
            BlockEncoding::Q6_K => 210,
        }
    }

    /// f32 scales per block in the repacked layout.
    pub(crate) fn scales_per_block(self) -> usize {
        match self {
            BlockEncoding::Q4_1 | BlockEncoding::Q4_K => 2,
            _ => 1,
        }
    }

    /// Bytes per block in the repacked layout.
    pub(crate) fn packed_bytes(self) -> usize {
        match self {
            BlockEncoding::Q4_0 | BlockEncoding::Q4_1 => 16,
            BlockEncoding::Q5_0 => 20,
            BlockEncoding::Q8_0 => 32,
            // Eight scales, eight minimums, then eight runs of 16 nibble bytes.
            BlockEncoding::Q4_K => 16 + 8 * 16,
            // Sixteen signed scales, then per pair of runs 32 low-nibble bytes (16 a run) and 16
            // top-bit bytes (8 a run): see `q6k_run`.
            BlockEncoding::Q6_K => 16 + 8 * 24,
        }
    }
}

/// Where run `j` (0..8) of a repacked Q6_K block keeps its 16 nibble bytes and its 8 top-bit
/// bytes: a pair of runs' nibbles lie side by side, then their top bits, so one load takes each.
pub(crate) fn q6k_run(j: usize) -> (usize, usize) {
    let (pair, half) = (j / 2, j % 2);
    (16 + 48 * pair + 16 * half, 16 + 48 * pair + 32 + 8 * half)
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// Q4_K's six-bit scale and minimum of run `j` (0..8), as ggml's `get_scale_min_k4` reads them.
fn q4k_scale_min(scales: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        ((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4), (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))
    }
}

/// The 256 six-bit quants (0..64) of a Q6_K block, in weight order.
fn q6k_quants(b: &[u8]) -> [u8; 256] {
    let (ql, qh) = (&b[..128], &b[128..192]);
    let mut q = [0u8; 256];
    for half in 0..2 {
        let (ql, qh, q) = (&ql[64 * half..], &qh[32 * half..], &mut q[128 * half..]);
        for l in 0..32 {
            q[l] = (ql[l] & 0x0f) | ((qh[l] & 3) << 4);
            q[l + 32] = (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4);
            q[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
            q[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
        }
    }
    q
}

/// The 256 four-bit quants of a Q4_K block, in weight order.
fn q4k_quants(qs: &[u8]) -> [u8; 256] {
    let mut q = [0u8; 256];
    for (group, bytes) in qs.chunks_exact(32).enumerate() {
        for (l, &v) in bytes.iter().enumerate() {
            q[64 * group + l] = v & 0x0f;
            q[64 * group + 32 + l] = v >> 4;
        }
    }
    q
}

/// Decodes whole GGUF blocks of `raw` and appends the weights to `out`.
pub fn dequantize_gguf(encoding: BlockEncoding, raw: &[u8], out: &mut Vec<f32>) {
    for b in raw.chunks_exact(encoding.gguf_block_bytes()) {
        match encoding {
            BlockEncoding::Q4_0 => {
                let d = f16_at(b, 0);
                out.extend(b[2..18].iter().map(|q| (f32::from(q & 0x0f) - 8.0) * d));
                out.extend(b[2..18].iter().map(|q| (f32::from(q >> 4) - 8.0) * d));
            }
            BlockEncoding::Q4_1 => {
                let (d, m) = (f16_at(b, 0), f16_at(b, 2));
                out.extend(b[4..20].iter().map(|q| f32::from(q & 0x0f) * d + m));
                out.extend(b[4..20].iter().map(|q| f32::from(q >> 4) * d + m));
            }
            BlockEncoding::Q5_0 => {
                let d = f16_at(b, 0);
                let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
                let value = |q: u32| (q as f32 - 16.0) * d;
                out.extend(b[6..22].iter().enumerate().map(|(j, q)| value(u32::from(q & 0x0f) | (((qh >> j) & 1) << 4))));
                out.extend(b[6..22].iter().enumerate().map(|(j, q)| value(u32::from(q >> 4) | (((qh >> (j + 16)) & 1) << 4))));
            }
            BlockEncoding::Q8_0 => {
                let d = f16_at(b, 0);
                out.extend(b[2..34].iter().map(|&q| f32::from(q as i8) * d));
            }
            BlockEncoding::Q4_K => {
                let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
                let q = q4k_quants(&b[16..144]);
                for (j, run) in q.chunks_exact(32).enumerate() {
                    let (sc, m) = q4k_scale_min(&b[4..16], j);
                    let (s, m) = (d * f32::from(sc), dmin * f32::from(m));
                    out.extend(run.iter().map(|&q| s * f32::from(q) - m));
                }
            }
            BlockEncoding::Q6_K => {
                let d = f16_at(b, 208);
                let q = q6k_quants(b);
                for (run, &sc) in q.chunks_exact(16).zip(&b[192..208]) {
                    let s = d * f32::from(sc as i8);
                    out.extend(run.iter().map(|&q| s * (f32::from(q) - 32.0)));
                }
            }
        }
    }
}

/// Sixteen nibbles (values 0..16) of a run of 32 in the packed order: byte i holds weight i in
/// its low half and weight i + 16 in its high half.
fn pack_nibbles(q: &[u8], out: &mut Vec<u8>) {
    out.extend((0..16).map(|i| (q[i] & 0x0f) | (q[i + 16] << 4)));
}

/// Repacks whole GGUF blocks into the kernels' layout, appending f32 scales and bytes.
pub(crate) fn repack_gguf(encoding: BlockEncoding, raw: &[u8], scales: &mut Vec<f32>, quants: &mut Vec<u8>) {
    for b in raw.chunks_exact(encoding.gguf_block_bytes()) {
        match encoding {
            BlockEncoding::Q4_0 | BlockEncoding::Q8_0 => {
                scales.push(f16_at(b, 0));
                quants.extend_from_slice(&b[2..]);
            }
            BlockEncoding::Q4_1 => {
                scales.extend([f16_at(b, 0), f16_at(b, 2)]);
                quants.extend_from_slice(&b[4..]);
            }
            BlockEncoding::Q5_0 => {
                scales.push(f16_at(b, 0));
                quants.extend_from_slice(&b[2..]);
            }
            BlockEncoding::Q4_K => {
                scales.extend([f16_at(b, 0), f16_at(b, 2)]);
                let pairs: Vec<(u8, u8)> = (0..8).map(|j| q4k_scale_min(&b[4..16], j)).collect();
                quants.extend(pairs.iter().map(|p| p.0));
                quants.extend(pairs.iter().map(|p| p.1));
                let q = q4k_quants(&b[16..144]);
                q.chunks_exact(32).for_each(|run| pack_nibbles(run, quants));
            }
            BlockEncoding::Q6_K => {
                scales.push(f16_at(b, 208));
                quants.extend_from_slice(&b[192..208]);
                let q = q6k_quants(b);
                for pair in q.chunks_exact(64) {
                    let (a, b) = pair.split_at(32);
                    pack_nibbles(a, quants);
                    pack_nibbles(b, quants);
                    // Byte i holds the top two bits of weights i, i + 8, i + 16 and i + 24.
                    for run in [a, b] {
                        quants.extend((0..8).map(|i| (0..4).fold(0u8, |acc, k| acc | ((run[i + 8 * k] >> 4) << (2 * k)))));
                    }
                }
            }
        }
    }
}

/// Decodes row data in the repacked layout (`blocks` blocks: their scales and bytes) into `out`.
pub(crate) fn dequantize_packed(encoding: BlockEncoding, scales: &[f32], quants: &[u8], out: &mut [f32]) {
    let per = encoding.block_weights();
    let qb = encoding.packed_bytes();
    let ns = encoding.scales_per_block();
    for ((out, q), s) in out.chunks_exact_mut(per).zip(quants.chunks_exact(qb)).zip(scales.chunks_exact(ns)) {
        match encoding {
            BlockEncoding::Q4_0 | BlockEncoding::Q4_1 => {
                let (d, m) = if encoding == BlockEncoding::Q4_1 { (s[0], s[1]) } else { (s[0], -8.0 * s[0]) };
                nibbles_to(q, d, m, out);
            }
            BlockEncoding::Q5_0 => {
                let qh = u32::from_le_bytes([q[0], q[1], q[2], q[3]]);
                for (i, o) in out.iter_mut().enumerate() {
                    let nib = if i < 16 { q[4 + i] & 0x0f } else { q[4 + i - 16] >> 4 };
                    *o = (f32::from(nib | ((((qh >> i) & 1) as u8) << 4)) - 16.0) * s[0];
                }
            }
            BlockEncoding::Q8_0 => out.iter_mut().zip(q).for_each(|(o, &v)| *o = f32::from(v as i8) * s[0]),
            BlockEncoding::Q4_K => {
                for (j, run) in out.chunks_exact_mut(32).enumerate() {
                    nibbles_to(&q[16 + 16 * j..32 + 16 * j], s[0] * f32::from(q[j]), -s[1] * f32::from(q[8 + j]), run);
                }
            }
            BlockEncoding::Q6_K => {
                for (j, run) in out.chunks_exact_mut(32).enumerate() {
                    let (nib, top) = q6k_run(j);
                    let (lo, hi) = (&q[nib..nib + 16], &q[top..top + 8]);
                    for (i, o) in run.iter_mut().enumerate() {
                        let nib = if i < 16 { lo[i] & 0x0f } else { lo[i - 16] >> 4 };
                        let top = (hi[i % 8] >> (2 * (i / 8))) & 3;
                        let scale = s[0] * f32::from(q[2 * j + i / 16] as i8);
                        *o = scale * (f32::from(nib | (top << 4)) - 32.0);
                    }
                }
            }
        }
    }
}

fn nibbles_to(q: &[u8], d: f32, m: f32, out: &mut [f32]) {
    let (lo, hi) = out.split_at_mut(16);
    for ((l, h), &v) in lo.iter_mut().zip(hi).zip(q) {
        *l = f32::from(v & 0x0f) * d + m;
        *h = f32::from(v >> 4) * d + m;
    }
}

fn reference_half_at(b: &[u8], i: usize) -> f32 {
    f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// The plain reference for the block kernels: ggml's own C reading of each block
/// (`dequantize_row_*` in ggml-quants.c), written out independently of the kernels' repacked
/// storage.
pub fn dequantize_reference(encoding: BlockEncoding, raw: &[u8]) -> Vec<f32> {
    let mut y = Vec::new();
    for b in raw.chunks_exact(encoding.gguf_block_bytes()) {
        match encoding {
            BlockEncoding::Q8_0 => y.extend(b[2..].iter().map(|&q| f32::from(q as i8) * reference_half_at(b, 0))),
            BlockEncoding::Q4_0 => {
                let d = reference_half_at(b, 0);
                let mut v = [0.0; 32];
                for j in 0..16 {
                    v[j] = (f32::from(b[2 + j] & 15) - 8.0) * d;
                    v[j + 16] = (f32::from(b[2 + j] >> 4) - 8.0) * d;
                }
                y.extend(v);
            }
            BlockEncoding::Q4_1 => {
                let (d, m) = (reference_half_at(b, 0), reference_half_at(b, 2));
                let mut v = [0.0; 32];
                for j in 0..16 {
                    v[j] = f32::from(b[4 + j] & 15) * d + m;
                    v[j + 16] = f32::from(b[4 + j] >> 4) * d + m;
                }
                y.extend(v);
            }
            BlockEncoding::Q5_0 => {
                let d = reference_half_at(b, 0);
                let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
                let mut v = [0.0; 32];
                for j in 0..16 {
                    let xh0 = (((qh >> j) << 4) & 0x10) as u8;
                    let xh1 = ((qh >> (j + 12)) & 0x10) as u8;
                    v[j] = (f32::from((b[6 + j] & 0x0f) | xh0) - 16.0) * d;
                    v[j + 16] = (f32::from((b[6 + j] >> 4) | xh1) - 16.0) * d;
                }
                y.extend(v);
            }
            BlockEncoding::Q4_K => {
                let (d, dmin) = (reference_half_at(b, 0), reference_half_at(b, 2));
                let scales = &b[4..16];
                let get = |j: usize| -> (u8, u8) {
                    if j < 4 {
                        (scales[j] & 63, scales[j + 4] & 63)
                    } else {
                        ((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4), (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))
                    }
                };
                let mut q = &b[16..];
                let mut is = 0;
                for _ in (0..256).step_by(64) {
                    let (sc, m) = get(is);
                    let (d1, m1) = (d * f32::from(sc), dmin * f32::from(m));
                    let (sc, m) = get(is + 1);
                    let (d2, m2) = (d * f32::from(sc), dmin * f32::from(m));
                    y.extend((0..32).map(|l| d1 * f32::from(q[l] & 0xF) - m1));
                    y.extend((0..32).map(|l| d2 * f32::from(q[l] >> 4) - m2));
                    q = &q[32..];
                    is += 2;
                }
            }
            BlockEncoding::Q6_K => {
                let d = reference_half_at(b, 208);
                let (mut ql, mut qh, mut sc) = (&b[..128], &b[128..192], &b[192..208]);
                for _ in 0..2 {
                    let mut v = [0.0; 128];
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                        let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                        let s = |k: usize| d * f32::from(sc[is + k] as i8);
                        v[l] = s(0) * q1 as f32;
                        v[l + 32] = s(2) * q2 as f32;
                        v[l + 64] = s(4) * q3 as f32;
                        v[l + 96] = s(6) * q4 as f32;
                    }
                    y.extend(v);
                    (ql, qh, sc) = (&ql[64..], &qh[32..], &sc[8..]);
                }
            }
        }
    }
    y
}
