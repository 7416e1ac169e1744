//! MLDocRAG's answer stage (`../shared/seeds/001_827639358b5293b8.txt`, §3.4) over the graph
//! `mldocrag-enrich` builds:
//!
//! 1. **query node retrieval** ([`graph::seed_nodes`]): the top `n` query nodes whose
//!    similarity to the question is at least α. The paper's α = 1.2 is a shifted score (a
//!    cosine never reaches 1.2; Elasticsearch's cosine scores are cos + 1), so the node passes
//!    when cos ≥ α − `shift` = 0.2;
//! 2. **expansion** ([`graph::expand`]): `hops` hops over query–query edges, each node's `knn`
//!    nearest queries (computed by the host from the stored query vectors);
//! 3. **chunk ranking** ([`graph::rank_chunks`]): a chunk scores the best similarity of its linked
//!    nodes; the pages of the top `rank_chunks` are read in rank order (the request's page order);
//! 4. **the answer**: the top `top_k` chunks in the paper's prompt A.3, its "Final Answer:" read,
//!    citing the chunks it rests on.
//!
//! Where this differs from the paper (README, "Where mldocrag differs from the paper"): the
//! similarity is the host's MiniLM sentence cosine, not BGE-m3, over a MaxSim candidate pool;
//! the answer reads chunk text (captions and cell text for figures and tables) unless the
//! generator takes images.

stage_kit::v2_world!("memory-stage");

pub mod graph;

use stage_kit::v2::types::{Citation, LogLevel, PageRef, Param, StoredArtifact};
use stage_kit::v2::{Host, Wasm, cite, field, param, text_request};
use stage_kit::{NOT_ANSWERABLE, cited_numbers, strip_markers, supporting_texts};

/// Settings from the profile.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Query nodes kept as seeds.
    pub n: usize,
    /// The paper's threshold on its shifted similarity.
    pub alpha: f32,
    /// What the paper's similarity adds to a cosine.
    pub shift: f32,
    pub hops: u32,
    pub knn: u32,
    /// Query nodes the MaxSim search offers for re-scoring by cosine.
    pub pool: u32,
    /// Chunks whose pages are read, in rank order.
    pub rank_chunks: usize,
    /// Chunks the answer reads (the paper's K).
    pub top_k: usize,
    pub answer_tokens: u32,
    pub temperature: f32,
}

/// Reads the profile's parameters.
pub fn settings(params: &[Param]) -> Result<Settings, String> {
    let s = Settings {
        n: param(params, "n", 10)?,
        alpha: param(params, "alpha", 1.2)?,
        shift: param(params, "shift", 1.0)?,
        hops: param(params, "hops", 2)?,
        knn: param(params, "knn", 3)?,
        pool: param(params, "pool", 100)?,
        rank_chunks: param(params, "rank_chunks", 10)?,
        top_k: param(params, "top_k", 5)?,
        answer_tokens: param(params, "answer_tokens", 96)?,
        temperature: param(params, "temperature", 0.0)?,
    };
    if s.n == 0 || s.pool == 0 || s.top_k == 0 || s.answer_tokens == 0 {
        return Err("parameters n, pool, top_k and answer_tokens must be at least 1".into());
    }
    if !(-1.0..=1.0).contains(&(s.alpha - s.shift)) {
        return Err(format!("alpha − shift = {} is not a cosine: it must lie in [−1, 1]", s.alpha - s.shift));
    }
    Ok(s)
}

/// Prompt A.3 of the paper.
pub const SYSTEM: &str = "You are a knowledgeable assistant that answers questions based on the given text and image data. \
-Guidelines- Carefully reason through the provided information before answering, but only use evidence explicitly supported by the text or image. \
If the answer cannot be determined from the provided data, clearly say you don't know. \
Avoid unnecessary explanations-respond concisely and directly. \
Present the final output in the format: Final Answer: [your answer]";

/// The answer after the reply's last "Final Answer:" (the whole reply without one, when the
/// model stopped by itself: a reply cut off at `answer_tokens` before its final answer is
/// reasoning, not an answer), or `None` when it says it does not know ("not specified", "no
/// information" and the like say so too).
pub fn final_answer(reply: &str, finished: bool) -> Option<String> {
    let text = match reply.rfind("Final Answer:") {
        Some(at) => &reply[at + "Final Answer:".len()..],
        None if !finished => return None,
        None => reply,
    };
    let text = strip_markers(text);
    let text = text.trim();
    // The prompt's "[your answer]" is sometimes copied with its brackets.
    let text = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')).filter(|t| !t.contains(['[', ']'])).unwrap_or(text).trim();
    let lower = text.to_lowercase().replace('’', "'");
    let abstains = [
        "don't know",
        "do not know",
        "cannot be determined",
        "can't be determined",
        "not answerable",
        "not_answerable",
        "unanswerable",
        "not specified",
        "not mentioned",
        "not provided",
        "not stated",
        "no information",
        "does not provide",
        "does not mention",
        "do not provide",
        "do not mention",
    ];
    (!text.is_empty() && !abstains.iter().any(|a| lower.contains(a))).then(|| text.to_string())
}

