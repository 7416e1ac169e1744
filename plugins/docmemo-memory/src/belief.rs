//! Page Belief Memory (Section 3.2 of the DocMemo paper): a Beta(α, β) belief per page that a
//! page holds evidence, its prior from retrieval scores, the update after a round, spatial
//! propagation to neighbouring pages, and Thompson sampling.

use std::collections::{BTreeMap, BTreeSet};

/// A page: its document and number.
pub type PageKey = (String, u32);

/// One page's belief.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Belief {
    pub alpha: f64,
    pub beta: f64,
}

impl Belief {
    /// The prior of a page whose normalised retrieval score is `s` (in [0, 1]), with prior
    /// strength `strength`: α = 1 + S·s, β = 1 + S·(1 − s), so the mean follows the score and
    /// S pseudo-observations stand behind it. (The paper names S = 5 but not the formula; this
    /// is the usual way to turn a score into Beta pseudo-counts.)
    pub fn prior(s: f64, strength: f64) -> Belief {
        let s = s.clamp(0.0, 1.0);
        Belief { alpha: 1.0 + strength * s, beta: 1.0 + strength * (1.0 - s) }
    }

    /// The belief's mean, α / (α + β).
    pub fn mean(&self) -> f64 {
        self.alpha / (self.alpha + self.beta)
    }
}

/// The beliefs of the pages of the documents in scope.
#[derive(Debug, Clone)]
pub struct BeliefMemory {
    beliefs: BTreeMap<PageKey, Belief>,
    strength: f64,
}

impl BeliefMemory {
    /// Priors from one retrieval's scores, min-max normalised over the pages it returned; a
    /// page it did not return starts from a score of 0.
    pub fn from_scores(scores: &[(PageKey, f64)], strength: f64) -> BeliefMemory {
        let normalised = minmax(scores);
        BeliefMemory { beliefs: normalised.into_iter().map(|(k, s)| (k, Belief::prior(s, strength))).collect(), strength }
    }

    /// A page's belief (the prior of a score of 0 for a page never scored).
    pub fn get(&self, page: &PageKey) -> Belief {
        self.beliefs.get(page).copied().unwrap_or(Belief::prior(0.0, self.strength))
    }

    /// Every page that has a belief of its own.
    pub fn pages(&self) -> impl Iterator<Item = (&PageKey, &Belief)> {
        self.beliefs.iter()
    }

    /// After a round: α += 1 for each useful page, β += 1 for each page read and not useful.
    pub fn update(&mut self, useful: &[PageKey], useless: &[PageKey]) {
        for p in useful {
            let b = self.get(p);
            self.beliefs.insert(p.clone(), Belief { alpha: b.alpha + 1.0, ..b });
        }
        for p in useless {
            let b = self.get(p);
            self.beliefs.insert(p.clone(), Belief { beta: b.beta + 1.0, ..b });
        }
    }

    /// Spatial propagation: for each useful page i, α_j += γ^|j−i| for every page j ≠ i of the
    /// same document within `radius` pages (1 ≤ j ≤ its page count). Only α moves: a useful
    /// page is evidence that its neighbours are, and no evidence against them.
    pub fn propagate(&mut self, useful: &[PageKey], radius: u32, decay: f64, page_count: impl Fn(&str) -> u32) {
        for (doc, i) in useful {
            let last = page_count(doc);
            for j in i.saturating_sub(radius).max(1)..=(i + radius).min(last) {
                if j == *i {
                    continue;
                }
                let key = (doc.clone(), j);
                let b = self.get(&key);
                self.beliefs.insert(key, Belief { alpha: b.alpha + decay.powi(j.abs_diff(*i) as i32), ..b });
            }
        }
    }
}

/// Scores min-max normalised to [0, 1] (all 1 when they are equal).
pub fn minmax(scores: &[(PageKey, f64)]) -> Vec<(PageKey, f64)> {
    let lo = scores.iter().map(|(_, s)| *s).fold(f64::INFINITY, f64::min);
    let hi = scores.iter().map(|(_, s)| *s).fold(f64::NEG_INFINITY, f64::max);
    scores.iter().map(|(k, s)| (k.clone(), if hi > lo { (s - lo) / (hi - lo) } else { 1.0 })).collect()
}

/// A draw from N(0, 1) (Box–Muller), from uniforms in [0, 1).
fn normal(uniform: &mut impl FnMut() -> f64) -> f64 {
    let u1 = 1.0 - uniform(); // (0, 1]
    let u2 = uniform();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A draw from Gamma(shape, 1) (Marsaglia and Tsang; shape < 1 through Gamma(shape + 1)·U^(1/shape)).
pub fn sample_gamma(shape: f64, uniform: &mut impl FnMut() -> f64) -> f64 {
    if shape < 1.0 {
        let u = 1.0 - uniform();
        return sample_gamma(shape + 1.0, uniform) * u.powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(uniform);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u = 1.0 - uniform();
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

/// A draw θ ~ Beta(α, β), as X / (X + Y) with X ~ Gamma(α), Y ~ Gamma(β).
pub fn sample_beta(b: Belief, uniform: &mut impl FnMut() -> f64) -> f64 {
    let x = sample_gamma(b.alpha, uniform);
    let y = sample_gamma(b.beta, uniform);
    if x + y > 0.0 { x / (x + y) } else { b.mean() }
}

/// A page chosen for a round, with what chose it.
#[derive(Debug, Clone, PartialEq)]
pub struct Pick {
    pub page: PageKey,
    pub belief: Belief,
    /// The Thompson draw θ.
    pub theta: f64,
    /// The round's normalised retrieval score.
    pub retrieval: f64,
    /// λ·θ + (1 − λ)·retrieval.
    pub score: f64,
}

/// The round's pages: θ ~ Beta(α, β) drawn for every page with a belief or a retrieval score
/// (in page order, so a seed repeats a run), each scored λ·θ + (1 − λ)·r with r the round's
/// min-max normalised retrieval score, and the best `n` not read before.
pub fn select(
    memory: &BeliefMemory,
    retrieval: &[(PageKey, f64)],
    lambda: f64,
    read: &BTreeSet<PageKey>,
    n: usize,
    uniform: &mut impl FnMut() -> f64,
) -> Vec<Pick> {
    let r: BTreeMap<PageKey, f64> = minmax(retrieval).into_iter().collect();
    let universe: BTreeSet<&PageKey> = memory.pages().map(|(k, _)| k).chain(r.keys()).collect();
    let mut picks: Vec<Pick> = universe
        .into_iter()
        .filter(|k| !read.contains(*k))
        .map(|k| {
            let belief = memory.get(k);
            let theta = sample_beta(belief, uniform);
            let retrieval = r.get(k).copied().unwrap_or(0.0);
            Pick { page: k.clone(), belief, theta, retrieval, score: lambda * theta + (1.0 - lambda) * retrieval }
        })
        .collect();
    picks.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.page.cmp(&b.page)));
    picks.truncate(n);
    picks
}
