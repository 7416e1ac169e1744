//! The block-encoded matrix-vector product against the dequantised rows times x, on random
//! blocks of odd shapes (the AVX2 path where the CPU has it, and the portable one).

use evident_kernels::{BlockEncoding, CpuPath, QuantMatrix};
use half::f16;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn random_gguf_blocks(encoding: BlockEncoding, blocks: usize, rng: &mut StdRng) -> Vec<u8> {
    let mut raw = Vec::new();
    for _ in 0..blocks {
        raw.extend(f16::from_f32(rng.random_range(0.001..0.1)).to_le_bytes());
        if encoding == BlockEncoding::Q4_1 {
            raw.extend(f16::from_f32(rng.random_range(-0.5..0.5)).to_le_bytes());
        }
        let n = if encoding == BlockEncoding::Q8_0 { 32 } else { 16 };
        raw.extend((0..n).map(|_| rng.random::<u8>()));
    }
    raw
}

/// ggml's own reading of a block, independent of the repacked storage.
fn dequantize_gguf(encoding: BlockEncoding, raw: &[u8]) -> Vec<f32> {
    let mut out = Vec::new();
    for b in raw.chunks_exact(encoding.gguf_block_bytes()) {
        let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
        match encoding {
            BlockEncoding::Q8_0 => out.extend(b[2..].iter().map(|&q| f32::from(q as i8) * d)),
            BlockEncoding::Q4_0 => {
                out.extend(b[2..].iter().map(|&q| (f32::from(q & 15) - 8.0) * d));
                out.extend(b[2..].iter().map(|&q| (f32::from(q >> 4) - 8.0) * d));
            }
            BlockEncoding::Q4_1 => {
                let m = f16::from_le_bytes([b[2], b[3]]).to_f32();
                out.extend(b[4..].iter().map(|&q| f32::from(q & 15) * d + m));
                out.extend(b[4..].iter().map(|&q| f32::from(q >> 4) * d + m));
            }
        }
    }
    out
}

#[test]
fn block_matvec_equals_the_dequantised_product() {
    println!("paths on this CPU: {:?}", CpuPath::available());
    let mut rng = StdRng::seed_from_u64(17);
    for encoding in [BlockEncoding::Q4_1, BlockEncoding::Q4_0, BlockEncoding::Q8_0] {
        // One row; a row count that leaves a partial thread task; SmolLM2's 576 and 1536 widths.
        for (rows, cols) in [(1, 32), (67, 96), (193, 576), (130, 1536)] {
            let raw = random_gguf_blocks(encoding, rows * cols / 32, &mut rng);
            let m = QuantMatrix::from_gguf_blocks(encoding, rows, cols, &raw).expect("valid blocks");
            let dense = dequantize_gguf(encoding, &raw);
            for r in [0, rows / 2, rows - 1] {
                assert_eq!(m.row(r), dense[r * cols..(r + 1) * cols], "{encoding:?} row {r} decodes as ggml does");
            }
            let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-2.0..2.0)).collect();
            for path in CpuPath::available() {
                let mut out = vec![f32::NAN; rows];
                m.matvec_on(path, &x, &mut out);
                for (r, got) in out.iter().enumerate() {
                    let row = &dense[r * cols..(r + 1) * cols];
                    let want: f64 = row.iter().zip(&x).map(|(w, x)| f64::from(*w) * f64::from(*x)).sum();
                    let scale: f64 = row.iter().zip(&x).map(|(w, x)| f64::from((w * x).abs())).sum();
                    assert!((f64::from(*got) - want).abs() <= 1e-5 * (1.0 + scale), "{path:?} {encoding:?} {rows}x{cols} row {r}: {got} vs {want}");
                }
            }
        }
    }
}

trait CloneRows {
    fn clone_rows(&self) -> QuantMatrix;
}

impl CloneRows for QuantMatrix {
    fn clone_rows(&self) -> QuantMatrix {
        QuantMatrix::stack(std::slice::from_ref(self)).expect("one part stacks")
    }
}

#[test]
fn f32_matvec_and_shape_errors() {
    let mut rng = StdRng::seed_from_u64(5);
    let (rows, cols) = (9, 37);
    let values: Vec<f32> = (0..rows * cols).map(|_| rng.random_range(-1.0..1.0)).collect();
    let m = QuantMatrix::from_f32(rows, cols, values.clone()).expect("shape");
    let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-1.0..1.0)).collect();
    for path in CpuPath::available() {
        let mut out = vec![f32::NAN; rows];
        m.matvec_on(path, &x, &mut out);
        for r in 0..rows {
            let want: f32 = values[r * cols..(r + 1) * cols].iter().zip(&x).map(|(w, x)| w * x).sum();
            assert!((out[r] - want).abs() < 1e-4, "{path:?} row {r}");
        }
    }
    assert!(QuantMatrix::from_f32(2, 2, vec![0.0; 3]).is_err());
    // Stacking keeps each part's rows, in order, whatever their encodings.
    let raw = random_gguf_blocks(BlockEncoding::Q4_1, 3 * 64 / 32, &mut rng);
    let q = QuantMatrix::from_gguf_blocks(BlockEncoding::Q4_1, 3, 64, &raw).expect("blocks");
    let raw8 = random_gguf_blocks(BlockEncoding::Q8_0, 2 * 64 / 32, &mut rng);
    let q8 = QuantMatrix::from_gguf_blocks(BlockEncoding::Q8_0, 2, 64, &raw8).expect("blocks");
    for parts in [vec![q8.clone_rows(), q.clone_rows()], vec![q.clone_rows(), q.clone_rows()]] {
        let stacked = QuantMatrix::stack(&parts).expect("stacks");
        let want: Vec<Vec<f32>> = parts.iter().flat_map(|p| (0..p.rows()).map(|r| p.row(r))).collect();
        assert_eq!((0..stacked.rows()).map(|r| stacked.row(r)).collect::<Vec<_>>(), want);
    }
    assert!(QuantMatrix::stack(&[q.clone_rows(), m]).is_err(), "different widths");
    assert!(QuantMatrix::from_gguf_blocks(BlockEncoding::Q4_1, 2, 48, &[0; 40]).is_err(), "48 is not whole blocks");
    assert!(QuantMatrix::from_gguf_blocks(BlockEncoding::Q8_0, 2, 32, &[0; 67]).is_err(), "wrong byte count");
}
