//! Random inputs and a tolerance check shared by the CPU kernels' tests.

use rand::Rng;
use rand::rngs::StdRng;

/// `n` values uniform in [-1, 1).
pub fn noise(n: usize, rng: &mut StdRng) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// Every value of `got` within `tolerance` of `want`, relative to 1 + |want|.
pub fn assert_close(got: &[f32], want: &[f64], tolerance: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((f64::from(*g) - w).abs() <= tolerance * (1.0 + w.abs()), "{what}: index {i} is {g}, want {w}");
    }
}
