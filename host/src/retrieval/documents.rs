//! Document-aware ranking for searches over several documents: a page's score is mixed with
//! its document's, so that a document with several strong pages lifts all of them above a
//! stray page of another document that matches as well on its own.
//!
//! Measured on the dev benchmark over the whole corpus (README, "Pages ranked with their
//! document"): hybrid R@5 0.508 to 0.529 at weight 0.5, with the same gain on each half of
//! the questions when the other half chose the settings.

use evident_kernels::top_k;

/// Pages whose scores set the scale of a question's fusion; every page returned lies among them.
pub const POOL: usize = 300;

/// Pages (the best of the pool) that make up a document's score.
pub const DOCUMENT_PAGES: usize = 50;

/// Temperature of the soft maximum over a document's pages, in units of the pool's score
/// range: at 0.1 a document's best page counts most and each further page near it adds a
/// little (a plain maximum gained nothing over the page's own score; 0.05 and 0.2 did worse).
pub const TEMPERATURE: f32 = 0.1;

/// The best `k` pages by `(1 − weight)·s + weight·d`, with `s` a page's score scaled to [0, 1]
/// over the best [`POOL`] (or `k`, when larger) pages and `d` its document's soft maximum
/// over its pages among the best [`DOCUMENT_PAGES`], divided by the largest document's.
/// `document_of[i]` is the document of page `i`. Returns (page index, fused score), best first;
/// with one document, or weight 0, the order is the scores' own.
pub fn rank_with_documents(scores: &[f32], document_of: &[usize], k: usize, weight: f32) -> Vec<(usize, f32)> {
    let pool = top_k(scores, k.max(POOL));
    let (Some(&first), Some(&last)) = (pool.first(), pool.last()) else { return Vec::new() };
    let (hi, lo) = (scores[first], scores[last]);
    let several = pool.iter().any(|&i| document_of[i] != document_of[first]);
    if weight <= 0.0 || !several || hi <= lo {
        return pool.into_iter().take(k).map(|i| (i, scores[i])).collect();
    }
    let scaled = |i: usize| (scores[i] - lo) / (hi - lo);
    // Soft maximum per document: T·ln Σ exp(s/T), summed from the best page down so that the
    // sum starts at 1 and stays finite.
    let mut sums: std::collections::HashMap<usize, f32> = std::collections::HashMap::new();
    for &i in pool.iter().take(DOCUMENT_PAGES) {
        *sums.entry(document_of[i]).or_insert(0.0) += ((scaled(i) - 1.0) / TEMPERATURE).exp();
    }
    let soft: std::collections::HashMap<usize, f32> = sums.into_iter().map(|(d, sum)| (d, 1.0 + TEMPERATURE * sum.ln())).collect();
    let best = soft.values().copied().fold(f32::MIN, f32::max);
    let mut fused: Vec<(usize, f32)> = pool
        .into_iter()
        .map(|i| {
            let document = soft.get(&document_of[i]).map_or(0.0, |s| s / best);
            (i, (1.0 - weight) * scaled(i) + weight * document)
        })
        .collect();
    // Equal fused scores (at weight 1, every page of a document) keep the pages' own order.
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(scores[b.0].total_cmp(&scores[a.0])).then(a.0.cmp(&b.0)));
    fused.truncate(k);
    fused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_with_several_strong_pages_lifts_them_over_a_stray_page() {
        // Document 0 has one page at 0.88; document 1 has pages at 0.87, 0.86, 0.85; the rest
        // of the pool (document 2) is weak.
        let mut scores = vec![0.88, 0.87, 0.86, 0.85];
        let mut docs = vec![0, 1, 1, 1];
        for i in 0..40 {
            scores.push(0.1 + i as f32 * 0.001);
            docs.push(2);
        }
        let plain = rank_with_documents(&scores, &docs, 3, 0.0);
        assert_eq!(plain.iter().map(|h| h.0).collect::<Vec<_>>(), vec![0, 1, 2]);
        let fused = rank_with_documents(&scores, &docs, 3, 0.5);
        assert_eq!(fused.iter().map(|h| h.0).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert!(fused.iter().all(|h| (0.0..=1.0).contains(&h.1)), "{fused:?}");
        // At weight 1 pages come document by document, each document's in their own order.
        let grouped = rank_with_documents(&scores, &docs, 5, 1.0);
        assert_eq!(grouped.iter().map(|h| h.0).collect::<Vec<_>>(), vec![1, 2, 3, 0, 43]);
    }

    #[test]
    fn one_document_keeps_the_scores_order_and_values() {
        let scores = vec![0.2, 0.7, 0.5, f32::NAN, 0.9];
        let docs = vec![0; 5];
        assert_eq!(rank_with_documents(&scores, &docs, 10, 0.5), vec![(4, 0.9), (1, 0.7), (2, 0.5), (0, 0.2)]);
    }

    #[test]
    fn matches_a_plain_reference_on_random_scores() {
        // The same rule written out directly, over random scores, documents and sizes.
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20 {
            let n = 1 + (next() % 700) as usize;
            let k = 1 + (next() % 400) as usize;
            let scores: Vec<f32> = (0..n).map(|_| (next() % 10_000) as f32 / 997.0).collect();
            let docs: Vec<usize> = (0..n).map(|_| (next() % 7) as usize).collect();
            let got = rank_with_documents(&scores, &docs, k, 0.4);

            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
            order.truncate(k.max(POOL));
            let (hi, lo) = (scores[order[0]] as f64, scores[*order.last().unwrap()] as f64);
            let several = order.iter().any(|&i| docs[i] != docs[order[0]]);
            let want: Vec<(usize, f64)> = if !several || hi <= lo {
                order.iter().take(k).map(|&i| (i, scores[i] as f64)).collect()
            } else {
                let s = |i: usize| (scores[i] as f64 - lo) / (hi - lo);
                let mut soft = std::collections::HashMap::new();
                for &i in order.iter().take(DOCUMENT_PAGES) {
                    *soft.entry(docs[i]).or_insert(0.0) += (s(i) / TEMPERATURE as f64).exp();
                }
                let soft: std::collections::HashMap<usize, f64> = soft.into_iter().map(|(d, v)| (d, TEMPERATURE as f64 * f64::ln(v))).collect();
                let best = soft.values().copied().fold(f64::MIN, f64::max);
                let mut w: Vec<(usize, f64)> = order.iter().map(|&i| (i, 0.6 * s(i) + 0.4 * soft.get(&docs[i]).map_or(0.0, |v| v / best))).collect();
                w.sort_by(|a, b| b.1.total_cmp(&a.1).then(scores[b.0].total_cmp(&scores[a.0])).then(a.0.cmp(&b.0)));
                w.truncate(k);
                w
            };
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert!((g.1 as f64 - w.1).abs() < 1e-4, "n {n} k {k}: {g:?} against {w:?}");
            }
            // The same set of pages, allowing ties within rounding to swap.
            let score_of: std::collections::HashMap<usize, f64> = want.iter().copied().collect();
            for g in &got {
                let w = score_of.get(&g.0).copied().unwrap_or(f64::NAN);
                assert!((g.1 as f64 - w).abs() < 1e-4 || (g.1 as f64 - want.last().unwrap().1).abs() < 1e-4, "n {n} k {k}: page {} not in the reference", g.0);
            }
        }
    }
}
