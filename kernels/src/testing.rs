//! What every kernel test uses: one source of random inputs and one tolerance check, so that a
//! kernel's test reads as "noise in, reference beside the kernel, `all_close` out".

/// A seeded source of test inputs (SplitMix64): the same seed gives the same inputs on every
/// machine, without a dependency.
pub struct Noise(u64);

impl Noise {
    /// A source seeded with `seed`.
    pub fn new(seed: u64) -> Noise {
        Noise(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value uniform in [0, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// `n` values uniform in [-1, 1).
    pub fn uniform(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| 2.0 * self.unit() - 1.0).collect()
    }

    /// A value uniform in [lo, hi).
    pub fn range(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit()
    }

    /// A whole number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// Whether every `got[i]` is within `atol + rtol * |want[i]|` of `want[i]`; a NaN on either
/// side, or a length mismatch, is a failure. The error names the worst element.
pub fn all_close<G: Copy + Into<f64>, W: Copy + Into<f64>>(got: &[G], want: &[W], rtol: f64, atol: f64) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} values, want {}", got.len(), want.len()));
    }
    let mut worst: Option<(usize, f64, f64, f64)> = None;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let (g, w): (f64, f64) = (g.into(), w.into());
        let excess = if g.is_nan() || w.is_nan() { f64::INFINITY } else { (g - w).abs() - (atol + rtol * w.abs()) };
        if excess > 0.0 && worst.is_none_or(|(_, _, _, e)| excess > e) {
            worst = Some((i, g, w, excess));
        }
    }
    match worst {
        None => Ok(()),
        Some((i, g, w, _)) => Err(format!("index {i} is {g}, want {w} (rtol {rtol}, atol {atol})")),
    }
}

/// Panics with `what` and the worst element unless [`all_close`] holds.
#[track_caller]
pub fn assert_all_close<G: Copy + Into<f64>, W: Copy + Into<f64>>(what: &str, got: &[G], want: &[W], rtol: f64, atol: f64) {
    if let Err(e) = all_close(got, want, rtol, atol) {
        panic!("{what}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_close_fails_on_nan_length_and_distance() {
        assert!(all_close(&[1.0f32, 2.0], &[1.0f32, 2.0], 0.0, 0.0).is_ok());
        assert!(all_close(&[f32::NAN], &[f32::NAN], 1.0, 1.0).is_err(), "NaN is never close");
        assert!(all_close(&[1.0f32], &[f64::NAN], 1.0, 1.0).is_err());
        assert!(all_close(&[1.0f32], &[1.0f32, 2.0], 1.0, 1.0).is_err());
        assert!(all_close(&[1.1f32], &[1.0f32], 0.0, 0.05).is_err());
        assert!(all_close(&[1.1f32], &[1.0f32], 0.2, 0.0).is_ok());
        let e = all_close(&[0.0f32, 5.0, 1.5], &[0.0f32, 1.0, 1.0], 0.0, 0.1).expect_err("two are off");
        assert!(e.starts_with("index 1 "), "names the worst: {e}");
    }

    #[test]
    fn noise_is_seeded_and_spread() {
        let a = Noise::new(3).uniform(10_000);
        assert_eq!(a, Noise::new(3).uniform(10_000));
        assert_ne!(a, Noise::new(4).uniform(10_000));
        assert!(a.iter().all(|v| (-1.0..1.0).contains(v)));
        let mean = a.iter().sum::<f32>() / a.len() as f32;
        assert!(mean.abs() < 0.03, "mean {mean}");
        assert!(a.iter().any(|v| *v < -0.99) && a.iter().any(|v| *v > 0.99));
    }
}
