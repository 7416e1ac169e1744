//! Token pooling: fewer vectors per page for MaxSim, with little lost.
//!
//! A page's token vectors are clustered by Ward's hierarchical clustering into
//! `ceil(tokens / factor)` clusters, and each cluster is replaced by its mean, L2-normalised
//! (Clavié, Chaffin and Adams, "Reducing the footprint of multi-vector retrieval with minimal
//! performance impact via token pooling", 2024, who report a pool factor of 2 to 3 keeping
//! nearly all of ColBERT's retrieval quality). Near-duplicate tokens (a word repeated down a
//! table, stop words) collapse first, so the vectors MaxSim keeps are the page's distinct
//! meanings. The dendrogram is built by the nearest-neighbour chain in O(n²) time and memory,
//! which Ward's linkage allows because it is reducible.

/// Most tokens clustered together (a distance matrix of 4 MiB).
const MAX_RUN: usize = 1024;

/// Pools `tokens` (token after token, `dim` values each) by `factor`: the cluster means in the
/// order of each cluster's first token. A factor of 1 or less, or a page of at most one
/// token per cluster, is returned as it is.
pub fn pool_tokens(tokens: &[f32], dim: usize, factor: u32) -> Vec<f32> {
    let n = tokens.len().checked_div(dim).unwrap_or(0);
    if n > MAX_RUN {
        // Clustering is quadratic in tokens: a long page is pooled in even runs of at most
        // MAX_RUN consecutive tokens, which keeps the time and memory of one run bounded.
        let runs = n.div_ceil(MAX_RUN);
        return (0..runs).flat_map(|r| pool_tokens(&tokens[n * r / runs * dim..n * (r + 1) / runs * dim], dim, factor)).collect();
    }
    let clusters = n.div_ceil(factor.max(1) as usize);
    if factor <= 1 || clusters >= n {
        return tokens.to_vec();
    }
    let labels = ward_labels(tokens, dim, clusters);
    let mut sums = vec![0.0f32; clusters * dim];
    for (t, &c) in labels.iter().enumerate() {
        for (s, v) in sums[c * dim..(c + 1) * dim].iter_mut().zip(&tokens[t * dim..(t + 1) * dim]) {
            *s += v;
        }
    }
    for mean in sums.chunks_exact_mut(dim) {
        let norm = mean.iter().map(|v| v * v).sum::<f32>().sqrt();
        if norm > 0.0 {
            mean.iter_mut().for_each(|v| *v /= norm);
        }
    }
    sums
}

/// Each token's cluster, `0..clusters`, numbered in the order of the clusters' first tokens.
fn ward_labels(tokens: &[f32], dim: usize, clusters: usize) -> Vec<usize> {
    let n = tokens.len() / dim.max(1);
    let mut merges = nn_chain_merges(tokens, dim, n);
    // For a reducible linkage, the first n - k merges by cost give the k-cluster cut.
    merges.sort_by(|a, b| a.2.total_cmp(&b.2));
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for &(a, b, _) in merges.iter().take(n.saturating_sub(clusters.max(1))) {
        let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
        parent[ra.max(rb)] = ra.min(rb);
    }
    let mut number = vec![usize::MAX; n];
    let mut next = 0;
    (0..n)
        .map(|t| {
            let r = root(&mut parent, t);
            if number[r] == usize::MAX {
                number[r] = next;
                next += 1;
            }
            number[r]
        })
        .collect()
}

/// Every merge of Ward's dendrogram as (cluster a, cluster b, cost), a cluster named by a token
/// in it, in the order the chain finds them (not sorted).
fn nn_chain_merges(tokens: &[f32], dim: usize, n: usize) -> Vec<(usize, usize, f32)> {
    // Squared Euclidean distances; Lance–Williams keeps them as Ward's costs (scaled).
    let mut dist = vec![0.0f32; n * n];
    let norms: Vec<f32> = tokens.chunks_exact(dim).map(|x| dot(x, x)).collect();
    for i in 0..n {
        let x = &tokens[i * dim..(i + 1) * dim];
        for j in i + 1..n {
            let d = (norms[i] + norms[j] - 2.0 * dot(x, &tokens[j * dim..(j + 1) * dim])).max(0.0);
            dist[i * n + j] = d;
            dist[j * n + i] = d;
        }
    }
    let mut size = vec![1.0f32; n];
    let mut active = vec![true; n];
    let mut merges = Vec::with_capacity(n.saturating_sub(1));
    let mut chain: Vec<usize> = Vec::with_capacity(n);
    while merges.len() + 1 < n {
        if chain.is_empty() {
            chain.push(active.iter().position(|&a| a).unwrap_or(0));
        }
        let (a, b) = loop {
            let a = chain[chain.len() - 1];
            let previous = if chain.len() >= 2 { Some(chain[chain.len() - 2]) } else { None };
            // The nearest active cluster, preferring the chain's previous one on a tie so
            // that the chain always ends.
            let mut best = previous.unwrap_or(usize::MAX);
            let mut best_d = previous.map_or(f32::INFINITY, |p| dist[a * n + p]);
            for k in 0..n {
                if active[k] && k != a && dist[a * n + k] < best_d {
                    best = k;
                    best_d = dist[a * n + k];
                }
            }
            if Some(best) == previous {
                chain.pop();
                chain.pop();
                break (a, best);
            }
            chain.push(best);
        };
        merges.push((a, b, dist[a * n + b]));
        // `b` becomes the merged cluster.
        let (na, nb, dab) = (size[a], size[b], dist[a * n + b]);
        for k in 0..n {
            if !active[k] || k == a || k == b {
                continue;
            }
            let nk = size[k];
            let d = ((na + nk) * dist[a * n + k] + (nb + nk) * dist[b * n + k] - nk * dab) / (na + nb + nk);
            dist[b * n + k] = d;
            dist[k * n + b] = d;
        }
        size[b] = na + nb;
        active[a] = false;
    }
    merges
}

