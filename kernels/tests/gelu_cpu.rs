//! The vectorised CPU GELU against the exact activation (libm's erf in f64), on random inputs
//! of odd lengths that straddle the per-thread chunks, with values far past erf's clamp.

use evident_kernels::testing::Noise;
use evident_kernels::{gelu_in_place, gelu_reference};

#[test]
fn gelu_matches_the_exact_activation_on_odd_lengths() {
    let mut rng = Noise::new(11);
    for len in [1usize, 7, 383, 32_769, 100_003] {
        let input: Vec<f32> = (0..len).map(|_| rng.range(-12.0, 12.0)).collect();
        let mut out = input.clone();
        gelu_in_place(&mut out);
        for (i, (&x, &y)) in input.iter().zip(&out).enumerate() {
            let want = gelu_reference(x);
            // erf's absolute error (under 5e-7) is scaled by x/2 in GELU.
            let tolerance = 1e-6 + 3e-7 * x.abs();
            assert!((y - want).abs() <= tolerance, "len {len}, index {i}: gelu({x}) = {y}, exact {want}");
        }
    }
}

#[test]
fn gelu_keeps_its_fixed_points_and_signs() {
    let mut values = vec![0.0f32, -0.0, 30.0, -30.0, 1.0, -1.0];
    gelu_in_place(&mut values);
    assert_eq!(values[0], 0.0);
    assert!((values[2] - 30.0).abs() < 1e-5, "large inputs pass through: {}", values[2]);
    assert!(values[3].abs() < 1e-5, "large negative inputs vanish: {}", values[3]);
    assert!((values[4] - 0.841_344_7).abs() < 1e-6, "gelu(1) = {}", values[4]);
    assert!((values[5] + 0.158_655_3).abs() < 1e-6, "gelu(-1) = {}", values[5]);
}
