//! Block-encoded weights against a plain dequantise-then-multiply reference, on random blocks
//! of odd shapes: decoding, the matrix-vector product on every CPU path, and the many-row
//! product (prompt pass) on every matmul path.

use evident_kernels::testing::{Noise, assert_all_close};
use evident_kernels::{BlockEncoding, CpuPath, MatmulPath, QuantMatrix, dequantize_gguf, dequantize_reference, rounded_input};
use half::{bf16, f16};

fn f16_bytes(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

/// Random GGUF blocks: random quant bits, scales in the ranges real files have.
fn random_gguf_blocks(encoding: BlockEncoding, blocks: usize, rng: &mut Noise) -> Vec<u8> {
    let mut raw = Vec::new();
    let bytes = |n: usize, raw: &mut Vec<u8>, rng: &mut Noise| raw.extend(rng.bytes(n));
    for _ in 0..blocks {
        match encoding {
            BlockEncoding::Q4_0 | BlockEncoding::Q5_0 | BlockEncoding::Q8_0 => {
                raw.extend(f16_bytes(rng.range(0.001, 0.1)));
                bytes(encoding.gguf_block_bytes() - 2, &mut raw, rng);
            }
            BlockEncoding::Q4_1 => {
                raw.extend(f16_bytes(rng.range(0.001, 0.1)));
                raw.extend(f16_bytes(rng.range(-0.5, 0.5)));
                bytes(16, &mut raw, rng);
            }
            BlockEncoding::Q4_K => {
                raw.extend(f16_bytes(rng.range(0.0001, 0.01)));
                raw.extend(f16_bytes(rng.range(0.0001, 0.01)));
                bytes(12 + 128, &mut raw, rng);
            }
            BlockEncoding::Q6_K => {
                bytes(128 + 64 + 16, &mut raw, rng);
                raw.extend(f16_bytes(rng.range(0.0001, 0.01)));
            }
        }
    }
    raw
}

/// Shapes per block size: one row; a row count that leaves a partial thread task; widths of
/// the Qwen2.5 (896, 1536, 4864) and SmolLM2 (576) models, and odd block counts.
fn shapes(encoding: BlockEncoding) -> Vec<(usize, usize)> {
    if encoding.block_weights() == 256 { vec![(1, 256), (67, 768), (193, 2304), (130, 1536)] } else { vec![(1, 32), (67, 96), (193, 576), (130, 896)] }
}

fn dense_product(w: &[f32], x: &[f32], rows: usize, cols: usize) -> (Vec<f64>, Vec<f64>) {
    (0..rows)
        .map(|r| {
            let row = &w[r * cols..(r + 1) * cols];
            let want: f64 = row.iter().zip(x).map(|(w, x)| f64::from(*w) * f64::from(*x)).sum();
            let scale: f64 = row.iter().zip(x).map(|(w, x)| f64::from((w * x).abs())).sum();
            (want, scale)
        })
        .unzip()
}

#[test]
fn blocks_decode_as_ggml_does() {
    let mut rng = Noise::new(3);
    for encoding in BlockEncoding::ALL {
        for (rows, cols) in shapes(encoding) {
            let raw = random_gguf_blocks(encoding, rows * cols / encoding.block_weights(), &mut rng);
            let want = dequantize_reference(encoding, &raw);
            let mut flat = Vec::new();
            dequantize_gguf(encoding, &raw, &mut flat);
            let want64: Vec<f64> = want.iter().map(|&v| f64::from(v)).collect();
            assert_all_close(&format!("{encoding:?} dequantize_gguf"), &flat, &want64, 1e-6, 1e-6);
            let m = QuantMatrix::from_gguf_blocks(encoding, rows, cols, &raw).expect("valid blocks");
            for r in [0, rows / 2, rows - 1] {
                assert_all_close(&format!("{encoding:?} {rows}x{cols} row {r}"), &m.row(r), &want64[r * cols..(r + 1) * cols], 1e-6, 1e-6);
            }
        }
    }
}

#[test]
fn block_matvec_equals_the_dequantised_product() {
    println!("paths on this CPU: {:?}", CpuPath::available());
    let mut rng = Noise::new(17);
    for encoding in BlockEncoding::ALL {
        for (rows, cols) in shapes(encoding) {
            let raw = random_gguf_blocks(encoding, rows * cols / encoding.block_weights(), &mut rng);
            let m = QuantMatrix::from_gguf_blocks(encoding, rows, cols, &raw).expect("valid blocks");
            let dense = dequantize_reference(encoding, &raw);
            let x = rng.uniform(cols);
            let (want, scale) = dense_product(&dense, &x, rows, cols);
            for path in CpuPath::available() {
                let mut out = vec![f32::NAN; rows];
                m.matvec_on(path, &x, &mut out);
                // The VNNI path rounds x to 8-bit integers per run of 32, the AVX2 path per 256
                // for K-quant rows and per run of 32 for Q5_0 and Q8_0 (x ≈ d·q, d = max|x|/127):
                // exact against the rounded vector, and off the true one by at most Σ |w| · d / 2.
                let k_quant = encoding.block_weights() == 256;
                let group = if path == CpuPath::Avx2 && k_quant { 256 } else { 32 };
                let (exact, rounding) = match &rounded_input(path, encoding, &x) {
                    Some(xr) => {
                        let amax: Vec<f64> = x.chunks(group).map(|r| r.iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs())))).collect();
                        let bound: Vec<f64> =
                            (0..rows).map(|r| (0..cols).map(|i| f64::from(dense[r * cols + i].abs()) * amax[i / group] / 254.0).sum()).collect();
                        (dense_product(&dense, xr, rows, cols).0, bound)
                    }
                    None => (want.clone(), vec![0.0; rows]),
                };
                for r in 0..rows {
                    let got = f64::from(out[r]);
                    assert!((got - exact[r]).abs() <= 1e-5 * (1.0 + scale[r]), "{path:?} {encoding:?} {rows}x{cols} row {r}: {got} vs {}", exact[r]);
                    assert!((got - want[r]).abs() <= rounding[r] + 1e-5 * (1.0 + scale[r]), "{path:?} {encoding:?} row {r}: rounding error past its bound");
                }
            }
        }
    }
}

