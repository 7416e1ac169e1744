//! Top-K selection over scores.

/// Indices of the `k` highest scores, best first; ties go to the lower index. NaN scores
/// are never selected.
pub fn top_k(scores: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..scores.len()).filter(|&i| !scores[i].is_nan()).collect();
    let k = k.min(idx.len());
    if k == 0 {
        return Vec::new();
    }
    let better = |a: &usize, b: &usize| scores[*b].total_cmp(&scores[*a]).then(a.cmp(b));
    if k < idx.len() {
        idx.select_nth_unstable_by(k - 1, better);
        idx.truncate(k);
    }
    idx.sort_by(better);
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_best_in_order_and_skips_nan() {
        let s = [0.5, f32::NAN, 2.0, -1.0, 2.0, 1.5];
        assert_eq!(top_k(&s, 3), vec![2, 4, 5]);
        assert_eq!(top_k(&s, 10), vec![2, 4, 5, 0, 3]);
        assert!(top_k(&s, 0).is_empty());
    }
}
