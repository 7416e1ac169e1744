//! Choosing the next token from logits: greedy, or temperature and nucleus (top-p) sampling
//! from a seeded generator so a run can be repeated.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingParams {
    /// 0 is greedy.
    pub temperature: f32,
    /// Sample only from the smallest set of tokens whose probability reaches this.
    pub top_p: f32,
    pub seed: u64,
}

impl SamplingParams {
    /// Always the most likely token.
    pub fn greedy() -> SamplingParams {
        SamplingParams { temperature: 0.0, top_p: 1.0, seed: 0 }
    }
}

/// Picks tokens for one generation.
pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
}

impl Sampler {
    /// A sampler seeded from `params.seed`.
    pub fn new(params: SamplingParams) -> Sampler {
        Sampler { params, rng: StdRng::seed_from_u64(params.seed) }
    }

    /// The next token for `logits`.
    pub fn next(&mut self, logits: &[f32]) -> u32 {
        if self.params.temperature <= 0.0 {
            return argmax(logits);
        }
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let inv_t = 1.0 / self.params.temperature;
        let mut probs: Vec<(u32, f32)> = logits.iter().enumerate().map(|(i, &l)| (i as u32, ((l - max) * inv_t).exp())).collect();
        let total: f32 = probs.iter().map(|p| p.1).sum();
        probs.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
        let top_p = self.params.top_p.clamp(0.0, 1.0) * total;
        let mut kept = 0.0;
        let mut n = 0;
        for p in &probs {
            kept += p.1;
            n += 1;
            if kept >= top_p {
                break;
            }
        }
        let mut r = self.rng.random::<f32>() * kept;
        for p in &probs[..n] {
            r -= p.1;
            if r <= 0.0 {
                return p.0;
            }
        }
        probs[n - 1].0
    }
}

/// Index of the largest value (the first of equals).
pub fn argmax(values: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in values.iter().enumerate() {
        if *v > values[best] {
            best = i;
        }
    }
    best as u32
}

/// log-softmax of `logits` at `index`.
pub fn log_prob(logits: &[f32], index: u32) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    logits.get(index as usize).map_or(f32::NEG_INFINITY, |&l| (f64::from(l - max) - sum.ln()) as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_largest_and_top_p_keeps_only_the_nucleus() {
        let logits = [0.1, 3.0, 2.9, -5.0];
        assert_eq!(Sampler::new(SamplingParams::greedy()).next(&logits), 1);
        let mut s = Sampler::new(SamplingParams { temperature: 1.0, top_p: 0.5, seed: 7 });
        assert!((0..200).all(|_| s.next(&logits) == 1), "top_p 0.5 leaves only the first token");
        let mut s = Sampler::new(SamplingParams { temperature: 1.0, top_p: 1.0, seed: 7 });
        let picks: Vec<u32> = (0..400).map(|_| s.next(&logits)).collect();
        assert!(picks.contains(&1) && picks.contains(&2), "both likely tokens are drawn");
        let mut again = Sampler::new(SamplingParams { temperature: 1.0, top_p: 1.0, seed: 7 });
        assert_eq!(picks, (0..400).map(|_| again.next(&logits)).collect::<Vec<_>>(), "a seed repeats");
    }

    #[test]
    fn log_probs_normalise() {
        let logits = [1.0, 2.0, 3.0];
        let total: f32 = (0..3).map(|i| log_prob(&logits, i).exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
    }
}
