//! Retrieval over the Multimodal Chunk-Query Graph (the paper's §3.4(1)–(2)): query nodes above
//! the threshold, expanded over their nearest queries, chunks scored by their best query.

use std::collections::HashMap;

use stage_kit::v2::types::{SearchMode, StoredArtifact};
use stage_kit::v2::{Host, field};

/// A query node reached for a question, with its similarity to the question.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub document: String,
    pub key: String,
    /// The chunk it was written for.
    pub chunk: String,
    /// cos(q^u, q): the question's and the node's MiniLM sentence vectors.
    pub similarity: f32,
    /// Hops from a seed (0 for a seed).
    pub hop: u32,
}

fn node(a: &StoredArtifact, similarity: f32, hop: u32) -> Option<Node> {
    let chunk = field(&a.artifact, "chunk")?.to_string();
    Some(Node { document: a.document.clone(), key: a.artifact.key.clone(), chunk, similarity, hop })
}

/// Q_ret: the `n` query nodes most similar to `question` with cos ≥ `min_cos`, best first. The
/// host has no cosine search, so a MaxSim pool of `pool` query nodes is re-scored by cosine.
/// Also how many of the pool passed the threshold.
pub fn seed_nodes(host: &impl Host, question: &str, pool: u32, min_cos: f32, n: usize) -> Result<(Vec<Node>, usize), String> {
    let hits = host.search_artifacts(question, "query", SearchMode::Maxsim, 0.0, pool, &[])?;
    if hits.is_empty() {
        return Ok((Vec::new(), 0));
    }
    let texts: Vec<String> = hits.iter().map(|h| h.found.artifact.text.clone()).collect();
    let cos = host.similarities(question, &texts)?;
    let mut nodes: Vec<Node> = hits.iter().zip(cos).filter(|(_, c)| *c >= min_cos).filter_map(|(h, c)| node(&h.found, c, 0)).collect();
    let passed = nodes.len();
    nodes.sort_by(|a, b| b.similarity.total_cmp(&a.similarity));
    nodes.truncate(n);
    Ok((nodes, passed))
}

/// Q_exp: the seeds and every query node within `hops` hops over query–query edges (each
/// node's `knn` nearest queries of its document), each reached once and scored by its own
/// cosine to the question. Also the number of nodes after each hop.
pub fn expand(host: &impl Host, question: &str, seeds: Vec<Node>, hops: u32, knn: u32) -> Result<(Vec<Node>, Vec<usize>), String> {
    let mut all = seeds;
    let mut sizes = vec![all.len()];
    let mut frontier: Vec<usize> = (0..all.len()).collect();
    for hop in 1..=hops {
        let mut found: Vec<StoredArtifact> = Vec::new();
        for &i in &frontier {
            let (document, key) = (all[i].document.clone(), all[i].key.clone());
            for h in host.neighbours(&document, &key, knn)? {
                let seen = |d: &str, k: &str| d == h.found.document && k == h.found.artifact.key;
                if !all.iter().any(|n| seen(&n.document, &n.key)) && !found.iter().any(|f| seen(&f.document, &f.artifact.key)) {
                    found.push(h.found);
                }
            }
        }
        if found.is_empty() {
            sizes.push(all.len());
            break;
        }
        let texts: Vec<String> = found.iter().map(|f| f.artifact.text.clone()).collect();
        let cos = host.similarities(question, &texts)?;
        let start = all.len();
        all.extend(found.iter().zip(cos).filter_map(|(f, c)| node(f, c, hop)));
        frontier = (start..all.len()).collect();
        sizes.push(all.len());
    }
    Ok((all, sizes))
}

/// A chunk reached through its query nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct RankedChunk {
    pub document: String,
    pub key: String,
    /// The best similarity of its linked query nodes in Q_exp (the paper's Max, which beats Mean).
    pub score: f32,
}

/// C_cand, best first: each chunk linked to a node of `nodes`, scored by its best node.
pub fn rank_chunks(nodes: &[Node]) -> Vec<RankedChunk> {
    let mut best: HashMap<(&str, &str), f32> = HashMap::new();
    for n in nodes {
        let e = best.entry((n.document.as_str(), n.chunk.as_str())).or_insert(f32::NEG_INFINITY);
        *e = e.max(n.similarity);
    }
    let mut out: Vec<RankedChunk> = best.into_iter().map(|((d, k), score)| RankedChunk { document: d.into(), key: k.into(), score }).collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.document.cmp(&b.document)).then_with(|| a.key.cmp(&b.key)));
    out
}