fn round_bf16(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect()
}

#[test]
fn many_row_products_equal_the_dequantised_product_on_every_path() {
    println!("matmul paths on this CPU: {:?}", MatmulPath::available());
    let mut rng = Noise::new(29);
    let stacked_shapes = [(BlockEncoding::Q4_K, BlockEncoding::Q6_K, 256), (BlockEncoding::Q5_0, BlockEncoding::Q8_0, 96)];
    for (first, second, cols) in stacked_shapes {
        // Two parts in different encodings stacked (as query/key/value are), 12-row panels
        // left partial: 29 + 8 rows.
        let (ra, rb) = (29, 8);
        let raw_a = random_gguf_blocks(first, ra * cols / first.block_weights(), &mut rng);
        let raw_b = random_gguf_blocks(second, rb * cols / second.block_weights(), &mut rng);
        let a = QuantMatrix::from_gguf_blocks(first, ra, cols, &raw_a).expect("blocks");
        let b = QuantMatrix::from_gguf_blocks(second, rb, cols, &raw_b).expect("blocks");
        let w = QuantMatrix::stack(vec![a, b]).expect("stacks");
        let rows = ra + rb;
        let dense = [dequantize_reference(first, &raw_a), dequantize_reference(second, &raw_b)].concat();
        let decoded: Vec<f32> = (0..rows).flat_map(|r| w.row(r)).collect();
        for m in [1, 5, 9, 31, 33, 70] {
            let x = rng.uniform(m * cols);
            for path in MatmulPath::available() {
                // bfloat16 products are checked against the product of the rounded inputs (the
                // kernels' own decoding, checked against ggml's above, rounded: a weight one f32
                // step from a rounding midpoint must round the same way on both sides); row by
                // row and in 8-bit rows, against the vector the matrix-vector path reads (see
                // above; both parts of a pair read it alike).
                let rows_read = |vector_path: CpuPath| -> Vec<f32> {
                    x.chunks(cols).flat_map(|row| rounded_input(vector_path, first, row).unwrap_or_else(|| row.to_vec())).collect()
                };
                let (wr, xr) = match path {
                    MatmulPath::Bf16 | MatmulPath::Amx => (round_bf16(&decoded), round_bf16(&x)),
                    MatmulPath::RowByRow => (dense.clone(), rows_read(CpuPath::best())),
                    MatmulPath::Int8Rows => (dense.clone(), rows_read(CpuPath::Avx2)),
                    MatmulPath::F32Panels => (dense.clone(), x.clone()),
                };
                let prior: Vec<f32> = (0..m * rows).map(|_| rng.range(-1.0, 1.0)).collect();
                for accumulate in [false, true] {
                    let mut out = prior.clone();
                    w.matmul_on(path, &x, m, &mut out, accumulate);
                    for i in 0..m {
                        let (want, scale) = dense_product(&wr, &xr[i * cols..(i + 1) * cols], rows, cols);
                        for r in 0..rows {
                            let want = want[r] + if accumulate { f64::from(prior[i * rows + r]) } else { 0.0 };
                            let got = f64::from(out[i * rows + r]);
                            assert!(
                                (got - want).abs() <= 1e-5 * (2.0 + scale[r]),
                                "{path:?} {first:?}+{second:?} m={m} accumulate={accumulate} row {i} col {r}: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn f32_rows_stacking_and_shape_errors() {
    let mut rng = Noise::new(5);
    let (rows, cols) = (9, 37);
    let values: Vec<f32> = (0..rows * cols).map(|_| rng.range(-1.0, 1.0)).collect();
    let m = QuantMatrix::from_f32(rows, cols, values.clone()).expect("shape");
    let x: Vec<f32> = (0..cols).map(|_| rng.range(-1.0, 1.0)).collect();
    for path in CpuPath::available() {
        let mut out = vec![f32::NAN; rows];
        m.matvec_on(path, &x, &mut out);
        for r in 0..rows {
            let want: f32 = values[r * cols..(r + 1) * cols].iter().zip(&x).map(|(w, x)| w * x).sum();
            assert!((out[r] - want).abs() < 1e-4, "{path:?} row {r}");
        }
    }
    // An odd width cannot pair up for bfloat16: the product still comes out right.
    let xs: Vec<f32> = (0..3 * cols).map(|_| rng.range(-1.0, 1.0)).collect();
    for path in MatmulPath::available() {
        let mut out = vec![0.0; 3 * rows];
        m.matmul_on(path, &xs, 3, &mut out, false);
        for i in 0..3 {
            for r in 0..rows {
                let want: f32 = values[r * cols..(r + 1) * cols].iter().zip(&xs[i * cols..]).map(|(w, x)| w * x).sum();
                assert!((out[i * rows + r] - want).abs() < 1e-4, "{path:?} f32 rows, row {i} col {r}");
            }
        }
    }
    assert!(QuantMatrix::from_f32(2, 2, vec![0.0; 3]).is_err());
    // Stacking keeps each part's rows, in order, whatever their encodings.
    let raw = random_gguf_blocks(BlockEncoding::Q4_1, 3 * 64 / 32, &mut rng);
    let raw8 = random_gguf_blocks(BlockEncoding::Q8_0, 2 * 64 / 32, &mut rng);
    let q = || QuantMatrix::from_gguf_blocks(BlockEncoding::Q4_1, 3, 64, &raw).expect("blocks");
    let q8 = || QuantMatrix::from_gguf_blocks(BlockEncoding::Q8_0, 2, 64, &raw8).expect("blocks");
    for parts in [vec![q8(), q()], vec![q(), q()]] {
        let want: Vec<Vec<f32>> = parts.iter().flat_map(|p| (0..p.rows()).map(|r| p.row(r)).collect::<Vec<_>>()).collect();
        let stacked = QuantMatrix::stack(parts).expect("stacks");
        assert_eq!((0..stacked.rows()).map(|r| stacked.row(r)).collect::<Vec<_>>(), want);
    }
    assert!(QuantMatrix::stack(vec![q(), m]).is_err(), "different widths");
    assert!(QuantMatrix::from_gguf_blocks(BlockEncoding::Q4_1, 2, 48, &[0; 40]).is_err(), "48 is not whole blocks");
    assert!(QuantMatrix::from_gguf_blocks(BlockEncoding::Q8_0, 2, 32, &[0; 67]).is_err(), "wrong byte count");
    assert!(QuantMatrix::from_gguf_blocks(BlockEncoding::Q4_K, 1, 128, &[0; 72]).is_err(), "half a super-block");
}

#[test]
fn many_row_products_span_panels_on_every_path() {
    // Rows past one AMX panel (128 to 256 rows) and a width that is no multiple of 32: the
    // panels' offsets and the padded tail of each row are both exercised.
    let mut rng = Noise::new(41);
    let (rows, cols, m) = (301, 288, 37);
    let raw = random_gguf_blocks(BlockEncoding::Q8_0, rows * cols / 32, &mut rng);
    let w = QuantMatrix::from_gguf_blocks(BlockEncoding::Q8_0, rows, cols, &raw).expect("blocks");
    let decoded: Vec<f32> = (0..rows).flat_map(|r| w.row(r)).collect();
    let x = rng.uniform(m * cols);
    for path in MatmulPath::available().into_iter().filter(|p| *p != MatmulPath::RowByRow) {
        let (wr, xr) = match path {
            MatmulPath::Bf16 | MatmulPath::Amx => (round_bf16(&decoded), round_bf16(&x)),
            MatmulPath::Int8Rows => {
                (decoded.clone(), x.chunks(cols).flat_map(|row| rounded_input(CpuPath::Avx2, BlockEncoding::Q8_0, row).expect("whole runs")).collect())
            }
            _ => (decoded.clone(), x.clone()),
        };
        let mut out = vec![f32::NAN; m * rows];
        w.matmul_on(path, &x, m, &mut out, false);
        for i in 0..m {
            let (want, scale) = dense_product(&wr, &xr[i * cols..(i + 1) * cols], rows, cols);
            for r in 0..rows {
                let got = f64::from(out[i * rows + r]);
                assert!((got - want[r]).abs() <= 1e-5 * (2.0 + scale[r]), "{path:?} row {i} col {r}: {got} vs {}", want[r]);
            }
        }
    }
}