fn not_answerable(notes: String) -> Answer {
    Answer { text: NOT_ANSWERABLE.into(), answerable: false, citations: Vec::new(), notes }
}

fn page_of(chunk: &StoredArtifact) -> Option<PageRef> {
    chunk.artifact.anchor.page.map(|page| PageRef { document: chunk.document.clone(), page })
}

/// Retrieves over the graph and answers `question`.
pub fn answer(host: &impl Host, s: &Settings, question: &str) -> Result<Answer, String> {
    let min_cos = s.alpha - s.shift;
    let (seeds, passed) = graph::seed_nodes(host, question, s.pool, min_cos, s.n)?;
    host.log(LogLevel::Info, &format!("query nodes: {passed} of the pool above cos {min_cos:.2} (α {}), {} kept", s.alpha, seeds.len()));
    if seeds.is_empty() {
        return Ok(not_answerable(format!("no query node reaches cos {min_cos:.2} with the question")));
    }
    let (nodes, sizes) = graph::expand(host, question, seeds, s.hops, s.knn)?;
    host.log(LogLevel::Info, &format!("expanded: {} over {} hops (k {})", sizes.iter().map(usize::to_string).collect::<Vec<_>>().join(" → "), s.hops, s.knn));
    let ranked = graph::rank_chunks(&nodes);
    let mut chunks: Vec<(StoredArtifact, f32)> = Vec::new();
    for r in ranked.iter().take(s.rank_chunks.max(s.top_k)) {
        if let Some(c) = host.artifact(&r.document, &r.key)? {
            chunks.push((c, r.score));
        }
    }
    host.log(
        LogLevel::Info,
        &format!(
            "chunks: {}",
            chunks.iter().map(|(c, score)| format!("{} {score:.2} p{}", c.artifact.key, c.artifact.anchor.page.unwrap_or(0))).collect::<Vec<_>>().join(", ")
        ),
    );
    let mut read: Vec<PageRef> = Vec::new();
    for (c, _) in chunks.iter().take(s.rank_chunks) {
        if let Some(p) = page_of(c)
            && !read.contains(&p)
        {
            host.page(&p)?;
            read.push(p);
        }
    }
    let context: Vec<&StoredArtifact> = chunks.iter().take(s.top_k).map(|(c, _)| c).collect();
    if context.is_empty() {
        return Ok(not_answerable("the query nodes found link to no stored chunk".into()));
    }
    let contents: Vec<&str> = context.iter().map(|c| field(&c.artifact, "content").unwrap_or("")).collect();
    let listed: Vec<String> = context
        .iter()
        .zip(&contents)
        .enumerate()
        .map(|(i, (c, content))| {
            let caption = field(&c.artifact, "caption").unwrap_or("");
            let head = format!("[{}] (page {}, {})", i + 1, c.artifact.anchor.page.unwrap_or(0), field(&c.artifact, "modality").unwrap_or("text"));
            if caption.is_empty() { format!("{head}\n{content}") } else { format!("{head} {caption}\n{content}") }
        })
        .collect();
    let prompt = format!("Question: {question}\n\nData:\n{}\n\nCite the numbers [n] of the data you use.", listed.join("\n\n"));
    let generation = host.generate(&text_request(SYSTEM, &prompt, s.answer_tokens, s.temperature))?;
    let reply = generation.text;
    let Some(text) = final_answer(&reply, generation.finished) else {
        let why = if generation.finished { "the model did not know" } else { "the reply ran out of tokens before its final answer" };
        return Ok(not_answerable(format!("read {} chunks; {why}", context.len())));
    };
    let mut cited = cited_numbers(&reply, context.len());
    if cited.is_empty() {
        cited = supporting_texts(&text, &contents);
    }
    let mut citations: Vec<Citation> = Vec::new();
    for n in cited {
        let c = context[n - 1];
        if let Some(page) = page_of(c) {
            cite(&mut citations, page, &c.artifact.anchor.blocks);
        }
    }
    Ok(Answer { text, answerable: true, citations, notes: format!("{} query nodes, {} chunks read", nodes.len(), context.len()) })
}

struct MlDocRag;

impl Guest for MlDocRag {
    fn answer(ctx: StageContext, _plan: Plan, _evidence: Vec<QuestionEvidence>) -> Result<Answer, String> {
        answer(&Wasm, &settings(&ctx.params)?, &ctx.question)
    }
}

export!(MlDocRag);

#[cfg(test)]
mod tests;
