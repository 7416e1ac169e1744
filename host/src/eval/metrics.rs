//! Retrieval metrics as the HiEvi-RAG paper defines them (appendix 8): Recall@K, NDCG@K and
//! MRR@K with binary relevance; and the one percentile every table and benchmark uses.

/// Recall@K: the share of gold pages among the first `k` retrieved.
pub fn recall_at(ranked: &[u32], gold: &[u32], k: usize) -> f64 {
    if gold.is_empty() {
        return 0.0;
    }
    let hits = gold.iter().filter(|g| ranked.iter().take(k).any(|r| r == *g)).count();
    hits as f64 / gold.len() as f64
}

/// NDCG@K: DCG of the first `k` retrieved over the DCG of an ideal ranking.
pub fn ndcg_at(ranked: &[u32], gold: &[u32], k: usize) -> f64 {
    let dcg: f64 = ranked.iter().take(k).enumerate().filter(|(_, r)| gold.contains(r)).map(|(i, _)| 1.0 / ((i + 2) as f64).log2()).sum();
    let ideal: f64 = (0..gold.len().min(k)).map(|i| 1.0 / ((i + 2) as f64).log2()).sum();
    if ideal == 0.0 { 0.0 } else { dcg / ideal }
}

/// RR@K: one over the rank of the first gold page within the first `k`, else 0.
pub fn rr_at(ranked: &[u32], gold: &[u32], k: usize) -> f64 {
    ranked.iter().take(k).position(|r| gold.contains(r)).map_or(0.0, |i| 1.0 / (i + 1) as f64)
}

/// The `p` quantile (0..=1) of `values`, nearest rank; NaN when there are none.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n => sorted[(((n - 1) as f64) * p.clamp(0.0, 1.0)).round() as usize],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_follow_their_definitions() {
        let ranked = [7, 3, 9, 1];
        let gold = [3, 1];
        assert_eq!(recall_at(&ranked, &gold, 1), 0.0);
        assert_eq!(recall_at(&ranked, &gold, 2), 0.5);
        assert_eq!(recall_at(&ranked, &gold, 4), 1.0);
        assert_eq!(rr_at(&ranked, &gold, 1), 0.0);
        assert_eq!(rr_at(&ranked, &gold, 3), 0.5);
        let ideal = 1.0 + 1.0 / 3f64.log2();
        let dcg = 1.0 / 3f64.log2() + 1.0 / 5f64.log2();
        assert!((ndcg_at(&ranked, &gold, 4) - dcg / ideal).abs() < 1e-12);
        assert_eq!(ndcg_at(&[3], &[3], 1), 1.0);
        assert_eq!(ndcg_at(&ranked, &[], 4), 0.0);
    }

    #[test]
    fn percentile_is_the_nearest_rank() {
        let v = [5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 0.5), 3.0);
        assert_eq!(percentile(&v, 1.0), 5.0);
        assert_eq!(percentile(&v, 0.99), 5.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
