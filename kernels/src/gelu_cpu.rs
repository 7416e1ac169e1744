//! GELU on the CPU, vectorised: the encoder's feed-forward activation.
//!
//! Burn's CPU backend computes GELU through a scalar `erf` from libm, a tenth of the encoder's
//! time. Here erf is a rational approximation (the one Eigen and TensorFlow use; absolute error
//! under 5e-7 against the exact function) written so the compiler vectorises it, split between
//! threads.

use rayon::prelude::*;

/// Values per thread task: large enough to amortise scheduling.
const CHUNK: usize = 1 << 15;

/// `x * 0.5 * (1 + erf(x / sqrt 2))` applied to every value in place.
pub fn gelu_in_place(values: &mut [f32]) {
    values.par_chunks_mut(CHUNK).for_each(gelu_chunk);
}

fn gelu_chunk(chunk: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the features the function is compiled for were just detected.
        unsafe { gelu_avx2(chunk) };
        return;
    }
    gelu_portable(chunk);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gelu_avx2(chunk: &mut [f32]) {
    gelu_portable(chunk);
}

#[inline(always)]
fn gelu_portable(chunk: &mut [f32]) {
    for v in chunk.iter_mut() {
        let x = *v;
        *v = 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// Rational approximation of erf on [-4, 4]; outside it erf is ±1 in f32.
#[inline(always)]
fn erf(x: f32) -> f32 {
    const ALPHA: [f32; 7] = [-2.726_142_3e-10, 2.770_681_4e-8, -2.101_024e-6, -5.692_506_4e-5, -7.349_906_3e-4, -2.954_6e-3, -1.609_603_3e-2];
    const BETA: [f32; 5] = [-1.456_607_2e-5, -2.133_740_6e-4, -1.682_827e-3, -7.373_329e-3, -1.426_474e-2];
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = ALPHA[0];
    for a in &ALPHA[1..] {
        p = p * x2 + a;
    }
    let mut q = BETA[0];
    for b in &BETA[1..] {
        q = q * x2 + b;
    }
    x * p / q
}

/// The exact activation, from libm's erf in f64: what tests compare against.
pub fn gelu_reference(x: f32) -> f32 {
    let x = f64::from(x);
    (0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_stays_within_its_error_bound_over_the_whole_range() {
        let mut worst = 0.0f64;
        for i in -600_000..=600_000 {
            let x = i as f32 * 1e-5;
            worst = worst.max((f64::from(erf(x)) - libm::erf(f64::from(x))).abs());
        }
        assert!(worst < 5e-7, "worst absolute error {worst}");
    }
}