/// A dot product in sixteen running sums, which the compiler turns into vector code (one
/// running sum would fix the order of every addition and keep it scalar).
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0.0f32; 16];
    let (xc, yc) = (x.chunks_exact(16), y.chunks_exact(16));
    let tail: f32 = xc.remainder().iter().zip(yc.remainder()).map(|(a, b)| a * b).sum();
    for (a, b) in xc.zip(yc) {
        for k in 0..16 {
            acc[k] += a[k] * b[k];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Noise;

    fn noise(seed: u64, n: usize) -> Vec<f32> {
        Noise::new(seed).uniform(n)
    }

    fn unit(mut v: Vec<f32>, dim: usize) -> Vec<f32> {
        for t in v.chunks_exact_mut(dim) {
            let n = t.iter().map(|x| x * x).sum::<f32>().sqrt();
            t.iter_mut().for_each(|x| *x /= n);
        }
        v
    }

    /// Ward's clustering the slow, obvious way: merge the pair whose merge raises the within-
    /// cluster sum of squares least, until `k` clusters remain.
    fn ward_reference(tokens: &[f32], dim: usize, k: usize) -> Vec<usize> {
        let n = tokens.len() / dim;
        let mut clusters: Vec<Vec<usize>> = (0..n).map(|i| vec![i]).collect();
        let mean = |c: &[usize]| -> Vec<f64> {
            let mut m = vec![0.0f64; dim];
            for &i in c {
                for d in 0..dim {
                    m[d] += f64::from(tokens[i * dim + d]);
                }
            }
            m.iter().map(|v| v / c.len() as f64).collect()
        };
        while clusters.len() > k {
            let mut best = (f64::INFINITY, 0, 0);
            for i in 0..clusters.len() {
                for j in i + 1..clusters.len() {
                    let (mi, mj) = (mean(&clusters[i]), mean(&clusters[j]));
                    let (ni, nj) = (clusters[i].len() as f64, clusters[j].len() as f64);
                    let cost = ni * nj / (ni + nj) * mi.iter().zip(&mj).map(|(a, b)| (a - b) * (a - b)).sum::<f64>();
                    if cost < best.0 {
                        best = (cost, i, j);
                    }
                }
            }
            let gone = clusters.remove(best.2);
            clusters[best.1].extend(gone);
        }
        let mut labels = vec![0; n];
        let mut order: Vec<&Vec<usize>> = clusters.iter().collect();
        order.sort_by_key(|c| *c.iter().min().expect("clusters are not empty"));
        for (l, c) in order.iter().enumerate() {
            for &i in c.iter() {
                labels[i] = l;
            }
        }
        labels
    }

    #[test]
    fn matches_ward_done_the_slow_way() {
        for (seed, n, dim, k) in [(1, 9, 3, 4), (2, 30, 8, 10), (3, 41, 5, 14), (4, 17, 16, 1), (5, 25, 2, 24), (6, 64, 12, 22)] {
            let tokens = noise(seed, n * dim);
            assert_eq!(ward_labels(&tokens, dim, k), ward_reference(&tokens, dim, k), "seed {seed}: {n} tokens into {k}");
        }
    }

    #[test]
    fn separated_groups_pool_to_their_means() {
        let dim = 6;
        let centres = unit(noise(9, 3 * dim), dim);
        // Four tokens near each of three directions, interleaved.
        let mut tokens = Vec::new();
        let jitter = noise(10, 12 * dim);
        for t in 0..12 {
            let c = t % 3;
            tokens.extend((0..dim).map(|d| centres[c * dim + d] + 0.01 * jitter[t * dim + d]));
        }
        let tokens = unit(tokens, dim);
        let pooled = pool_tokens(&tokens, dim, 4);
        assert_eq!(pooled.len(), 3 * dim);
        for c in 0..3 {
            let cos: f32 = pooled[c * dim..(c + 1) * dim].iter().zip(&centres[c * dim..(c + 1) * dim]).map(|(a, b)| a * b).sum();
            assert!(cos > 0.999, "cluster {c} is the mean of its group: cos {cos}");
        }
    }

    #[test]
    fn keeps_a_cluster_per_factor_tokens_each_of_unit_length() {
        let dim = 10;
        for (n, factor, want) in [(101, 2, 51), (101, 3, 34), (7, 1, 7), (1, 3, 1), (0, 2, 0), (5, 9, 1)] {
            let tokens = unit(noise(n as u64, n * dim), dim);
            let pooled = pool_tokens(&tokens, dim, factor);
            assert_eq!(pooled.len(), want * dim, "{n} tokens by {factor}");
            for v in pooled.chunks_exact(dim) {
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
            }
        }
        let tokens = noise(3, 8 * dim);
        assert_eq!(pool_tokens(&tokens, dim, 1), tokens, "factor 1 keeps every vector");
        // Past one run, each run is pooled on its own: 2,500 tokens in runs of 833, 833, 834.
        let dim = 4;
        let long = unit(noise(4, 2500 * dim), dim);
        assert_eq!(pool_tokens(&long, dim, 3).len(), (278 + 278 + 278) * dim);
        assert_eq!(pool_tokens(&long[..833 * dim], dim, 3), pool_tokens(&long, dim, 3)[..278 * dim]);
    }
}
