//! The element-wise chain after a convolution and row-wise softmax against plain f64
//! arithmetic, on odd lengths and values well past the activations' bends.

use evident_kernels::testing::{Noise, assert_all_close};
use evident_kernels::{PointwiseOp, add_assign, apply_pointwise, softmax_rows};

#[test]
fn each_pointwise_op_and_a_chain_match_their_definition() {
    let mut rng = Noise::new(23);
    let ops = [
        PointwiseOp::Add(vec![0.5, -1.5, 2.0]),
        PointwiseOp::Mul(vec![-0.75]),
        PointwiseOp::Relu,
        PointwiseOp::Sigmoid,
        PointwiseOp::HardSigmoid { alpha: 0.2, beta: 0.5 },
        PointwiseOp::HardSwish { alpha: 1.0 / 6.0, beta: 0.5 },
    ];
    for len in [1usize, 17, 1001] {
        for c in 0..3 {
            let input: Vec<f32> = (0..len).map(|_| rng.range(-40.0, 40.0)).collect();
            for op in &ops {
                let mut got = input.clone();
                apply_pointwise(&mut got, c, std::slice::from_ref(op));
                let want: Vec<f64> = input.iter().map(|&x| op.reference(c, x)).collect();
                assert_all_close(&format!("{op:?} channel {c} len {len}"), &got, &want, 1e-6, 1e-6);
            }
            let mut got = input.clone();
            apply_pointwise(&mut got, c, &ops);
            let want: Vec<f64> = input.iter().map(|&x| ops.iter().fold(x, |v, op| op.reference(c, v) as f32) as f64).collect();
            assert_all_close(&format!("the chain, channel {c} len {len}"), &got, &want, 1e-5, 1e-6);
        }
    }
    // Runs of adds and multiplies, as batch norm then a learnable affine leave them.
    let affine = [
        PointwiseOp::Mul(vec![1.5, -0.25, 3.0]),
        PointwiseOp::Add(vec![0.125, 2.0, -1.0]),
        PointwiseOp::Mul(vec![0.75]),
        PointwiseOp::Add(vec![-0.5]),
        PointwiseOp::HardSwish { alpha: 1.0 / 6.0, beta: 0.5 },
        PointwiseOp::Add(vec![1.0, 2.0, 3.0]),
        PointwiseOp::Mul(vec![-2.0, 0.5, 1.0]),
    ];
    for c in 0..3 {
        let input: Vec<f32> = (0..333).map(|_| rng.range(-10.0, 10.0)).collect();
        let mut got = input.clone();
        apply_pointwise(&mut got, c, &affine);
        let want: Vec<f64> = input.iter().map(|&x| affine.iter().fold(f64::from(x), |v, op| op.reference(c, v as f32))).collect();
        assert_all_close(&format!("adds and multiplies, channel {c}"), &got, &want, 1e-5, 1e-5);
    }
    let mut roots = vec![4.0f32, 2.25, 0.0];
    apply_pointwise(&mut roots, 0, &[PointwiseOp::Sqrt]);
    assert_eq!(roots, vec![2.0, 1.5, 0.0]);
    assert!(PointwiseOp::Add(vec![1.0; 3]).fits(3) && !PointwiseOp::Add(vec![1.0; 3]).fits(4) && PointwiseOp::Mul(vec![1.0]).fits(9));
}

#[test]
fn softmax_rows_match_plain_sums() {
    let mut rng = Noise::new(29);
    for (rows, row) in [(1usize, 1usize), (3, 18_385), (7, 13)] {
        let input: Vec<f32> = (0..rows * row).map(|_| rng.range(-30.0, 30.0)).collect();
        let mut got = input.clone();
        softmax_rows(&mut got, row);
        let want: Vec<f64> = input
            .chunks(row)
            .flat_map(|r| {
                let max = r.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
                let sum: f64 = r.iter().map(|&x| (x as f64 - max).exp()).sum();
                r.iter().map(move |&x| (x as f64 - max).exp() / sum)
            })
            .collect();
        assert_all_close(&format!("{rows} rows of {row}"), &got, &want, 1e-5, 1e-9);
    }
}

#[test]
fn residual_adds_cover_every_chunk() {
    let mut rng = Noise::new(31);
    for len in [0usize, 5, 16_385, 40_001] {
        let (x, y) = (rng.uniform(len), rng.uniform(len));
        let mut got = x.clone();
        add_assign(&mut got, &y);
        let want: Vec<f64> = x.iter().zip(&y).map(|(&a, &b)| f64::from(a) + f64::from(b)).collect();
        assert_all_close(&format!("len {len}"), &got, &want, 1e-7, 1e-7);
    }
}
